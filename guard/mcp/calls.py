"""What both ways of serving the proxy share about a ``tools/call``: the sessions, the judging loop
(verdict, audit row, span, asking a human, an approver's edit judged again), and committing a call
that ran (the state it led to, the audit store, the sidecar, the recording).

:class:`CallJudge` is the base of :class:`.proxy.GuardedProxy` (the SDK's server in front of SDK
clients of the upstreams) and is what :mod:`.stdio.relay` (stdio, one upstream, frames passed through
as bytes) judges with, so the two paths decide alike by construction.
"""
from __future__ import annotations

import functools
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import orjson
from mcp.shared.exceptions import MCPError

from ...errors import ConfigError
from ..bundle_guard import BundleGuard
from ..client import ServerError, SidecarUnreachable
from ..client._core import unreachable
from ..policy import Policy
from ..runtime import Decision
from ..spec import Action, Trigger
from ..telemetry import record_decision
from ..thresholds import with_default_trigger
from ..toolcalls.extractor import ToolStateExtractor
from ..toolcalls.transcript import CallStatus, ToolStep, Transcript, describe_call
from .approval import Approval, Elicit, ask_human
from .audit import AuditStore
from .config import ProxyConfig
from .gate import ToolGate
from .judge import DecisionHook, GuardedSession, Verdict, held_back_text, judge
from .recording import SessionLog, TraceWriter
from .stops import RESET_TOOL, refusal_text, refuses, reset, stop_text

log = logging.getLogger("forewarn.mcp")

SESSION_STOPPED = -32020
ARGUMENTS_TOO_LARGE = -32021
GUARD_UNREACHABLE = -32022  # with --serve-url: the sidecar did not answer before the call ran, so it did not run
SERVER_NAME, SERVER_TITLE = "forewarn-mcp", "Forewarn guarding proxy"  # the proxy's serverInfo, either path
INSTRUCTIONS = ("Tool calls pass through Forewarn, which may hold back a risky call (its result then says why) "
                "or ask a human first.")
_AUDIT_STATUS = {Action.ALLOW: ("allowed", ""), Action.REFLECT: ("held", "reflect: "),
                 Action.STOP: ("held", "stop (the session is stopped): "), Action.ASK_HUMAN: ("pending", "")}
_MAX_EDITS = 5  # edits of one call judged again; past that the approvers' answer is a refusal

Judged = tuple[Verdict, Mapping[str, Any] | None]  # a call's verdict and the state it would lead to (judge)


@dataclass
class Forward:
    """A call the judging let through: forward ``name`` with ``args``, then :meth:`CallJudge.finish`."""

    name: str
    args: dict[str, Any]
    approved: bool  # a human approved or edited it: its step is marked approved, as the middleware marks it
    proposal: str | None = None  # the console proposal the step is linked to
    audited: str | None = None  # the judged call's row in the local audit store
    edits: list[str] = field(default_factory=list)  # what the approvers changed, told to the model with the result
    judged: Verdict | None = None  # the allowing verdict, until :meth:`CallJudge.forwarded` records it


class CallJudge:
    """The guard, the settings and the sessions of a proxy, and the judging every path shares."""

    def __init__(self, guard: Any | None, config: ProxyConfig, *, policy: Policy | None = None,
                 trigger: Trigger | str | None = None, record: str | None = None, sidecar: Any = None,
                 model_name: str | None = None, on_decision: DecisionHook | None = None,
                 audit: AuditStore | None = None) -> None:
        if guard is not None:
            effective = with_default_trigger(policy or guard.policy, trigger)
            if policy is None and isinstance(guard, BundleGuard):  # each member keeps its own thresholds
                guard = guard.with_member_policies(lambda p: with_default_trigger(p, trigger))
            else:
                guard = guard if effective == guard.policy else guard.with_policy(effective)
        self.guard = guard
        self.config = config
        # (gateway: descriptions judged and pinned, results redacted, forewarn_reset listed: gate.py, stops.py)
        self.gate = ToolGate(config, audit if guard is not None else None,
                             lists_reset=guard is not None and config.after_stop != "session")
        self.extractor = ToolStateExtractor(tool_kinds=config.step_kinds(), argument_aliases=config.step_aliases(),
                                            descriptions=self.gate.described if config.descriptions.state else None)
        self.writer = TraceWriter(record) if record else None
        self.sidecar = sidecar
        self.model_name = model_name
        self.on_decision = on_decision
        self.audit = audit if guard is not None else None  # (recording only: nothing is judged)
        self._counter = itertools.count(1)
        if guard is not None:  # fail now, not at the first call, when the predicates cannot read the states
            preflight = guard.session()
            preflight.traced = False  # (not a decision anybody acts on)
            preflight.preview(self.extractor(Transcript()))
        elif record is None:
            raise ConfigError("the proxy needs a model (--model), or --record to only record sessions")

    # -- sessions -----------------------------------------------------------------------

    def open_session(self, name: str | None, client: str | None) -> GuardedSession:
        """A new session (``name``: the transport's session id, if any; ``client``: the client's name)."""
        name = name or f"mcp-{uuid.uuid4().hex[:12]}"
        # (the session keeps its state and folds each call into it: the extractor holds no session's fold)
        guarded = GuardedSession(name, None if self.guard is None else self.guard.session(), self.extractor)
        if guarded.session is not None:
            guarded.session.traced = False  # the proxy records each decision's span, with the call (_emit)
        initial = guarded.initial = guarded.state
        meta = {"client": client} if client is not None else {}
        if guarded.session is not None:
            guarded.session.observe(initial)
            if self.audit is not None:
                self.audit.session(name, {"source": "mcp", **meta}, initial, guarded.session.history[-1])
        if self.writer is not None:
            guarded.log = SessionLog(f"{name}-{next(self._counter)}", initial, meta)
        return guarded

    def close_session(self, guarded: GuardedSession, why: str) -> None:
        if guarded.unsent:
            log.warning("session %s ends with %d step(s) that ran missing from the sidecar's audit log (it did not "
                        "answer since)", guarded.id, len(guarded.unsent))
        if self.audit is not None and guarded.session is not None:
            self.audit.close_session(guarded.id, why)
        if self.writer is not None and guarded.log is not None and guarded.calls:
            outcome = "stopped" if guarded.stopped is not None else "ended"
            self.writer.write(guarded.log, outcome=outcome, ended=why)

    # -- judging ------------------------------------------------------------------------

    def check_size(self, name: str, args: Mapping[str, Any]) -> None:
        try:
            size = len(orjson.dumps(args, default=str))
        except TypeError as exc:  # nested deeper than orjson writes (254 levels): nothing downstream could record it
            raise MCPError(types.INVALID_PARAMS, f"the arguments of the call to {tool_name(name)} cannot be read: "
                                                 f"{exc} "
                                                 f"(nested too deep); not forwarded") from None
        if size > self.config.max_argument_bytes:
            raise MCPError(ARGUMENTS_TOO_LARGE, f"the arguments of the call to {tool_name(name)} are {size} bytes, above the "
                                                f"proxy's limit of {self.config.max_argument_bytes}; not forwarded")

    def judge_now(self, guarded: GuardedSession, name: str, args: dict[str, Any]) -> Forward | Judged:
        """The first judging of a proposed call, which waits for nothing: a :class:`Forward` when the guard
        allows the call as it came, else its verdict and state, for :meth:`settle` to go on from (``judged=``).
        The caller holds the session's lock and has seen that the session is not stopped."""
        verdict, state = judge(guarded, name, args, unknown_tools=self.unknown_for(name), fallback=self._fallback)
        if verdict.action is Action.ALLOW:
            guarded.calls += 1
            return Forward(name, args, False, judged=verdict)  # its span and audit row: forwarded()
        return verdict, state

    @staticmethod
    def check_names(name: str, args: Mapping[str, Any], declared: frozenset[str]) -> None:
        """Refuse a call whose arguments name one argument in two ways where case is ignored: a name its
        tool's input schema declares (``declared``) written in another case, or two names that differ only
        in case (unless the schema declares both). Forewarn reads the exact names; a server that matches
        names regardless of case (Go's ``encoding/json``: ``Force`` for ``force``) would run the call with
        the variant's value, not the one judged (CVE-2026-27896, for the arguments' own names).

        Raises:
            MCPError: ``-32602`` (invalid params), naming the two names; the call is not forwarded.
        """
        folded = _folded(declared)
        seen: dict[str, str] = {}
        for key in args:
            fold = key.casefold()
            if key not in declared and fold in folded:
                meant = folded[fold]
            else:
                other = seen.setdefault(fold, key)
                if other == key or (key in declared and other in declared):
                    continue
                meant = other
            raise MCPError(types.INVALID_PARAMS, f"the call to {name!r} names the argument {shown(key)}, which "
                                                 f"reads as {shown(meant)} where case is ignored (argument names "
                                                 f"are case-sensitive); not forwarded")

    async def settle(self, guarded: GuardedSession, name: str, args: dict[str, Any], *, elicit: Elicit | None,
                     lists: Callable[[str], bool], tools: Callable[[], list[str]],
                     judged: Judged | None = None) -> Forward | str:
        """:meth:`_settle`, failing closed with a sidecar: a call to forward is forwarded only once the sidecar
        answered for it (:meth:`_reach`; the look-ahead is local, so nothing else would ask it before the call ran).

        Raises:
            MCPError: :data:`SESSION_STOPPED`, as :meth:`_settle`; :data:`GUARD_UNREACHABLE` — the sidecar did
                not answer, so the call did not run.
        """
        try:
            go = await self._settle(guarded, name, args, elicit=elicit, lists=lists, tools=tools, judged=judged)
        except ServerError as exc:  # the session could not be made there to ask its console: nothing ran
            raise self._unreached(guarded, name, args, exc) from None
        if isinstance(go, Forward) and self.sidecar is not None:
            await self._reach(guarded, go)
        return go

    async def _reach(self, guarded: GuardedSession, go: Forward) -> None:
        """One round trip to the sidecar before a call is forwarded: the session created there (with the state
        before any call), or the steps it has not got (they ran while it was down), or a preview of the state."""
        try:
            remote = guarded.remote
            if remote is None:
                remote = await self._remote(guarded)
            elif not guarded.unsent:
                await remote.preview(dict(guarded.state))
            if guarded.unsent:
                await self._send_unsent(remote, guarded)
        except ServerError as exc:
            raise self._unreached(guarded, go.name, go.args, exc) from None

    def _unreached(self, guarded: GuardedSession, name: str, args: Any, exc: ServerError) -> MCPError:
        """The error for a call that does not run because the sidecar did not answer (kept: the next committed
        step carries it, its action's ``refused``) or refused the request."""
        if not unreachable(exc):
            return MCPError(types.INTERNAL_ERROR, f"the sidecar refused the call to {tool_name(name)}, which did not "
                                                  f"run: {exc}")
        guarded.refused.append({"tool": name, "args": args, "at": time.time(), "error": str(exc)})
        return MCPError(GUARD_UNREACHABLE, str(SidecarUnreachable(self.sidecar.url, name, exc)))

    @staticmethod
    async def _send_unsent(remote: Any, guarded: GuardedSession) -> None:
        pending = [d | {"session": remote.id} for d in guarded.unsent]
        await remote.client.batch(pending)
        del guarded.unsent[:len(pending)]

    async def _settle(self, guarded: GuardedSession, name: str, args: dict[str, Any], *, elicit: Elicit | None,
                      lists: Callable[[str], bool], tools: Callable[[], list[str]],
                      judged: Judged | None = None) -> Forward | str:
        """Judge a proposed call (and an approver's edits of it) until it is to be forwarded (a
        :class:`Forward`) or answered by the proxy (the text of an ``isError`` result).

        ``elicit``: how to ask the client (None: it did not declare elicitation); ``lists``: whether an
        upstream lists a tool; ``tools``: the tools to tell the console; ``judged``: the call's verdict and
        state from :meth:`judge_now`, if it was judged already. The caller holds the session's lock.

        Raises:
            MCPError: :data:`SESSION_STOPPED` — the guard stopped the session, now or earlier.
        """
        edit_of: str | None = None  # the console proposal an approver edited into this call
        edits: list[str] = []
        while True:
            if refuses(guarded, name, self.extractor, self.config.after_stop):  # (a stop: stops.py)
                raise MCPError(SESSION_STOPPED, refusal_text(name, guarded, self.config.after_stop))
            if judged is not None:
                (verdict, state), judged = judged, None
            else:
                verdict, state = judge(guarded, name, args, unknown_tools=self.unknown_for(name),
                                       fallback=self._fallback)
            if verdict.action is Action.ALLOW:
                proposal: str | None = None
                if edit_of is not None and guarded.remote is not None and state is not None:
                    # an edit the guard allows: on the sidecar too, linked to the proposal it edits
                    try:
                        allowed = await guarded.remote.propose(name, dict(args), dict(state), tools=tools(), ask=False,
                                                               edit_of=edit_of)
                        proposal = allowed["id"]
                    except ServerError as exc:  # the call runs all the same; its step is not linked
                        log.warning("session %s: the sidecar did not record the edited call: %s", guarded.id, exc)
                guarded.calls += 1
                # its span and audit row follow once it is on its way (forwarded): off the call's path
                return Forward(name, args, bool(edits), proposal, None, edits, judged=verdict)
            self._emit(guarded, name, args, verdict)
            audited = self._audit_judged(guarded, name, args, verdict)
            if verdict.action is Action.STOP:
                guarded.stopped = verdict
                guarded.stopped_tools.add(name)
                guarded.calls += 1
                raise MCPError(SESSION_STOPPED, " ".join([*edits, stop_text(name, verdict, self.config.after_stop)]))
            if verdict.action is Action.REFLECT:
                guarded.calls += 1
                return " ".join([*edits, held_back_text(name, args, verdict)])
            remote = await self._remote(guarded) if self.sidecar is not None else None  # (ask_human)
            answer = await ask_human(elicit, name, args, verdict, state, remote=remote, tools=tools(),
                                     timeout=self.config.approval_timeout, edit_of=edit_of)
            self._audit_answer(audited, answer)
            if answer.edit is not None and len(edits) < _MAX_EDITS:
                # judged again, as if the client had proposed the edited call
                edited, edited_args = answer.edit
                edits.append(f"{answer.message} Forewarn judged the edited call "
                             f"{describe_call(edited, edited_args)} in its place.")
                name, args, edit_of = edited, edited_args, answer.proposal
                if not lists(name):
                    guarded.calls += 1
                    return " ".join([*edits, f"No upstream of this proxy lists `{name}`; the call did not run."])
                continue
            guarded.calls += 1
            if not answer.approved:
                return " ".join([*edits, answer.message])
            return Forward(name, args, True, answer.proposal, audited, edits)

    def forwarded(self, guarded: GuardedSession, go: Forward) -> None:
        """Record an allowed call once it is on its way to the upstream: its ``forewarn.decision`` span, the
        decision hook and its audit row, written while the upstream works rather than before the call
        leaves. (Idempotent; :meth:`commit` records it first if nobody did.)"""
        if go.judged is not None:
            verdict, go.judged = go.judged, None
            self._emit(guarded, go.name, go.args, verdict)
            go.audited = self._audit_judged(guarded, go.name, go.args, verdict)

    # -- after the upstream answered ------------------------------------------------------

    def commit(self, guarded: GuardedSession, go: Forward, step: ToolStep) -> Decision | None:
        """Commit what a forwarded call did (:func:`ran_step`; :func:`failed_step` for an MCP error, as the call
        may have run in part) to the session and the local audit store: the guard's decision after it (None
        when the extractor cannot read the result). It waits for nothing, so the lean relays' fast path
        commits in the callback that read the answer; :meth:`finish` adds the sidecar's round trip."""
        self.forwarded(guarded, go)
        try:
            state, decision = guarded.ran(step)
        except Exception as exc:  # a result the extractor cannot read: the call ran, the state is unknown
            log.warning("session %s: cannot read the state after %r: %s", guarded.id, step.name, exc)
            return None
        if self.audit is not None and guarded.session is not None:
            self.audit.step(guarded.id, state, {"tool": step.name, "args": step.args}, guarded.session.history[-1],
                            go.audited)
        return decision

    async def finish(self, guarded: GuardedSession, go: Forward, step: ToolStep) -> Decision | None:
        """:meth:`commit`, then, with a sidecar, the step observed there too: the sidecar's decision after it."""
        committed = self.commit(guarded, go, step)
        if committed is None or self.sidecar is None:
            return committed
        # with the calls refused since the last committed step (the sidecar did not answer: they did not run)
        action: dict[str, Any] = {"tool": step.name, "args": step.args} | (
            {"refused": list(guarded.refused)} if guarded.refused else {})
        carried = len(guarded.refused)
        try:
            remote = await self._remote(guarded)
            if guarded.unsent:
                await self._send_unsent(remote, guarded)
            decision: Decision = await remote.observe(guarded.state, action=action, ask=False, proposal=go.proposal)
        except ServerError as exc:
            if not unreachable(exc):
                raise
            # the call ran (the sidecar answered just before it): its step is sent before the next call runs
            guarded.unsent.append({"state": dict(guarded.state), "ask": False, "action": action | {
                "recorded_late": {"ran_at": time.time(), "error": str(exc)}} | (
                {"proposal": go.proposal} if go.proposal is not None else {})})
            log.warning("session %s: the sidecar did not answer the commit of %r, which ran: its step is kept and "
                        "sent before the next call runs (%s)", guarded.id, step.name, exc)
            decision = committed
        del guarded.refused[:carried]
        return decision

    def words_after(self, guarded: GuardedSession, after: Decision | None) -> str | None:
        """The words to append to a call's result when the state it led to (``after``) is one the guard acts on
        (and the session is then stopped if the guard says stop, as ``after_stop`` says: stops.py), else None."""
        if after is None or after.action not in (Action.STOP, Action.REFLECT) or not after.known:
            return None
        words = f"Forewarn: after this call, {after.message or 'the run is at risk'}"
        if after.action is Action.STOP:
            guarded.stopped = Verdict(Action.STOP, after)
            if guarded.steps:
                guarded.stopped_tools.add(guarded.steps[-1].name)
            words += " Forewarn stopped the session: " + {
                "session": "every later call is refused.",
                "all": "every later call is refused until a person resets it (forewarn_reset).",
                "kinds": "later calls of this kind are refused until a person resets it (forewarn_reset)."}[
                self.config.after_stop]
        return words

    async def confirm_tool(self, guarded: GuardedSession, name: str, elicit: Elicit | None) -> None:
        """(gateway) A call to a tool with a finding whose action is ``ask`` (gate.py): a person approves the tool
        as it is listed now (then it is pinned so, and its calls go on), or the call is refused.

        Raises:
            MCPError: ``-32602``, the person did not approve (or nobody could be asked); the call did not run.
        """
        why = self.gate.asks(name)
        if why is None:
            return
        asked = Decision(Action.ASK_HUMAN, None, None, "", {}, f"{why}.", known=False)
        remote = await self._remote(guarded) if self.sidecar is not None else None
        answer = await ask_human(elicit, name, {}, Verdict(Action.ASK_HUMAN, asked, " Approve the tool as it is now?"),
                                 guarded.state, remote=remote, tools=[name], timeout=self.config.approval_timeout)
        if not answer.approved:
            raise MCPError(types.INVALID_PARAMS, f"{why}; {answer.message or 'the person did not approve the tool.'}")
        self.gate.approve(name)

    async def reset_call(self, guarded: GuardedSession, elicit: Elicit | None) -> dict[str, Any]:
        """A call of the proxy's own ``forewarn_reset`` (:mod:`.stops`): the ``tools/call`` result the client gets.
        The caller holds the session's lock."""
        stopped = guarded.stopped
        remote = (lambda: self._remote(guarded)) if self.sidecar is not None else None
        lifted, text = await reset(guarded, elicit=elicit, remote=remote, asks=self.config.reset_asks,
                                   timeout=self.config.approval_timeout)
        if self.audit is not None and guarded.session is not None and stopped is not None:
            self.audit.judged(guarded.id, RESET_TOOL, {}, stopped.decision, "approved" if lifted else "rejected", text)
        return {"content": [{"type": "text", "text": text}], "isError": not lifted}

    def unknown_for(self, name: str) -> Action:
        """What a call of ``name`` gets when the guard would allow it and its kind is unknown: ``allow`` (and
        recorded) for a tool whose annotations say it only reads (``read_only_hints``), else the config's."""
        if self.config.read_only_hints and name in self.gate.read_only and not self.extractor.knows(name):
            return Action.ALLOW
        return self.config.unknown_for(name)

    async def _remote(self, guarded: GuardedSession) -> Any:
        """The session's twin on the sidecar (created at its first commit, with its first state)."""
        if guarded.remote is None:
            assert self.guard is not None  # (a sidecar comes with its model)
            metadata = {"source": "mcp", "session": guarded.id}
            remote = await self.sidecar.session(self.guard.for_metadata(metadata).policy,
                                                model=self.model_name, metadata=metadata)
            await remote.observe(dict(guarded.initial), ask=False)  # the state before any call
            guarded.remote = remote  # (once both are stored: a session left without them is made anew)
        return guarded.remote

    def _audit_judged(self, guarded: GuardedSession, name: str, args: Any, verdict: Verdict) -> str | None:
        """The judged call's row in the local audit store (its proposal id), or None without one."""
        if self.audit is None or guarded.session is None:
            return None
        status, reason = _AUDIT_STATUS[verdict.action]
        return self.audit.judged(guarded.id, name, args, verdict.decision, status,
                                 reason + (verdict.decision.message or "") + verdict.note)

    def _audit_answer(self, audited: str | None, answer: Approval) -> None:
        if self.audit is not None and audited is not None:
            status = "edited" if answer.edit is not None else "approved" if answer.approved else "rejected"
            self.audit.resolved(audited, status, answer.via, answer.message, answer.edit)

    def _fallback(self, tool: str, reason: str) -> Decision:
        return Decision(Action.REFLECT, None, None, "", {},
                        f"Forewarn cannot read the call to `{tool}` ({reason}).", known=False)

    def _emit(self, guarded: GuardedSession, name: str, args: Any, verdict: Verdict) -> None:
        # a forewarn.decision span, as the middleware's (a no-op unless the application configured OpenTelemetry)
        record_decision(verdict.decision, tool=name, phase="proposed", session=guarded.id, action=verdict.action)
        if self.on_decision is not None:
            try:
                self.on_decision(guarded.id, name, args, verdict)
            except Exception as exc:  # an observer must not fail the call
                log.warning("on_decision hook failed: %s", exc)


def unknown_tool(name: str) -> MCPError:
    """The error for a call to a tool no upstream of the proxy lists (its name shown in part when long)."""
    more = _cut(name)
    return MCPError(types.INVALID_PARAMS, f"Unknown tool: {name[:100]}{'…' if more else ''}{more} (no upstream of "
                                          f"this proxy lists it)")


def tool_name(name: str) -> str:
    """A tool's name as an error quotes it: whole up to 100 characters (the client's own name, sent back)."""
    return repr(name[:100]) + _cut(name)


def _cut(name: str) -> str:
    return f" (the first 100 of {len(name)} characters)" if len(name) > 100 else ""


def shown(value: Any) -> str:
    """A JSON value as the proxy names it in an error: its first 40 bytes."""
    return orjson.dumps(value)[:40].decode(errors="replace")


@functools.lru_cache(maxsize=1024)
def _folded(declared: frozenset[str]) -> dict[str, str]:
    """A tool's declared argument names by their case-folded form (once per schema, not once per call)."""
    return {k.casefold(): k for k in declared}


def ran_step(go: Forward, is_error: bool, text: str) -> ToolStep:
    return ToolStep(go.name, go.args, CallStatus.ERROR if is_error else CallStatus.SUCCESS, text, approved=go.approved)


def failed_step(go: Forward, message: str) -> ToolStep:
    return ToolStep(go.name, go.args, CallStatus.ERROR, message, approved=go.approved)
