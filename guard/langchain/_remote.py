"""The middleware on a sidecar: ``ForewarnMiddleware(Client(url, api_key=...))``.

Design (issue 13): the middleware previews every proposed call before it runs, often
several per model turn, each after the calls before it. Asking the server for each would
cost a round trip per preview and a server-side scratch session per turn. Instead the
middleware fetches the model the sidecar serves (``GET /v1/models/{name}/document``) once,
at construction, and previews with a local copy of it — the same file, the same policy,
so the same decisions — while every step that runs is committed to the sidecar
(``observe``), which keeps the audit log and answers the decision the middleware acts on.

Round trips (bench/middleware_overhead.py): a run's sidecar session is created in the
background as the run starts (before its first model call, which it overlaps), and the
run's first state is committed with its first step in one batch, so a run of n steps costs
n step requests and one creation off the critical path (it was n + 2 in a row).

The human is asked through the graph's interrupt, as in process, so the sidecar's
commits carry ``ask: false``: no second approval is queued for a step a person already
decided on in the agent (the action recorded says how it was reviewed). With
``approvals="sidecar"`` the human is asked on the sidecar instead (its console): a call
that needs approval becomes a pending proposal the tool node waits on
(:func:`review_on_sidecar`); an edit made there is judged again by the agent, which
extracts the edited call's state and proposes it anew (``edit_of``); the step a proposal
led to is committed linked to it.
"""
from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..bundle_guard import BundleGuard
from ..client import AsyncClient, AsyncRemoteSession, Client, RemoteSession, ServerError, SidecarUnreachable
from ..client._core import unreachable
from ..policy import Policy
from ..runtime import Decision, Guard, Session
from .review import Review, ReviewType

log = logging.getLogger("forewarn.langchain")
_CREATING = ThreadPoolExecutor(max_workers=4, thread_name_prefix="forewarn-sessions")


@dataclass
class MirroredSession(Session):
    """A local session (previews, monitors, the look-ahead's scratch copies) whose every committed
    step is first committed to a sidecar session; the sidecar's decision is the one returned.

    With an :class:`AsyncClient` and a running event loop (the agent's async hooks) the sidecar
    session is created as a task of that loop and steps are committed with :meth:`aobserve`, which
    awaits the HTTP request instead of blocking the loop; the synchronous twin of the client serves
    the synchronous paths (a sync ``invoke`` on the same middleware, approvals on the sidecar).

    Fail closed (issue 36): previews are local, so before a call runs the tool node makes one round
    trip to the sidecar (:meth:`reach`, :meth:`areach`); when the sidecar does not answer, the call
    does not run (:class:`~guard.client.SidecarUnreachable`) and is kept in :attr:`refused`, which the
    next committed step carries (its action's ``refused``). A call that ran but whose step the sidecar
    could not store (it went down while the tool ran) is committed here, kept, and sent before the
    next call runs (its action's ``recorded_late``)."""

    creating: Future[RemoteSession] | None = None  # the sidecar session, created in the background
    proposal: str | None = None  # the proposal the next committed step ran (set under the middleware's lock)
    acreating: asyncio.Task[AsyncRemoteSession] | None = None  # the same, created on the agent's event loop
    twin: Client | None = None  # for the synchronous paths of a session created asynchronously
    # creates it synchronously: when the loop cannot be waited on, or anew after its creation failed
    make: Callable[[], RemoteSession] | None = None
    amake: Callable[[], Coroutine[Any, Any, AsyncRemoteSession]] | None = None  # anew, on the agent's loop
    url: str = ""  # the sidecar's, for the error that refuses a call
    refused: list[dict[str, Any]] = field(default_factory=list)  # calls that did not run: no sidecar answered
    _deferred: list[dict[str, Any]] = field(default_factory=list)  # steps the sidecar has not got yet
    _alock: asyncio.Lock | None = None
    _remote: RemoteSession | None = None
    _state: Mapping[str, Any] | None = None  # the last state committed (a preview of it shows the sidecar answers)
    _recreate: bool = False  # the session was never created on the sidecar: create it at the next need
    _made: bool = False  # _remote was created synchronously here (closed through it)

    def end(self) -> None:
        """Close the sidecar session, in the background (a run's end is not worth a round trip on the
        agent's path); a session that could not be created, or is closed already, is left as it is.
        Steps that ran while the sidecar could not be reached are sent first (a warning when they
        still cannot be)."""
        if self._gap():
            _CREATING.submit(self._send_and_close)
        elif self._made and self._remote is not None:
            _CREATING.submit(_close_now, self._remote)
        elif self.acreating is not None:
            self.acreating.add_done_callback(_aclose)
        elif self.creating is not None:
            _CREATING.submit(_close, self.creating)

    async def aend(self) -> None:
        """:meth:`end`, awaited on the agent's loop when the session was created there."""
        if self.acreating is None:
            self.end()
            return
        if self._recreate and not self._gap():  # never created there, nothing to send: nothing to close
            return
        try:
            remote = await self._aremote()
            if self._gap():
                pending = self._sendable(remote.id)
                await remote.client.batch(pending)
                del self._deferred[:len(pending)]
            await remote.close()
        except Exception as exc:  # best effort: the sidecar expires idle sessions anyway (session_idle_seconds)
            self._warn_gap(exc)

    def _gap(self) -> bool:
        """Whether steps that ran are still to be sent (not only the run's first state)."""
        return any("action" in d for d in self._deferred)

    def _warn_gap(self, exc: BaseException) -> None:
        if self._gap():
            log.warning("Forewarn's sidecar at %s did not answer at the run's end: %d step(s) that ran are "
                        "missing from its audit log (%s)", self.url, sum("action" in d for d in self._deferred), exc)

    def _send_and_close(self) -> None:
        try:
            remote = self.remote
            pending = self._sendable(remote.id)
            remote.client.batch(pending)
            del self._deferred[:len(pending)]
            remote.close()
        except Exception as exc:  # (a thread of _CREATING: nobody to raise to)
            self._warn_gap(exc)

    @property
    def remote(self) -> RemoteSession:
        """The sidecar session (waits for its creation; raises what made it fail). One whose creation
        failed earlier is created anew."""
        if self._remote is not None:
            return self._remote
        if self._recreate and self.make is not None:
            self._remote = self.make()  # (raises while the sidecar is still down: tried again at the next need)
            self._recreate, self._made = False, True
            return self._remote
        if self.creating is None:  # created on an event loop: reached here from a synchronous path
            assert self.acreating is not None and self.twin is not None and self.make is not None
            created = _await_from_thread(self.acreating)
            if created is None:  # on the loop's own thread (a run rebuilt there): one made synchronously
                self.acreating.add_done_callback(_aclose)
                self._remote = self.make()
                self.acreating, self._made = None, True
            else:
                self._remote = RemoteSession(self.twin, created.id, created.info)
            return self._remote
        self._remote = self.creating.result()
        return self._remote

    async def _aremote(self) -> AsyncRemoteSession:
        """The sidecar session on the agent's loop (one whose creation failed earlier is created anew)."""
        assert self.acreating is not None
        if self._recreate and self.amake is not None:
            self._recreate = False
            self.acreating = asyncio.get_running_loop().create_task(self.amake())
        return await self.acreating

    def _lost(self) -> None:
        """The sidecar did not answer: a session it never created is created anew at the next need."""
        task = self.acreating
        if self._remote is None and (task is None or (task.done() and (task.cancelled() or task.exception() is not None))):
            self._recreate = True

    def _sendable(self, session_id: str) -> list[dict[str, Any]]:
        return [d | {"session": session_id} for d in self._deferred]

    def _carrying(self, action: Any) -> tuple[Any, int]:
        """The action the sidecar is sent: with the calls refused since its last committed step (and how many)."""
        if not self.refused or not isinstance(action, Mapping):
            return action, 0
        return {**action, "refused": list(self.refused)}, len(self.refused)

    def refuse(self, tool: str, args: Any, exc: ServerError) -> SidecarUnreachable:
        """The error for a call that does not run because the sidecar did not answer (``exc``); the call is
        kept in :attr:`refused` for the sidecar's record."""
        self._lost()
        self.refused.append({"tool": tool, "args": args, "at": time.time(), "error": str(exc)})
        return SidecarUnreachable(self.url, tool, exc)

    def _keep(self, state: Mapping[str, Any], sent: Any, t: float | None, proposal: str | None, carried: int,
              exc: ServerError) -> None:
        """A step that ran while the sidecar could not be reached: kept, sent before the next call runs."""
        self._lost()
        if isinstance(sent, Mapping):
            sent = {**sent, "recorded_late": {"ran_at": time.time(), "error": str(exc)}} | (
                {"proposal": proposal} if proposal is not None else {})  # (a batch cannot link a proposal)
        self._deferred.append({"session": "", "state": dict(state), "ask": False} | {
            k: v for k, v in (("action", sent), ("t", t)) if v is not None})
        del self.refused[:carried]  # (carried by the kept step)
        tool = sent.get("tool") if isinstance(sent, Mapping) else sent
        log.warning("Forewarn's sidecar at %s did not answer the commit of the call to %r, which ran: its step "
                    "is kept and sent before the next call runs (%s)", self.url, tool, exc)

    def reach(self, tool: str, args: Any) -> None:
        """Before a call runs: one round trip that shows the sidecar answers for this session — the steps
        it has not got (the run's first state, steps kept while it was down), or a preview of the last state.

        Raises:
            SidecarUnreachable: it did not answer (the call is kept in :attr:`refused`; it must not run).
            ServerError: it refused the request (a session closed there, a key without the right).
        """
        try:
            remote = self.remote
            pending = self._sendable(remote.id)
            if pending:
                remote.client.batch(pending)
                del self._deferred[:len(pending)]
            elif self._state is not None:
                remote.preview(self._state)
            else:
                remote.history(limit=1)
        except ServerError as exc:
            if not unreachable(exc):
                raise
            raise self.refuse(tool, args, exc) from exc

    async def areach(self, tool: str, args: Any) -> None:
        """:meth:`reach` on the agent's loop (a session created there)."""
        if self._alock is None:
            self._alock = asyncio.Lock()
        async with self._alock:
            try:
                remote = await self._aremote()
                pending = self._sendable(remote.id)
                if pending:
                    await remote.client.batch(pending)
                    del self._deferred[:len(pending)]
                elif self._state is not None:
                    await remote.preview(self._state)
                else:
                    await remote.history(limit=1)
            except ServerError as exc:
                if not unreachable(exc):
                    raise
                raise self.refuse(tool, args, exc) from exc

    async def aobserve(self, state: Mapping[str, Any], *, action: Any = None, t: float | None = None,
                       approved: bool = False) -> Decision:
        """:meth:`observe` awaiting the sidecar (the async hooks' path): the same steps, the same batch of
        a run's first state with its first step, one request at a time per session."""
        if self.acreating is None:  # created synchronously: commit in a worker thread, never on the loop
            return await asyncio.to_thread(self.observe, state, action=action, t=t, approved=approved)
        if self._alock is None:
            self._alock = asyncio.Lock()
        async with self._alock:
            proposal, self.proposal = self.proposal, None
            sent, carried = self._carrying(action)
            decided: Decision | None = None
            try:
                remote = await self._aremote()
                deferred = self._sendable(remote.id)
                if deferred and proposal is None:
                    step = {"session": remote.id, "state": dict(state), "ask": False} | {
                        k: v for k, v in (("action", sent), ("t", t)) if v is not None}
                    decided = remote.last = (await remote.client.batch([*deferred, step]))[-1]
                    del self._deferred[:len(deferred)]
                else:
                    if deferred:
                        await remote.client.batch(deferred)
                        del self._deferred[:len(deferred)]
                    decided = await remote.observe(state, action=sent, t=t, ask=False, proposal=proposal)
                del self.refused[:carried]
            except ServerError as exc:
                if not unreachable(exc):
                    raise
                self._keep(state, sent, t, proposal, carried, exc)
            local = Session.observe(self, state, action=action, t=t, approved=approved)
            self._state = state
            return decided if decided is not None else local

    def observe(self, state: Mapping[str, Any], *, action: Any = None, t: float | None = None,
                approved: bool = False) -> Decision:
        if action is None and not self.history:
            # A run's first state (before any call) is committed with the run's first step, in one batch:
            # one round trip fewer per run. Its decision is not acted on; the local one is returned.
            decision = super().observe(state, action=action, t=t, approved=approved)
            self._deferred.append({"session": "", "state": dict(state), "ask": False}
                                  | ({} if t is None else {"t": t}))
            self._state = state
            return decision
        proposal, self.proposal = self.proposal, None
        sent, carried = self._carrying(action)
        decided: Decision | None = None
        # the sidecar first: a step it refuses is not committed here either; one it cannot be reached for
        # ran all the same (the tool node reached it before the call), so it is kept for it (_keep)
        try:
            remote = self.remote
            deferred = self._sendable(remote.id)
            if deferred and proposal is None:
                step = {"session": remote.id, "state": dict(state), "ask": False} | {
                    k: v for k, v in (("action", sent), ("t", t)) if v is not None}
                decided = remote.last = remote.client.batch([*deferred, step])[-1]
                del self._deferred[:len(deferred)]
            else:
                if deferred:  # (a batch cannot carry a proposal: the first state goes on its own)
                    remote.client.batch(deferred)
                    del self._deferred[:len(deferred)]
                decided = remote.observe(state, action=sent, t=t, ask=False, proposal=proposal)
            del self.refused[:carried]
        except ServerError as exc:
            if not unreachable(exc):
                raise
            self._keep(state, sent, t, proposal, carried, exc)
        local = super().observe(state, action=action, t=t, approved=approved)
        self._state = state
        return decided if decided is not None else local


def _close_now(session: RemoteSession) -> None:
    try:
        session.close()
    except Exception:  # best effort, as _close
        pass


def _close(creating: Future[RemoteSession]) -> None:
    try:
        creating.result().close()
    except Exception:  # best effort: the sidecar expires idle sessions anyway (session_idle_seconds)
        pass


def _aclose(task: asyncio.Task[AsyncRemoteSession]) -> None:
    if task.cancelled() or task.exception() is not None:
        return
    closing = asyncio.ensure_future(_aclose_now(task.result()))
    _CLOSING.add(closing)
    closing.add_done_callback(_CLOSING.discard)


async def _aclose_now(session: AsyncRemoteSession) -> None:
    try:
        await session.close()
    except Exception:  # best effort, as _close
        pass


_CLOSING: set[asyncio.Future[None]] = set()  # closes in flight (the loop keeps only weak references to tasks)


def _await_from_thread(task: asyncio.Task[AsyncRemoteSession]) -> AsyncRemoteSession | None:
    """The result of a task of another thread's loop (or of a done one); None on the loop's own thread,
    where waiting would never end."""
    if task.done():
        return task.result()
    loop = task.get_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        return None
    return asyncio.run_coroutine_threadsafe(_wait(task), loop).result()


async def _wait(task: asyncio.Task[AsyncRemoteSession]) -> AsyncRemoteSession:
    return await task


class RemoteGuard:
    """What the middleware needs of a guard, with the decisions kept by a sidecar (``aclient``: an
    :class:`AsyncClient` the async hooks commit with; ``client`` its synchronous twin)."""

    def __init__(self, client: Client, local: Guard | BundleGuard, model: str | None,
                 aclient: AsyncClient | None = None) -> None:
        self.client = client
        self.local = local
        self.model_name = model
        self.aclient = aclient

    # the local model's face: spec, policy and predicates for the start warning, previews and words
    @property
    def policy(self) -> Policy:
        return self.local.policy

    @property
    def model(self) -> Any:
        return self.local.model

    @property
    def predicates(self) -> Any:
        return self.local.predicates

    @property
    def property(self) -> str:
        return self.local.property

    def with_policy(self, policy: Policy) -> RemoteGuard:
        return RemoteGuard(self.client, self.local.with_policy(policy), self.model_name, self.aclient)

    def with_member_policies(self, adjust: Callable[[Policy], Policy]) -> RemoteGuard:
        """A bundle's members keep their own policies, each passed through ``adjust`` (see
        :meth:`BundleGuard.with_member_policies`); a single model's policy is adjusted."""
        local = self.local.with_member_policies(adjust) if isinstance(self.local, BundleGuard) else \
            self.local.with_policy(adjust(self.local.policy))
        return RemoteGuard(self.client, local, self.model_name, self.aclient)

    def session(self, policy: Policy | None = None, *, metadata: Mapping[str, Any] | None = None) -> MirroredSession:
        local = self.local if policy is None else self.local.with_policy(policy)
        guard = local.for_metadata(metadata)
        policy = guard.policy  # a bundle's member's own: the sidecar applies it over that member's
        # created while the agent goes on (its model is called next): needed only at the run's first commit
        make = partial(self.client.session, policy, model=self.model_name, metadata=metadata)
        if self.aclient is not None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # a synchronous invoke of an agent given an AsyncClient: the twin serves it
                loop = None
            if loop is not None:
                amake = partial(self.aclient.session, policy, model=self.model_name, metadata=metadata)
                return MirroredSession(guard, metadata=metadata, acreating=loop.create_task(amake()),
                                       twin=self.client, make=make, amake=amake, url=self.client.url)
        return MirroredSession(guard, metadata=metadata, creating=_CREATING.submit(make), make=make,
                               url=self.client.url)


def remote_guard(client: Client | AsyncClient, model: str | None = None, *,
                 trusted_keys: Any = None) -> RemoteGuard:
    """A :class:`RemoteGuard` on ``client``'s sidecar. An :class:`AsyncClient` commits the steps of the
    async hooks; a synchronous twin on the same URL and key fetches the model once and serves the
    synchronous paths."""
    twin, aclient = None, None
    if isinstance(client, AsyncClient):
        aclient, twin = client, client.synchronous()
        client = twin
    guard = RemoteGuard(client, client.guard(model, trusted_keys=trusted_keys), model,
                        aclient)
    if twin is not None:  # ours to close: when the guard goes, its connections go with it
        weakref.finalize(guard, twin.close)
    return guard


def review_on_sidecar(session: MirroredSession, call: Mapping[str, Any], state: Mapping[str, Any],
                      tools: list[str], *, edit_of: str | None, timeout: float,
                      allowed: Sequence[ReviewType], request: str | None = None) -> tuple[Review, str]:
    """Ask the sidecar's approvers about a call (a pending proposal) and wait for their answer:
    the review, and the proposal's id. No answer within ``timeout`` seconds, or a session closed
    meanwhile, is a rejection (the call does not run); so is an answer the agent does not allow."""
    assert session.remote is not None
    answer = session.remote.propose(call["name"], call["args"], state, tools=tools, ask=True, edit_of=edit_of,
                                    timeout=timeout, request=request)
    client = session.remote.client
    if answer["status"] == "pending":
        answer = client.wait_for_proposal(answer["id"], timeout)
    withdrawn = False
    if answer["status"] == "pending":  # nobody answered: withdraw it, unless an answer beat us to it
        try:
            answer = client.cancel_proposal(answer["id"], f"the agent stopped waiting after {timeout:g} s")
            withdrawn = True
        except ServerError as exc:
            if exc.code != "already_resolved":
                raise
            answer = client.proposal(answer["id"])
    review = _review_of(answer, withdrawn, timeout)
    if review.type not in allowed:
        review = Review("reject", message=f"the approver answered {review.type!r}, which this agent does not "
                                          f"allow (allowed: {', '.join(allowed)})")
    return review, answer["id"]


def propose_allowed(session: MirroredSession, call: Mapping[str, Any], state: Mapping[str, Any],
                    tools: list[str], *, edit_of: str) -> str:
    """Record on the sidecar a reviewer's edit that the agent judged again and lets run (nobody is
    asked): the id of the proposal its step is to be linked to."""
    allowed = session.remote.propose(call["name"], call["args"], state, ask=False, edit_of=edit_of, tools=tools)
    proposal: str = allowed["id"]
    return proposal


def _review_of(answer: Mapping[str, Any], withdrawn: bool, timeout: float) -> Review:
    status = answer["status"]
    if status == "approved":
        return Review("approve")
    if status == "edited":
        edited = answer.get("edited") or {}
        return Review("edit", name=edited.get("tool"), args=dict(edited.get("arguments") or {}))
    reason = answer.get("reason")
    if withdrawn:
        reason = f"no approver answered within {timeout:g} s"
    elif status == "cancelled":
        reason = "the session was closed before an approver answered"
    return Review("reject", message=reason)
