"""A client of the HTTP sidecar (``forewarn serve``) with the in-process API.

Switching an agent from the library to the sidecar is one line::

    guard = Guard.load("model.json")                       # in process
    guard = Client("http://127.0.0.1:8321", api_key=KEY)   # over HTTP
    session = guard.session()
    decision = session.observe(state)                      # the same Decision

``Client`` is synchronous and ``AsyncClient`` its asyncio twin; both use httpx. The URL and
key default to ``FOREWARN_URL`` and ``FOREWARN_API_KEY``.

Retries: every write that changes state (observe, batch, approve/reject) carries an
``Idempotency-Key`` (a fresh UUID per call, the same on each of its attempts), so when the
connection fails the client retries by itself (``retries`` times, backing off) and the server
answers a retry of a committed write with the stored answer instead of committing it twice.
Reads are retried too; other writes only when the connection could not even be opened. Decisions are
:class:`RemoteDecision`, a :class:`guard.runtime.Decision` that also carries the step
number and, when the action is ``ask_human``, the approval to wait on.
"""
from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from forewarn.guard._extras import extra_error

try:
    import httpx
except ModuleNotFoundError as exc:
    raise extra_error("client", "forewarn.guard.client", exc) from None

from forewarn.guard.errors import ForewarnError, PredicateError, UsageError
from forewarn.guard.policy import Policy
from forewarn.guard.runtime import Decision, PropertyValue
from forewarn.guard.spec import Action

__all__ = ["AsyncClient", "AsyncRemoteSession", "Client", "RemoteDecision", "RemoteSession", "ServerError",
           "DEFAULT_URL"]

DEFAULT_URL = "http://127.0.0.1:8321"
_BACKOFF = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)  # with 8 retries, about 10 s: long enough for a server restart


def _attempt_plan(method: str, idempotent: bool) -> tuple[bool, dict[str, str]]:
    """Whether any transport error may be retried, and the headers every attempt sends."""
    if idempotent:
        return True, {"Idempotency-Key": uuid.uuid4().hex}
    return method == "GET", {}


def _may_retry(exc: httpx.TransportError, any_error: bool) -> bool:
    # a connection that never opened carried nothing: safe to retry whatever the request
    return any_error or isinstance(exc, httpx.ConnectError)


class ServerError(ForewarnError):
    """The sidecar refused a request, or could not be reached (``status`` 0)."""

    def __init__(self, message: str, *, status: int = 0, code: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field


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


def _policy_json(policy: Policy | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if policy is None:
        return None
    if isinstance(policy, Policy):
        out = {"thresholds": policy.thresholds.model_dump(), "unseen_state": policy.unseen_state.value,
               "act_on": policy.act_on, "min_visits": policy.min_visits}
        if policy.trigger is not None:
            out |= {"trigger": policy.trigger.value, "min_increase": policy.min_increase}
        return out
    return dict(policy)


def _step_body(state: Mapping[str, Any], action: Any, t: float | None, ask: bool = True,
               proposal: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"state": state}
    if not ask:
        body["ask"] = False
    if proposal is not None:
        body["proposal"] = proposal
    if action is not None:
        body["action"] = action
    if t is not None:
        body["t"] = t
    return body


def _listing(status: str, session_id: str | None) -> dict[str, str]:
    return {"status": status} | ({"session_id": session_id} if session_id else {})


def _long_poll(http: httpx.Client | httpx.AsyncClient, wait: float) -> float | None:
    """The read timeout of a request the server may hold ``wait`` seconds."""
    return http.timeout.read + wait if http.timeout.read else None


def _propose_body(tool: str, arguments: Mapping[str, Any], state: Mapping[str, Any],
                  tools: list[str] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"tool": tool, "arguments": dict(arguments), "state": dict(state)}
    if tools is not None:
        body["tools"] = list(tools)
    return body


def _resolve_body(decision: str, reason: str | None, tool: str | None, arguments: Mapping[str, Any] | None,
                  state: Mapping[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"decision": decision, "reason": reason}
    for key, value in (("tool", tool), ("arguments", arguments), ("state", state)):
        if value is not None:
            body[key] = value if isinstance(value, str) else dict(value)
    return body


def _raise_for(response: httpx.Response) -> dict[str, Any]:
    if response.is_success:
        return cast(dict[str, Any], response.json())
    try:
        error = response.json().get("error") or {}
    except ValueError:
        error = {}
    message = error.get("message") or response.text or response.reason_phrase
    if error.get("code") == "predicate_error":  # the same error as in process, plus where it was
        exc = PredicateError(message, predicate=error.get("predicate"))
        exc.field = error.get("field")  # type: ignore[attr-defined]
        raise exc
    raise ServerError(f"HTTP {response.status_code}: {message}", status=response.status_code,
                      code=error.get("code"), field=error.get("field"))


def _model_body(name: str, path: str | None, document: Mapping[str, Any] | None,
                migrate_sessions: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "migrate_sessions": migrate_sessions}
    if path is not None:
        body["path"] = str(path)
    if document is not None:
        body["document"] = dict(document)
    return body


def _headers(api_key: str | None) -> dict[str, str]:
    key = api_key if api_key is not None else os.environ.get("FOREWARN_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


class Client:
    """A synchronous client of one sidecar.

    Args:
        url: the server's base URL (default ``FOREWARN_URL`` or http://127.0.0.1:8321).
        api_key: the bearer key (default ``FOREWARN_API_KEY``).
        timeout: seconds per request (long polls add their wait to it).
        transport: an httpx transport, e.g. for tests.
        retries: attempts after a transport error (see the module docstring for which requests).
    """

    def __init__(self, url: str | None = None, *, api_key: str | None = None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None, retries: int = 8) -> None:
        self.url = (url or os.environ.get("FOREWARN_URL") or DEFAULT_URL).rstrip("/")
        self.retries = retries
        self._http = httpx.Client(base_url=self.url, headers=_headers(api_key), timeout=timeout,
                                  transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, *, idempotent: bool = False, **kwargs: Any) -> dict[str, Any]:
        any_error, headers = _attempt_plan(method, idempotent)
        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(method, path, headers=headers, **kwargs)
                break
            except httpx.TransportError as exc:
                if attempt == self.retries or not _may_retry(exc, any_error):
                    raise ServerError(f"cannot reach the Forewarn server at {self.url}: {exc}") from exc
                time.sleep(_BACKOFF[min(attempt, len(_BACKOFF) - 1)])
        return _raise_for(response)

    # -- sessions, as Guard has them --------------------------------------------------

    def session(self, policy: Policy | Mapping[str, Any] | None = None, *, model: str | None = None,
                metadata: Mapping[str, Any] | None = None) -> RemoteSession:
        """A new session on the server (``Guard.session`` over HTTP)."""
        body: dict[str, Any] = {}
        if model is not None:
            body["model"] = model
        if policy is not None:
            body["policy"] = _policy_json(policy)
        if metadata is not None:
            body["metadata"] = dict(metadata)
        created = self._call("POST", "/v1/sessions", json=body)
        return RemoteSession(self, created["id"], created)

    def attach(self, session_id: str) -> RemoteSession:
        """An existing session, e.g. after the agent restarted."""
        return RemoteSession(self, session_id, self.get_session(session_id, limit=1))

    def get_session(self, session_id: str, *, offset: int = 0, limit: int = 100) -> dict[str, Any]:
        return self._call("GET", f"/v1/sessions/{session_id}", params={"offset": offset, "limit": limit})

    def batch(self, steps: list[Mapping[str, Any]]) -> list[RemoteDecision]:
        """Many steps in one request: each ``{"session", "state", "op"?, "action"?, "t"?}``; all or nothing."""
        out = self._call("POST", "/v1/batch", json={"steps": list(steps)}, idempotent=True)
        return [RemoteDecision.from_json(d) for d in out["results"]]

    # -- approvals ---------------------------------------------------------------------

    def approvals(self, status: str = "pending", *, session_id: str | None = None) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]],
                    self._call("GET", "/v1/approvals", params=_listing(status, session_id))["approvals"])

    def approval(self, approval_id: str, *, wait: float = 0.0) -> dict[str, Any]:
        """An approval; with ``wait``, long-polls up to that many seconds for its resolution."""
        return self._call("GET", f"/v1/approvals/{approval_id}", params={"wait": wait},
                          timeout=_long_poll(self._http, wait))

    def wait_for_approval(self, approval_id: str, timeout: float = 300.0, *, poll: float = 30.0) -> dict[str, Any]:
        """Long-poll until the approval is resolved or ``timeout`` passes; returns it either way."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            result = self.approval(approval_id, wait=max(0.0, min(poll, remaining)))
            if result["status"] != "pending" or remaining <= 0:
                return result

    def approve(self, approval_id: str, reason: str | None = None) -> dict[str, Any]:
        return self._call("POST", f"/v1/approvals/{approval_id}", json={"decision": "approve", "reason": reason},
                          idempotent=True)

    def reject(self, approval_id: str, reason: str | None = None) -> dict[str, Any]:
        return self._call("POST", f"/v1/approvals/{approval_id}", json={"decision": "reject", "reason": reason},
                          idempotent=True)

    # -- proposals (approval before a call runs) -----------------------------------------

    def proposals(self, status: str = "pending", *, session_id: str | None = None) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]],
                    self._call("GET", "/v1/proposals", params=_listing(status, session_id))["proposals"])

    def proposal(self, proposal_id: str, *, wait: float = 0.0) -> dict[str, Any]:
        return self._call("GET", f"/v1/proposals/{proposal_id}", params={"wait": wait},
                          timeout=_long_poll(self._http, wait))

    def wait_for_proposal(self, proposal_id: str, timeout: float = 300.0, *, poll: float = 30.0) -> dict[str, Any]:
        """Long-poll until a pending proposal is decided or ``timeout`` passes; returns it either way."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            result = self.proposal(proposal_id, wait=max(0.0, min(poll, remaining)))
            if result["status"] != "pending" or remaining <= 0:
                return result

    def resolve_proposal(self, proposal_id: str, decision: str, reason: str | None = None, *,
                         tool: str | None = None, arguments: Mapping[str, Any] | None = None,
                         state: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``approve``, ``reject`` or ``edit`` (with ``arguments``, maybe ``tool`` and the edited call's
        ``state``, which is re-checked) a pending proposal."""
        return self._call("POST", f"/v1/proposals/{proposal_id}", idempotent=True,
                          json=_resolve_body(decision, reason, tool, arguments, state))

    # -- models and health ---------------------------------------------------------------

    def models(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self._call("GET", "/v1/models")["models"])

    def load_model(self, name: str, path: str | None = None, *, document: Mapping[str, Any] | None = None,
                   migrate_sessions: bool = False) -> dict[str, Any]:
        """Load a model by ``path`` (inside the server's ``model_dirs``) or upload its ``document``."""
        return self._call("POST", "/v1/models", json=_model_body(name, path, document, migrate_sessions))

    def model_document(self, name: str | None = None) -> bytes:
        """The served model file (of ``name``, default the server's default model), as stored."""
        if name is None:
            name = cast(str, self._call("GET", "/v1/models")["default"])
        for attempt in range(self.retries + 1):
            try:
                response = self._http.get(f"/v1/models/{name}/document")
                break
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise ServerError(f"cannot reach the Forewarn server at {self.url}: {exc}") from exc
                time.sleep(_BACKOFF[min(attempt, len(_BACKOFF) - 1)])
        if not response.is_success:
            _raise_for(response)
        return response.content

    def guard(self, name: str | None = None, *, allow_python: Any = None,
              trusted_keys: Any = None) -> Any:
        """A local :class:`~guard.runtime.Guard` (or bundle guard) on the model the server serves as
        ``name``: the same decisions, computed in process (what the middleware previews with)."""
        from forewarn.guard.bundle import GuardBundle, parse_model_or_bundle
        from forewarn.guard.bundle_guard import BundleGuard
        from forewarn.guard.runtime import Guard

        loaded = parse_model_or_bundle(self.model_document(name), f"{self.url} model {name or '(default)'}",
                                       trusted_keys=trusted_keys)
        if isinstance(loaded, GuardBundle):
            return BundleGuard(loaded, allow_python=allow_python)
        return Guard(loaded, allow_python=allow_python)

    def ready(self) -> bool:
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False


class RemoteSession:
    """A session on the server, with the methods of :class:`guard.runtime.Session`."""

    def __init__(self, client: Client, session_id: str, info: Mapping[str, Any]) -> None:
        self.client = client
        self.id = session_id
        self.info = dict(info)
        self.last: RemoteDecision | None = None

    def observe(self, state: Mapping[str, Any], *, action: Any = None, t: float | None = None,
                ask: bool = True, proposal: str | None = None) -> RemoteDecision:
        """Commit the agent's new state and decide on it (answered once the server has stored it).
        ``ask=False``: the caller asks its own human, so an ``ask_human`` decision queues no approval;
        ``proposal``: the proposal (allowed, approved or edited) whose call led here."""
        data = self.client._call("POST", f"/v1/sessions/{self.id}/observe",
                                json=_step_body(state, action, t, ask, proposal), idempotent=True)
        self.last = RemoteDecision.from_json(data)
        return self.last

    def propose(self, tool: str, arguments: Mapping[str, Any], state: Mapping[str, Any], *,
                tools: list[str] | None = None) -> dict[str, Any]:
        """Ask before a call runs: the decision on the state it would lead to; ``status`` is allowed,
        held, or pending (a human decides: :meth:`Client.wait_for_proposal`). Nothing is committed."""
        return self.client._call("POST", f"/v1/sessions/{self.id}/proposals", idempotent=True,
                                 json=_propose_body(tool, arguments, state, tools))

    def preview(self, state: Mapping[str, Any]) -> RemoteDecision:
        """What the guard would decide in ``state``; nothing is committed."""
        return RemoteDecision.from_json(
            self.client._call("POST", f"/v1/sessions/{self.id}/preview", json={"state": state}))

    def wait_for_approval(self, decision: RemoteDecision, timeout: float = 300.0) -> dict[str, Any]:
        if decision.approval_id is None:
            raise UsageError(f"the decision (action {decision.action.value!r}) has no approval to wait for")
        return self.client.wait_for_approval(decision.approval_id, timeout)

    def history(self, *, offset: int = 0, limit: int = 100) -> dict[str, Any]:
        return self.client.get_session(self.id, offset=offset, limit=limit)

    def close(self) -> dict[str, Any]:
        return self.client._call("POST", f"/v1/sessions/{self.id}/close")


class AsyncClient:
    """The asyncio twin of :class:`Client` (same arguments)."""

    def __init__(self, url: str | None = None, *, api_key: str | None = None, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None, retries: int = 8) -> None:
        self.url = (url or os.environ.get("FOREWARN_URL") or DEFAULT_URL).rstrip("/")
        self.retries = retries
        self._http = httpx.AsyncClient(base_url=self.url, headers=_headers(api_key), timeout=timeout,
                                       transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, *, idempotent: bool = False, **kwargs: Any) -> dict[str, Any]:
        any_error, headers = _attempt_plan(method, idempotent)
        for attempt in range(self.retries + 1):
            try:
                response = await self._http.request(method, path, headers=headers, **kwargs)
                break
            except httpx.TransportError as exc:
                if attempt == self.retries or not _may_retry(exc, any_error):
                    raise ServerError(f"cannot reach the Forewarn server at {self.url}: {exc}") from exc
                await asyncio.sleep(_BACKOFF[min(attempt, len(_BACKOFF) - 1)])
        return _raise_for(response)

    async def session(self, policy: Policy | Mapping[str, Any] | None = None, *, model: str | None = None,
                      metadata: Mapping[str, Any] | None = None) -> AsyncRemoteSession:
        body: dict[str, Any] = {}
        if model is not None:
            body["model"] = model
        if policy is not None:
            body["policy"] = _policy_json(policy)
        if metadata is not None:
            body["metadata"] = dict(metadata)
        created = await self._call("POST", "/v1/sessions", json=body)
        return AsyncRemoteSession(self, created["id"], created)

    async def attach(self, session_id: str) -> AsyncRemoteSession:
        return AsyncRemoteSession(self, session_id, await self.get_session(session_id, limit=1))

    async def get_session(self, session_id: str, *, offset: int = 0, limit: int = 100) -> dict[str, Any]:
        return await self._call("GET", f"/v1/sessions/{session_id}", params={"offset": offset, "limit": limit})

    async def batch(self, steps: list[Mapping[str, Any]]) -> list[RemoteDecision]:
        out = await self._call("POST", "/v1/batch", json={"steps": list(steps)}, idempotent=True)
        return [RemoteDecision.from_json(d) for d in out["results"]]

    async def approvals(self, status: str = "pending", *, session_id: str | None = None) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]],
                    (await self._call("GET", "/v1/approvals", params=_listing(status, session_id)))["approvals"])

    async def approval(self, approval_id: str, *, wait: float = 0.0) -> dict[str, Any]:
        return await self._call("GET", f"/v1/approvals/{approval_id}", params={"wait": wait},
                                timeout=_long_poll(self._http, wait))

    async def wait_for_approval(self, approval_id: str, timeout: float = 300.0, *,
                                poll: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            result = await self.approval(approval_id, wait=max(0.0, min(poll, remaining)))
            if result["status"] != "pending" or remaining <= 0:
                return result

    async def approve(self, approval_id: str, reason: str | None = None) -> dict[str, Any]:
        return await self._call("POST", f"/v1/approvals/{approval_id}",
                                json={"decision": "approve", "reason": reason}, idempotent=True)

    async def reject(self, approval_id: str, reason: str | None = None) -> dict[str, Any]:
        return await self._call("POST", f"/v1/approvals/{approval_id}",
                                json={"decision": "reject", "reason": reason}, idempotent=True)

    # -- proposals (approval before a call runs; the bodies are the sync client's) --------

    async def proposals(self, status: str = "pending", *, session_id: str | None = None) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]],
                    (await self._call("GET", "/v1/proposals", params=_listing(status, session_id)))["proposals"])

    async def proposal(self, proposal_id: str, *, wait: float = 0.0) -> dict[str, Any]:
        return await self._call("GET", f"/v1/proposals/{proposal_id}", params={"wait": wait},
                                timeout=_long_poll(self._http, wait))

    async def wait_for_proposal(self, proposal_id: str, timeout: float = 300.0, *,
                                poll: float = 30.0) -> dict[str, Any]:
        """Long-poll until a pending proposal is decided or ``timeout`` passes; returns it either way."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            result = await self.proposal(proposal_id, wait=max(0.0, min(poll, remaining)))
            if result["status"] != "pending" or remaining <= 0:
                return result

    async def resolve_proposal(self, proposal_id: str, decision: str, reason: str | None = None, *,
                               tool: str | None = None, arguments: Mapping[str, Any] | None = None,
                               state: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """See :meth:`Client.resolve_proposal`."""
        return await self._call("POST", f"/v1/proposals/{proposal_id}", idempotent=True,
                                json=_resolve_body(decision, reason, tool, arguments, state))

    async def models(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], (await self._call("GET", "/v1/models"))["models"])

    async def load_model(self, name: str, path: str | None = None, *, document: Mapping[str, Any] | None = None,
                         migrate_sessions: bool = False) -> dict[str, Any]:
        return await self._call("POST", "/v1/models", json=_model_body(name, path, document, migrate_sessions))

    async def ready(self) -> bool:
        try:
            return (await self._http.get("/readyz")).status_code == 200
        except httpx.TransportError:
            return False


class AsyncRemoteSession:
    """The asyncio twin of :class:`RemoteSession`."""

    def __init__(self, client: AsyncClient, session_id: str, info: Mapping[str, Any]) -> None:
        self.client = client
        self.id = session_id
        self.info = dict(info)
        self.last: RemoteDecision | None = None

    async def observe(self, state: Mapping[str, Any], *, action: Any = None, t: float | None = None,
                      ask: bool = True, proposal: str | None = None) -> RemoteDecision:
        data = await self.client._call("POST", f"/v1/sessions/{self.id}/observe",
                                       json=_step_body(state, action, t, ask, proposal), idempotent=True)
        self.last = RemoteDecision.from_json(data)
        return self.last

    async def propose(self, tool: str, arguments: Mapping[str, Any], state: Mapping[str, Any], *,
                      tools: list[str] | None = None) -> dict[str, Any]:
        """See :meth:`RemoteSession.propose`."""
        return await self.client._call("POST", f"/v1/sessions/{self.id}/proposals", idempotent=True,
                                       json=_propose_body(tool, arguments, state, tools))

    async def preview(self, state: Mapping[str, Any]) -> RemoteDecision:
        return RemoteDecision.from_json(
            await self.client._call("POST", f"/v1/sessions/{self.id}/preview", json={"state": state}))

    async def wait_for_approval(self, decision: RemoteDecision, timeout: float = 300.0) -> dict[str, Any]:
        if decision.approval_id is None:
            raise UsageError(f"the decision (action {decision.action.value!r}) has no approval to wait for")
        return await self.client.wait_for_approval(decision.approval_id, timeout)

    async def history(self, *, offset: int = 0, limit: int = 100) -> dict[str, Any]:
        return await self.client.get_session(self.id, offset=offset, limit=limit)

    async def close(self) -> dict[str, Any]:
        return await self.client._call("POST", f"/v1/sessions/{self.id}/close")
