"""The sidecar client without its I/O: every request described once, every answer read once.

Each operation of :mod:`guard.client` is a generator (an :data:`Op`) that yields the
:class:`Request` s it needs and receives their answers: the JSON document, the body as
bytes, or the status code, as the request asks. ``Client`` drives an op with
``httpx.Client`` and ``AsyncClient`` with ``httpx.AsyncClient`` (both in
:mod:`guard.client`); the bodies, paths, retry plan, back-off and errors are here, so
the two cannot drift apart. A transport error the driver cannot retry is thrown into
the op as a :class:`ServerError` (an op that probes catches it).
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, cast

import httpx
import orjson

from ...errors import ForewarnError, PredicateError, UsageError
from ..policy import Policy
from ..runtime import Decision, PropertyValue
from ..spec import Action
from ._loopback import Answer

T = TypeVar("T")
Op = Generator["Request", Any, T]
"""An operation: yields requests, is sent each one's answer, returns its result."""

BACKOFF = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)  # with 8 retries, about 10 s: long enough for a server restart
_JSON = {"Content-Type": "application/json"}


class ServerError(ForewarnError):
    """The sidecar refused a request, or could not be reached (``status`` 0)."""

    def __init__(self, message: str, *, status: int = 0, code: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field


class SidecarUnreachable(ServerError):
    """A guard on a sidecar (the LangChain middleware, the MCP proxy with ``--serve-url``) could not reach
    it before a tool call ran, so the call did not run (fail closed). ``url``: the sidecar's; ``tool``: the
    call's. The message is one line: the URL, the call, what to do."""

    def __init__(self, url: str, tool: str, cause: ServerError) -> None:
        super().__init__(f"Forewarn's sidecar at {url} cannot be reached, so the call to `{tool}` did not run "
                         f"(fail closed): start the sidecar (forewarn serve) or fix its URL, then resume the run or call "
                         f"again; calls refused meanwhile are recorded with the session's next step there ({cause})",
                         status=cause.status, code="sidecar_unreachable")
        self.url = url
        self.tool = tool


def unreachable(exc: ServerError) -> bool:
    """Whether a sidecar's error means it is down or cannot answer now (no answer, or a 5xx), as opposed
    to a refusal of the request itself (4xx)."""
    return exc.status == 0 or exc.status >= 500


@dataclass(frozen=True, slots=True)
class RemoteDecision(Decision):
    """A decision answered by the sidecar: the core's fields plus where it was recorded."""

    session_id: str = ""
    step: int | None = None
    approval_id: str | None = None
    committed: bool = False
    model: dict[str, str] = field(default_factory=dict)
    at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**Decision.to_dict(self), "session_id": self.session_id, "step": self.step,
                "approval_id": self.approval_id, "committed": self.committed, "model": dict(self.model),
                "at": self.at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RemoteDecision:
        properties = tuple(
            PropertyValue(p["name"], p["formula"], p.get("p_unsafe"), p.get("p_safe"), p.get("lower"), p.get("upper"),
                          Action(p.get("action", data["action"])), p.get("threshold"), p.get("ci_low"),
                          p.get("ci_high"), p.get("baseline_p_unsafe"), p.get("increase"))
            for p in data.get("properties") or ())
        return cls(Action(data["action"]), data.get("p_unsafe"), data.get("p_safe"), data["property"],
                   dict(data["abstract_state"]), data.get("message", ""), lower=data.get("lower"),
                   upper=data.get("upper"), threshold=data.get("threshold"), known=data.get("known", True),
                   unsafe_now=data.get("unsafe_now", False), properties=properties,
                   monitors=dict(data.get("monitors") or {}), ci_low=data.get("ci_low"),
                   ci_high=data.get("ci_high"), visits=data.get("visits"), member=data.get("member"),
                   group=data.get("group"), fallback=data.get("fallback", False),
                   baseline_p_unsafe=data.get("baseline_p_unsafe"), increase=data.get("increase"),
                   session_id=data.get("session_id", ""),
                   step=data.get("step"), approval_id=data.get("approval_id"),
                   committed=data.get("committed", False), model=dict(data.get("model") or {}), at=data.get("at"))


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request of an op, and how its answer is read."""

    method: str
    path: str
    body: Any = None
    params: Mapping[str, Any] | None = None
    idempotent: bool = False  # a write that changes state: one Idempotency-Key for all its attempts
    wait: float | None = None  # a long poll: the read timeout grows by the seconds the server may hold it
    read: Literal["json", "bytes", "status"] = "json"
    retry: bool = True  # False: a transport error is not retried (a probe)

    def headers(self) -> dict[str, str]:
        """The headers every attempt sends (called once per request)."""
        headers = dict(_JSON) if self.body is not None else {}
        if self.idempotent:
            headers["Idempotency-Key"] = uuid.uuid4().hex
        return headers

    def content(self) -> bytes | None:
        # orjson: several times faster than json.dumps on a state (the per-step body)
        return None if self.body is None else orjson.dumps(self.body, option=orjson.OPT_NON_STR_KEYS)

    def timeout(self, default: httpx.Timeout) -> dict[str, Any]:
        if self.wait is None:
            return {}
        return {"timeout": default.read + self.wait if default.read else None}

    def backoff(self, exc: httpx.TransportError, attempt: int, retries: int, url: str) -> float:
        """Seconds to wait before attempt ``attempt + 1``; a :class:`ServerError` when it may not be retried.

        Idempotent writes and reads are retried after any transport error (the server answers a
        retried write with its stored answer); other writes only when the connection never opened,
        since then it carried nothing."""
        any_error = self.idempotent or self.method == "GET"
        if not self.retry or attempt >= retries or not (any_error or isinstance(exc, httpx.ConnectError)):
            raise ServerError(f"cannot reach the Forewarn server at {url}: {exc}")
        return BACKOFF[min(attempt, len(BACKOFF) - 1)]

    def answer(self, response: httpx.Response | Answer) -> Any:
        if self.read == "status":
            return response.status_code
        if not response.is_success:
            _raise_for(response)
        return response.content if self.read == "bytes" else orjson.loads(response.content)


def _raise_for(response: httpx.Response | Answer) -> None:
    try:
        error = orjson.loads(response.content).get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    message = error.get("message") or response.text or response.reason_phrase
    if error.get("code") == "predicate_error":  # the same error as in process, plus where it was
        exc = PredicateError(message, predicate=error.get("predicate"))
        exc.field = error.get("field")  # type: ignore[attr-defined]
        raise exc
    raise ServerError(f"HTTP {response.status_code}: {message}", status=response.status_code,
                      code=error.get("code"), field=error.get("field"))


class SessionLike(Protocol):
    """What a session op needs of a session object."""

    id: str
    last: RemoteDecision | None


# -- request bodies ------------------------------------------------------------------------

def policy_json(policy: Policy | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if policy is None:
        return None
    if isinstance(policy, Policy):
        out: dict[str, Any] = {"thresholds": policy.thresholds.model_dump(),
                               "unseen_state": policy.unseen_state.value,
                               "act_on": policy.act_on, "min_visits": policy.min_visits}
        if policy.trigger is not None:
            out |= {"trigger": policy.trigger.value, "min_increase": policy.min_increase}
        return out
    return dict(policy)


def _some(**fields: Any) -> dict[str, Any]:
    """The fields that are set (optional fields are left out of a body, not sent as null)."""
    return {k: dict(v) if isinstance(v, Mapping) else v for k, v in fields.items() if v is not None}


def _listing(status: str, session_id: str | None) -> dict[str, str]:
    return {"status": status} | ({"session_id": session_id} if session_id else {})


# -- client operations ---------------------------------------------------------------------

def create_session(policy: Policy | Mapping[str, Any] | None = None, *, model: str | None = None,
                   metadata: Mapping[str, Any] | None = None) -> Op[dict[str, Any]]:
    return cast(dict[str, Any], (yield Request("POST", "/v1/sessions",
                                               _some(model=model, policy=policy_json(policy), metadata=metadata))))


def get_session(session_id: str, *, offset: int = 0, limit: int = 100) -> Op[dict[str, Any]]:
    return cast(dict[str, Any], (yield Request("GET", f"/v1/sessions/{session_id}",
                                               params={"offset": offset, "limit": limit})))


def batch(steps: Sequence[Mapping[str, Any]]) -> Op[list[RemoteDecision]]:
    """Many steps in one request: each ``{"session", "state", "op"?, "action"?, "t"?}``; all or nothing."""
    out = yield Request("POST", "/v1/batch", {"steps": list(steps)}, idempotent=True)
    return [RemoteDecision.from_json(d) for d in out["results"]]


def approvals(status: str = "pending", *, session_id: str | None = None) -> Op[list[dict[str, Any]]]:
    out = yield Request("GET", "/v1/approvals", params=_listing(status, session_id))
    return cast(list[dict[str, Any]], out["approvals"])


def approval(approval_id: str, *, wait: float = 0.0) -> Op[dict[str, Any]]:
    """An approval; with ``wait``, long-polls up to that many seconds for its resolution."""
    return cast(dict[str, Any], (yield Request("GET", f"/v1/approvals/{approval_id}", params={"wait": wait},
                                               wait=wait)))


def _wait_for(kind: str, item_id: str, timeout: float, poll: float) -> Op[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        wait = max(0.0, min(poll, remaining))
        result = yield Request("GET", f"/v1/{kind}/{item_id}", params={"wait": wait}, wait=wait)
        if result["status"] != "pending" or remaining <= 0:
            return cast(dict[str, Any], result)


def wait_for_approval(approval_id: str, timeout: float = 300.0, *, poll: float = 30.0) -> Op[dict[str, Any]]:
    """Long-poll until the approval is resolved or ``timeout`` passes; returns it either way."""
    return (yield from _wait_for("approvals", approval_id, timeout, poll))


def approve(approval_id: str, reason: str | None = None) -> Op[dict[str, Any]]:
    return cast(dict[str, Any], (yield Request("POST", f"/v1/approvals/{approval_id}",
                                               {"decision": "approve", "reason": reason}, idempotent=True)))


def reject(approval_id: str, reason: str | None = None) -> Op[dict[str, Any]]:
    return cast(dict[str, Any], (yield Request("POST", f"/v1/approvals/{approval_id}",
                                               {"decision": "reject", "reason": reason}, idempotent=True)))


def proposals(status: str = "pending", *, session_id: str | None = None) -> Op[list[dict[str, Any]]]:
    out = yield Request("GET", "/v1/proposals", params=_listing(status, session_id))
    return cast(list[dict[str, Any]], out["proposals"])


def proposal(proposal_id: str, *, wait: float = 0.0) -> Op[dict[str, Any]]:
    """A proposal; with ``wait``, long-polls up to that many seconds while it is pending."""
    return cast(dict[str, Any], (yield Request("GET", f"/v1/proposals/{proposal_id}", params={"wait": wait},
                                               wait=wait)))


def wait_for_proposal(proposal_id: str, timeout: float = 300.0, *, poll: float = 30.0) -> Op[dict[str, Any]]:
    """Long-poll until a pending proposal is decided or ``timeout`` passes; returns it either way."""
    return (yield from _wait_for("proposals", proposal_id, timeout, poll))


def resolve_proposal(proposal_id: str, decision: str, reason: str | None = None, *, tool: str | None = None,
                     arguments: Mapping[str, Any] | None = None,
                     state: Mapping[str, Any] | None = None) -> Op[dict[str, Any]]:
    """``approve``, ``reject`` or ``edit`` (with ``arguments``, maybe ``tool`` and the edited call's
    ``state``, which is re-checked) a pending proposal."""
    body = {"decision": decision, "reason": reason} | _some(tool=tool, arguments=arguments, state=state)
    return cast(dict[str, Any], (yield Request("POST", f"/v1/proposals/{proposal_id}", body, idempotent=True)))


def cancel_proposal(proposal_id: str, reason: str | None = None) -> Op[dict[str, Any]]:
    """Withdraw a pending proposal (agent key). One decided meanwhile raises :class:`ServerError`
    with code ``already_resolved``: read it with :func:`proposal` and honour the answer."""
    return cast(dict[str, Any], (yield Request("POST", f"/v1/proposals/{proposal_id}/cancel", {"reason": reason},
                                               idempotent=True)))


def models() -> Op[list[dict[str, Any]]]:
    return cast(list[dict[str, Any]], (yield Request("GET", "/v1/models"))["models"])


def load_model(name: str, path: str | None = None, *, document: Mapping[str, Any] | None = None,
               migrate_sessions: bool = False) -> Op[dict[str, Any]]:
    """Load a model by ``path`` (inside the server's ``model_dirs``) or upload its ``document``."""
    body = {"name": name, "migrate_sessions": migrate_sessions} | _some(
        path=None if path is None else str(path), document=document)
    return cast(dict[str, Any], (yield Request("POST", "/v1/models", body)))


def model_document(name: str | None = None) -> Op[bytes]:
    """The served model file (of ``name``, default the server's default model), as stored."""
    if name is None:
        name = cast(str, (yield Request("GET", "/v1/models"))["default"])
    return cast(bytes, (yield Request("GET", f"/v1/models/{name}/document", read="bytes")))


def ready() -> Op[bool]:
    """Whether the server answers ``/readyz`` with 200 (False when it cannot be reached)."""
    try:
        status = yield Request("GET", "/readyz", read="status", retry=False)
    except ServerError:
        return False
    return bool(status == 200)


# -- session operations (the first argument is the session) ---------------------------------

def observe(session: SessionLike, state: Mapping[str, Any], *, action: Any = None, t: float | None = None,
            ask: bool = True, proposal: str | None = None) -> Op[RemoteDecision]:
    """Commit the agent's new state and decide on it (answered once the server has stored it).
    ``ask=False``: the caller asks its own human, so an ``ask_human`` decision queues no approval;
    ``proposal``: the proposal (allowed, approved or edited) whose call led here."""
    body = {"state": state} | ({} if ask else {"ask": False}) | _some(proposal=proposal, action=action, t=t)
    data = yield Request("POST", f"/v1/sessions/{session.id}/observe", body, idempotent=True)
    session.last = RemoteDecision.from_json(data)
    return session.last


def propose(session: SessionLike, tool: str, arguments: Mapping[str, Any], state: Mapping[str, Any], *,
            tools: list[str] | None = None, ask: bool | None = None,
            edit_of: str | None = None, timeout: float | None = None,
            request: str | None = None) -> Op[dict[str, Any]]:
    """Ask before a call runs: the decision on the state it would lead to; ``status`` is allowed,
    held, or pending (a human decides: :meth:`Client.wait_for_proposal`). Nothing is committed.
    ``ask``: the agent's own verdict (True: pending; False: allowed); ``edit_of``: the edited
    proposal whose call this one is, re-checked; ``timeout``: the seconds the agent will wait for a
    human before it withdraws the call (the approver is shown when that is); ``request``: the user's
    request the call serves, in their words, shown to the approver beside the session's metadata."""
    body = {"tool": tool, "arguments": dict(arguments), "state": dict(state)} | _some(
        tools=None if tools is None else list(tools), ask=ask, edit_of=edit_of, timeout=timeout, request=request)
    return cast(dict[str, Any], (yield Request("POST", f"/v1/sessions/{session.id}/proposals", body,
                                               idempotent=True)))


def preview(session: SessionLike, state: Mapping[str, Any], *, action: Any = None) -> Op[RemoteDecision]:
    """What the guard would decide in ``state`` (reached by ``action``); nothing is committed."""
    body = {"state": state} | _some(action=action)
    return RemoteDecision.from_json((yield Request("POST", f"/v1/sessions/{session.id}/preview", body)))


def session_wait_for_approval(session: SessionLike, decision: RemoteDecision,
                              timeout: float = 300.0) -> Op[dict[str, Any]]:
    """Long-poll until the approval ``decision`` queued is resolved or ``timeout`` passes."""
    if decision.approval_id is None:
        raise UsageError(f"the decision (action {decision.action.value!r}) has no approval to wait for")
    return (yield from wait_for_approval(decision.approval_id, timeout))


def history(session: SessionLike, *, offset: int = 0, limit: int = 100) -> Op[dict[str, Any]]:
    """The session's committed steps, ``limit`` from ``offset``."""
    return (yield from get_session(session.id, offset=offset, limit=limit))


def close(session: SessionLike) -> Op[dict[str, Any]]:
    """Close the session (its pending approvals and proposals are cancelled); its summary."""
    return cast(dict[str, Any], (yield Request("POST", f"/v1/sessions/{session.id}/close")))
