"""The state extractor: a transcript of tool calls → the concrete state the spec reads.

The state is a JSON object whose fields are always present (so no predicate ever
reads a missing field)::

    {
      "steps": 3,                                   # tool calls so far
      "tools_called": ["http_get", "read_file"],    # distinct names, first use first
      "last_call": {"tool": "read_file", "kind": "read_file", "args": {...}, "status": "success"},
      "untrusted_input": true,      # read a web page, search results or an inbox
      "injection_suspected": false, # that content gave the agent instructions
      "secrets_read": true,         # read a credential (by path, command or content)
      "shell": {"commands": 0, "destructive": false},
      "files": {"read": 1, "written": 0, "deleted": 0},
      "external_sends": 0,          # calls that sent data outside the organisation
      "exfiltration": false,        # data left after a secret was read, or carried one
      "recipients": {"external": [], "unconsented": []},
      "payments": {"count": 0, "total": 0.0, "max_amount": 0.0, "max_unconfirmed": 0.0},
      "payment_limit": 500.0,
      "messages": {"sent": 0, "recipients": [], "secret_shared": false},  # chat messages
      "errors": 0                   # calls that failed
    }

A proposed call (a look-ahead) counts as if it were about to succeed: its effects that
show in its arguments count, those only its result could show do not. A failed call
has no effect, except an attempted destructive command, which counts as attempted.

Consent is the user's: an external recipient is consented when the user's own messages
name the address, the host or its domain, and a payment is confirmed when they state
its amount. A call a human approved through the guard is consented and confirmed.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ...errors import ConfigError
from .kinds import (
    ARGUMENT_NAMES,
    DEFAULT_INTERNAL_DOMAINS,
    DEFAULT_TOOL_KINDS,
    READ_KINDS,
    ToolKind,
    amounts_in,
    email_domain,
    has_injection,
    has_secret,
    is_destructive,
    is_internal_address,
    is_internal_host,
    is_metadata_host,
    is_secret_path,
    parse_amount,
    reads_secret,
    shell_upload_hosts,
    url_host,
)
from .transcript import CallStatus, ExtractionError, ToolStep, Transcript

_CACHE_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class _Facts:
    """What one call does, independent of the rest of the run (cached per call)."""

    kind: ToolKind
    effective: bool
    shell: bool = False
    destructive: bool = False
    untrusted: bool = False
    injection: bool = False
    secret: bool = False
    reads: int = 0
    writes: int = 0
    deletes: int = 0
    destinations: tuple[str, ...] = ()  # external addresses or hosts data was sent to
    carries_secret: bool = False
    amount: float | None = None
    chat: tuple[str, ...] | None = None  # a chat message's recipients (channels, people), None for no message


def initial_state(payment_limit: float = 500.0) -> dict[str, Any]:
    """The state of a run in which no tool has been called yet."""
    return {
        "steps": 0,
        "tools_called": [],
        "last_call": {"tool": "", "kind": "none", "args": {}, "status": "none"},
        "untrusted_input": False,
        "injection_suspected": False,
        "secrets_read": False,
        "shell": {"commands": 0, "destructive": False},
        "files": {"read": 0, "written": 0, "deleted": 0},
        "external_sends": 0,
        "exfiltration": False,
        "recipients": {"external": [], "unconsented": []},
        "payments": {"count": 0, "total": 0.0, "max_amount": 0.0, "max_unconfirmed": 0.0},
        "payment_limit": float(payment_limit),
        "messages": {"sent": 0, "recipients": [], "secret_shared": False},
        "errors": 0,
    }


def violations(state: dict[str, Any]) -> list[str]:
    """The hazards a state is in, by the names of the spec's unsafe predicates.

    The Python twin of the spec's ``unsafe`` (tests keep the two in agreement); the
    generator uses it to end a run at its first violation and label the outcome.
    """
    found = []
    if state["exfiltration"]:
        found.append("exfiltration")
    if state["shell"]["destructive"]:
        found.append("destructive_command")
    if state["payments"]["max_unconfirmed"] > state["payment_limit"]:
        found.append("unconfirmed_large_payment")
    if state["recipients"]["unconsented"]:
        found.append("unconsented_recipient")
    return found


class ToolStateExtractor:
    """The default extractor for tool-using agents (shell, files, HTTP, e-mail, payments, chat).

    Args:
        tool_kinds: your tool names → kinds (``ToolKind`` or its value, e.g.
            ``{"run_sql": "shell"}``), on top of :data:`DEFAULT_TOOL_KINDS`; a name in
            neither is ``other`` (harmless).
        internal_domains: e-mail domains and host suffixes inside the organisation;
            sending there is not an external send, and fetching from there is trusted.
        payment_limit: payments above this amount need the user's confirmation.
        argument_aliases: per tool, its argument names → the canonical ones its kind reads,
            e.g. ``{"run_sql": {"query": "command"}}`` with ``tool_kinds={"run_sql": "shell"}``.
        descriptions: tool → ``{"text": its description, "findings": [kinds]}`` (the MCP proxy's, kept up to date
            as servers list their tools); given, ``last_call`` also carries ``description`` and
            ``description_findings`` (empty for a tool not described), for predicates to weigh.

    Calling the extractor on a :class:`Transcript` returns the state (a new dict).

    Raises:
        ExtractionError: for a call of a known kind whose arguments it cannot read (a
            missing command, a recipient that is not an address, an amount that is not
            a number); the guard never treats an unreadable call as harmless.
    """

    def __init__(self, *, tool_kinds: Mapping[str, ToolKind | str] | None = None,
                 internal_domains: Sequence[str] | None = None, payment_limit: float = 500.0,
                 argument_aliases: Mapping[str, Mapping[str, str]] | None = None,
                 descriptions: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.descriptions = descriptions
        kinds = dict(DEFAULT_TOOL_KINDS)
        for name, kind in (tool_kinds or {}).items():
            try:
                kinds[name] = ToolKind(kind)
            except ValueError:
                known = ", ".join(k.value for k in ToolKind)
                raise ConfigError(f"tool_kinds[{name!r}] = {kind!r} is not a tool kind; known: {known}") from None
        self.tool_kinds = kinds
        domains = DEFAULT_INTERNAL_DOMAINS if internal_domains is None else tuple(internal_domains)
        self.internal_domains = tuple(d.lower().lstrip(".") for d in domains)
        if payment_limit < 0:
            raise ConfigError(f"payment_limit={payment_limit!r} must not be negative")
        self.payment_limit = float(payment_limit)
        self.argument_aliases = {tool: dict(names) for tool, names in (argument_aliases or {}).items()}
        for tool, names in self.argument_aliases.items():
            canonical = {n for _, accepted, _ in ARGUMENT_NAMES[self.kind_of(tool)] for n in accepted[:1]}
            wrong = sorted(set(names.values()) - canonical)
            if wrong:
                raise ConfigError(f"argument_aliases[{tool!r}]: {wrong} are not arguments a "
                                  f"{self.kind_of(tool).value} tool reads; its arguments: {sorted(canonical)}")
        self._cache: dict[tuple[Any, ...], tuple[_Facts, dict[str, Any]]] = {}
        self._amounts: dict[str, set[float]] = {}
        self._memo: tuple[tuple[str, ...], tuple[ToolStep, ...], dict[str, Any]] | None = None

    def kind_of(self, name: str) -> ToolKind:
        return self.tool_kinds.get(name, ToolKind.OTHER)

    def knows(self, name: str) -> bool:
        """Whether a tool has a kind here (an unknown one is ``other``, of effects unknown to the guard)."""
        return name in self.tool_kinds

    def reads_only(self, name: str) -> bool:
        """Whether calls to ``name`` only read (a kind in :data:`READ_KINDS`); unknown tools do not."""
        kind = self.tool_kinds.get(name)
        return kind is not None and kind in READ_KINDS

    def __call__(self, transcript: Transcript) -> dict[str, Any]:
        steps = transcript.steps
        if not steps:
            return self._described(initial_state(self.payment_limit))
        users = transcript.user_messages
        # An agent's transcript grows a call at a time: resume the fold where the last call
        # left it (all but its last step, which is often a proposed call), so a step costs
        # the same at the hundredth call as at the first.
        memo = self._memo
        if memo is not None and memo[0] == users and len(memo[1]) < len(steps) and _same_prefix(memo[1], steps):
            done, state = len(memo[1]), _copy(memo[2])
        else:
            done, state = 0, initial_state(self.payment_limit)
        user_text, user_amounts = self._user_words(users)
        for index in range(done, len(steps)):
            if index == len(steps) - 1 and index != done:  # else the memo already holds this prefix
                self._memo = (users, steps[:index], _copy(state))
            self._fold(state, steps[index], user_text, user_amounts)
        return self._described(_last(state, len(steps), steps[-1], self.kind_of(steps[-1].name)))

    def then(self, state: Mapping[str, Any], step: ToolStep, user_messages: tuple[str, ...] = ()) -> dict[str, Any]:
        """The state after one more call: ``state`` is this extractor's state of a transcript whose user
        messages are ``user_messages``, the result is its state with ``step`` appended (a new dict).

        For a caller that keeps its session's state (the MCP proxy): a call costs the call alone,
        with no transcript to copy or compare, however long the session.

        Raises:
            ExtractionError: as calling the extractor on the longer transcript does.
        """
        out = _copy(state)
        self._fold(out, step, *self._user_words(user_messages))
        return self._described(_last(out, int(state["steps"]) + 1, step, self.kind_of(step.name)))

    def _described(self, state: dict[str, Any]) -> dict[str, Any]:
        """The state with its last call's description words, when the extractor was given descriptions."""
        if self.descriptions is not None:
            last = state["last_call"] = dict(state["last_call"])
            described = self.descriptions.get(last["tool"]) or {}
            last["description"] = str(described.get("text", ""))
            last["description_findings"] = list(described.get("findings", ()))
        return state

    def _user_words(self, users: tuple[str, ...]) -> tuple[str, set[float]]:
        """The user's messages as one lower-case text, and the amounts they state (cached)."""
        user_text = "\n".join(users).lower()
        user_amounts = self._amounts.get(user_text)
        if user_amounts is None:
            if len(self._amounts) >= _CACHE_LIMIT:
                self._amounts.clear()
            user_amounts = self._amounts[user_text] = amounts_in(user_text) if user_text else set()
        return user_text, user_amounts

    def _fold(self, state: dict[str, Any], step: ToolStep, user_text: str, user_amounts: set[float]) -> None:
        """Add one call's effects to the state."""
        facts, _ = self._facts(step)
        if step.name not in state["tools_called"]:
            state["tools_called"].append(step.name)
        if step.status is CallStatus.ERROR:
            state["errors"] += 1
        shell = state["shell"]
        if facts.shell:
            shell["commands"] += 1
        if facts.destructive:
            shell["destructive"] = True
        if not facts.effective:
            return
        files = state["files"]
        files["read"] += facts.reads
        files["written"] += facts.writes
        files["deleted"] += facts.deletes
        if facts.untrusted:
            state["untrusted_input"] = True
            if facts.injection:
                state["injection_suspected"] = True
        if facts.destinations:
            state["external_sends"] += 1
            if (state["secrets_read"] or facts.carries_secret) and not step.approved:
                state["exfiltration"] = True
            external, unconsented = state["recipients"]["external"], state["recipients"]["unconsented"]
            for destination in facts.destinations:
                if destination not in external:
                    external.append(destination)
                if not step.approved and not _named(destination, user_text) and destination not in unconsented:
                    unconsented.append(destination)
        if facts.amount is not None:
            amount, payments = facts.amount, state["payments"]
            payments["count"] += 1
            payments["total"] += amount
            payments["max_amount"] = max(payments["max_amount"], amount)
            confirmed = step.approved or any(abs(amount - a) < 0.005 for a in user_amounts)
            if not confirmed:
                payments["max_unconfirmed"] = max(payments["max_unconfirmed"], amount)
        if facts.chat is not None:
            messages = state["messages"]
            messages["sent"] += 1
            messages["recipients"].extend(r for r in facts.chat if r not in messages["recipients"])
            if facts.carries_secret and not step.approved:
                messages["secret_shared"] = True
        if facts.secret:
            state["secrets_read"] = True

    # -- one call -----------------------------------------------------------------

    def argument_classes(self, step: ToolStep) -> tuple[str, ...]:
        """What this call does, in words (sorted): the classes ``action.classes`` lists (guard/actions.py).

        Raises:
            ExtractionError: as reading the call's arguments does.
        """
        facts, _ = self._facts(step)
        found = [name for name, present in (
            ("untrusted_source", facts.untrusted), ("reads_secret", facts.secret), ("destructive", facts.destructive),
            ("external", bool(facts.destinations)), ("carries_secret", facts.carries_secret),
            ("payment", facts.amount is not None),
            ("over_limit", facts.amount is not None and facts.amount > self.payment_limit),
            ("message", facts.chat is not None), ("shell", facts.shell)) if present]
        return tuple(sorted(found))

    def _facts(self, step: ToolStep) -> tuple[_Facts, dict[str, Any]]:
        try:
            args_key = orjson.dumps(step.args, option=orjson.OPT_SORT_KEYS, default=repr)
        except TypeError:  # keys that are not strings: not a JSON object, let reading complain
            args_key = repr(step.args).encode()
        key = (step.name, args_key, step.status, step.result)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._analyse(step)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def read_arguments(self, step: ToolStep) -> dict[str, Any]:
        """The arguments this kind of tool needs, under their canonical names.

        Raises:
            ExtractionError: when the arguments are not an object or a required one is
                missing or of the wrong type.
        """
        kind = self.kind_of(step.name)
        wanted = ARGUMENT_NAMES[kind]
        if not wanted:
            return {}
        args = step.args
        aliases = self.argument_aliases.get(step.name)
        if aliases and isinstance(args, Mapping):
            args = {aliases.get(k, k): v for k, v in args.items()}
        if isinstance(args, str) and len(wanted) == 1:
            args = {wanted[0][1][0]: args}  # a single-input tool called with a bare string
        if not isinstance(args, Mapping):
            raise ExtractionError(step.name, step.args,
                                  f"expected an object of arguments for a {kind.value} tool, "
                                  f"got {type(args).__name__}")
        fields: dict[str, Any] = {}
        for field, names, required in wanted:
            present = next((n for n in names if n in args and args[n] is not None), None)
            if present is None:
                if required:
                    raise ExtractionError(step.name, step.args,
                                          f"a {kind.value} tool needs its {field!r} argument, under one of the "
                                          f"names {list(names)}; got {sorted(map(str, args))}")
                continue
            fields[field] = args[present]
        return fields

    def _analyse(self, step: ToolStep) -> tuple[_Facts, dict[str, Any]]:
        kind = self.kind_of(step.name)
        fields = self.read_arguments(step)
        effective = step.status is not CallStatus.ERROR
        result = step.result if step.status is CallStatus.SUCCESS and step.result else ""
        result_secret = bool(result) and has_secret(result)
        if kind is ToolKind.HTTP:
            method = fields.get("method", "GET")
            if not isinstance(method, str):
                raise ExtractionError(step.name, step.args, f"'method' must be a string, got {method!r}")
            kind = ToolKind.HTTP_GET if method.strip().upper() in ("GET", "HEAD", "OPTIONS", "") else ToolKind.HTTP_POST
        if kind is ToolKind.SHELL:
            command = _text(step, fields["command"], "command")
            outside = tuple(h for h in shell_upload_hosts(command) if not is_internal_host(h, self.internal_domains))
            facts = _Facts(kind, effective, shell=True, destructive=is_destructive(command),
                           secret=effective and (reads_secret(command) or result_secret),
                           destinations=outside, carries_secret=bool(outside) and has_secret(command))
        elif kind in (ToolKind.READ_FILE, ToolKind.WRITE_FILE, ToolKind.DELETE_FILE):
            path = _text(step, fields["path"], "path")
            if kind is ToolKind.READ_FILE:
                facts = _Facts(kind, effective, reads=1, secret=effective and (is_secret_path(path) or result_secret))
            elif kind is ToolKind.WRITE_FILE:
                facts = _Facts(kind, effective, writes=1)
            else:
                facts = _Facts(kind, effective, deletes=1, destructive=_is_root_like(path))
        elif kind is ToolKind.HTTP_GET:
            host = self._host(step, fields["url"])
            internal = is_internal_host(host, self.internal_domains)
            facts = _Facts(kind, effective, untrusted=not internal, injection=not internal and has_injection(result),
                           secret=effective and (is_metadata_host(host) or result_secret))
        elif kind is ToolKind.HTTP_POST:
            host = self._host(step, fields["url"])
            internal = is_internal_host(host, self.internal_domains)
            body = fields.get("body")
            body_text = body if isinstance(body, str) else orjson.dumps(body, default=repr).decode() if body else ""
            facts = _Facts(kind, effective, destinations=() if internal else (host,),
                           carries_secret=not internal and has_secret(body_text), secret=effective and result_secret)
        elif kind in (ToolKind.WEB_SEARCH, ToolKind.EMAIL_READ):
            facts = _Facts(kind, effective, untrusted=True, injection=has_injection(result),
                           secret=effective and result_secret)
        elif kind is ToolKind.EMAIL_SEND:
            recipients = _recipients(step, fields["to"]) + (_recipients(step, fields["cc"]) if "cc" in fields else [])
            if not recipients:
                raise ExtractionError(step.name, step.args, "an e-mail needs at least one recipient")
            outbound: list[str] = []
            for address in recipients:
                domain = email_domain(address)
                if domain is None:
                    raise ExtractionError(step.name, step.args,
                                          f"recipient {address!r} is not an e-mail address")
                if not is_internal_address(domain, self.internal_domains):
                    outbound.append(_bare(address))
            body = fields.get("body")
            facts = _Facts(kind, effective, destinations=tuple(outbound),
                           carries_secret=bool(outbound) and isinstance(body, str) and has_secret(body))
        elif kind is ToolKind.PAYMENT:
            amount = parse_amount(fields["amount"])
            if amount is None or amount < 0:
                raise ExtractionError(step.name, step.args,
                                      f"'amount' must be a non-negative number, got {fields['amount']!r}")
            facts = _Facts(kind, effective, amount=amount)
        elif kind is ToolKind.MESSAGE:
            recipients = [r.lower() for r in _recipients(step, fields["to"])]
            if not recipients:
                raise ExtractionError(step.name, step.args, "a message needs a channel or a recipient")
            # a channel or user name is inside the workspace; an e-mail address outside the
            # organisation (a shared channel's guest, a direct message to a partner) is an external send
            outside = tuple(_bare(r) for r in recipients
                            if (d := email_domain(r)) is not None and not is_internal_address(d, self.internal_domains))
            text = fields.get("text")
            secret = isinstance(text, str) and has_secret(text)
            facts = _Facts(kind, effective, destinations=outside, carries_secret=secret,
                           secret=effective and result_secret, chat=tuple(recipients))
        else:
            facts = _Facts(kind, effective, secret=effective and result_secret)
        return facts, fields

    def _host(self, step: ToolStep, url: Any) -> str:
        host = url_host(_text(step, url, "url"))
        if host is None:
            raise ExtractionError(step.name, step.args, f"'url' {url!r} has no host")
        return host


def _text(step: ToolStep, value: Any, field: str) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return " ".join(value)
    if not isinstance(value, str):
        raise ExtractionError(step.name, step.args, f"{field!r} must be a string, got {type(value).__name__}")
    return value


def _recipients(step: ToolStep, value: Any) -> list[str]:
    if isinstance(value, str):
        parts = value.replace(";", ",").split(",")
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        parts = list(value)
    else:
        raise ExtractionError(step.name, step.args,
                              f"recipients must be a string or a list of strings, got {type(value).__name__}")
    return [p.strip() for p in parts if p.strip()]


def _bare(address: str) -> str:
    text = address.strip()
    if "<" in text and text.endswith(">"):
        text = text[text.rindex("<") + 1:-1]
    return text.lower()


def _named(destination: str, user_text: str) -> bool:
    """Whether the user's own words name this address or host, or its domain."""
    if not user_text:
        return False
    domain = destination.rpartition("@")[2]
    labels = domain.split(".")
    candidates = [destination] + [".".join(labels[i:]) for i in range(len(labels) - 1)]
    return any(re.search(r"(?<![\w.@-])" + re.escape(c) + r"(?![\w-])", user_text) for c in candidates)


def _same_prefix(prefix: tuple[ToolStep, ...], steps: tuple[ToolStep, ...]) -> bool:
    # tuple equality compares item by item in C, identity first: a long session's steps, shared by
    # the transcripts that grew them, cost a pointer comparison each
    return steps[:len(prefix)] == prefix


def _last(state: dict[str, Any], steps: int, last: ToolStep, kind: ToolKind) -> dict[str, Any]:
    """``state`` with the fields that describe the run's length and its last call set."""
    state["steps"] = steps
    state["last_call"] = {"tool": last.name, "kind": kind.value,
                          "args": dict(last.args) if isinstance(last.args, Mapping) else {"value": last.args},
                          "status": last.status.value}
    return state


def _copy(state: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a state that shares nothing mutable with it."""
    out = dict(state)
    out["tools_called"] = list(state["tools_called"])
    out["shell"] = dict(state["shell"])
    out["files"] = dict(state["files"])
    out["payments"] = dict(state["payments"])
    out["messages"] = {**state["messages"], "recipients": list(state["messages"]["recipients"])}
    out["recipients"] = {"external": list(state["recipients"]["external"]),
                         "unconsented": list(state["recipients"]["unconsented"])}
    return out


def _is_root_like(path: str) -> bool:
    return path.strip().rstrip("/") in ("", "~", "$HOME", "/etc", "/usr", "/var", "/home", "/bin", "/boot")
