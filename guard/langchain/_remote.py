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
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..bundle_guard import BundleGuard
from ..client import AsyncClient, AsyncRemoteSession, Client, RemoteSession, ServerError
from ..policy import Policy
from ..runtime import Decision, Guard, Session
from .review import Review, ReviewType

__all__ = ["RemoteGuard", "MirroredSession", "propose_allowed", "remote_guard", "review_on_sidecar"]

_CREATING = ThreadPoolExecutor(max_workers=4, thread_name_prefix="forewarn-sessions")


@dataclass
class MirroredSession(Session):
    """A local session (previews, monitors, the look-ahead's scratch copies) whose every committed
    step is first committed to a sidecar session; the sidecar's decision is the one returned.

    With an :class:`AsyncClient` and a running event loop (the agent's async hooks) the sidecar
    session is created as a task of that loop and steps are committed with :meth:`aobserve`, which
    awaits the HTTP request instead of blocking the loop; the synchronous twin of the client serves
    the synchronous paths (a sync ``invoke`` on the same middleware, approvals on the sidecar)."""

    creating: Future[RemoteSession] | None = None  # the sidecar session, created in the background
    proposal: str | None = None  # the proposal the next committed step ran (set under the middleware's lock)
    acreating: asyncio.Task[AsyncRemoteSession] | None = None  # the same, created on the agent's event loop
    twin: Client | None = None  # for the synchronous paths of a session created asynchronously
    make: Callable[[], RemoteSession] | None = None  # creates it synchronously, when the loop cannot be waited on
    _deferred: list[dict[str, Any]] = field(default_factory=list)
    _alock: asyncio.Lock | None = None
    _remote: RemoteSession | None = None

    def end(self) -> None:
        """Close the sidecar session, in the background (a run's end is not worth a round trip on the
        agent's path); a session that could not be created, or is closed already, is left as it is."""
        if self.acreating is not None:
            self.acreating.add_done_callback(_aclose)
        elif self.creating is not None:
            _CREATING.submit(_close, self.creating)

    async def aend(self) -> None:
        """:meth:`end`, awaited on the agent's loop when the session was created there."""
        if self.acreating is None:
            self.end()
            return
        try:
            await (await self.acreating).close()
        except Exception:  # best effort: the sidecar expires idle sessions anyway (session_idle_seconds)
            pass

    @property
    def remote(self) -> RemoteSession:
        """The sidecar session (waits for its creation; raises what made it fail)."""
        if self._remote is not None:
            return self._remote
        if self.creating is None:  # created on an event loop: reached here from a synchronous path
            assert self.acreating is not None and self.twin is not None and self.make is not None
            created = _await_from_thread(self.acreating)
            if created is None:  # on the loop's own thread (a run rebuilt there): one made synchronously
                self.acreating.add_done_callback(_aclose)
                self._remote = self.make()
                self.acreating = None
            else:
                self._remote = RemoteSession(self.twin, created.id, created.info)
            return self._remote
        return self.creating.result()

    async def aobserve(self, state: Mapping[str, Any], *, action: Any = None, t: float | None = None,
                       approved: bool = False) -> Decision:
        """:meth:`observe` awaiting the sidecar (the async hooks' path): the same steps, the same batch of
        a run's first state with its first step, one request at a time per session."""
        if self.acreating is None:  # created synchronously: commit in a worker thread, never on the loop
            return await asyncio.to_thread(self.observe, state, action=action, t=t, approved=approved)
        if self._alock is None:
            self._alock = asyncio.Lock()
        async with self._alock:
            remote = await self.acreating
            proposal, self.proposal = self.proposal, None
            deferred, self._deferred = [d | {"session": remote.id} for d in self._deferred], []
            if deferred and proposal is None:
                step = {"session": remote.id, "state": dict(state), "ask": False} | {
                    k: v for k, v in (("action", action), ("t", t)) if v is not None}
                decided = (await remote.client.batch([*deferred, step]))[-1]
                remote.last = decided
            else:
                if deferred:
                    await remote.client.batch(deferred)
                decided = await remote.observe(state, action=action, t=t, ask=False, proposal=proposal)
            Session.observe(self, state, action=action, t=t, approved=approved)
            return decided

    def observe(self, state: Mapping[str, Any], *, action: Any = None, t: float | None = None,
                approved: bool = False) -> Decision:
        if action is None and not self.history:
            # A run's first state (before any call) is committed with the run's first step, in one batch:
            # one round trip fewer per run. Its decision is not acted on; the local one is returned.
            decision = super().observe(state, action=action, t=t, approved=approved)
            self._deferred.append({"session": "", "state": dict(state), "ask": False}
                                  | ({} if t is None else {"t": t}))
            return decision
        proposal, self.proposal = self.proposal, None
        deferred, self._deferred = [d | {"session": self.remote.id} for d in self._deferred], []
        # the sidecar first: when it cannot store the step, nothing is committed here either (fail closed)
        if deferred and proposal is None:
            step = {"session": self.remote.id, "state": dict(state), "ask": False} | {
                k: v for k, v in (("action", action), ("t", t)) if v is not None}
            decided = self.remote.client.batch([*deferred, step])[-1]
            self.remote.last = decided
        else:
            if deferred:  # (a batch cannot carry a proposal: the first state goes on its own)
                self.remote.client.batch(deferred)
            decided = self.remote.observe(state, action=action, t=t, ask=False, proposal=proposal)
        super().observe(state, action=action, t=t, approved=approved)
        return decided


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
        if self.aclient is not None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # a synchronous invoke of an agent given an AsyncClient: the twin serves it
                loop = None
            if loop is not None:
                acreating = loop.create_task(self.aclient.session(policy, model=self.model_name,
                                                                  metadata=metadata))
                return MirroredSession(guard, metadata=metadata, acreating=acreating, twin=self.client,
                                       make=partial(self.client.session, policy, model=self.model_name,
                                                    metadata=metadata))
        creating = _CREATING.submit(self.client.session, policy, model=self.model_name, metadata=metadata)
        return MirroredSession(guard, metadata=metadata, creating=creating)


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
