"""The step path after parsing: apply a step to its live session, serialise the decision once,
and commit it (the answer waits for the commit)."""
from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from ..errors import ForewarnError
from ..guard.runtime import Decision
from ..guard.spec import Action
from ..guard.telemetry import record_decision, tracing
from . import schemas as S
from ._http import ApiError, bad_request, log, shape_error
from .auth import Principal
from .sessions import LiveSession
from .state import ServerState
from .storage import Conflict, OverBudget, Storage
from .storage.rows import ApprovalRow, IdempotencyRow, PrevStep, StepRow

Headers = Sequence[tuple[bytes, bytes]]  # a request's headers as ASGI has them


async def write(state: ServerState, job: Callable[..., Any]) -> Any:
    try:
        return await state.storage.write(job)
    except Conflict:
        raise  # another replica got there first: the caller reloads and tries again
    except OverBudget as exc:  # the tenant holds what it may: nothing was written
        state.metrics.limit_exceeded(exc.limit)
        raise ApiError(409, "tenant_limit", str(exc), field="body.metadata") from None
    except ForewarnError as exc:
        raise ApiError(503, "storage_unavailable", f"the database refused the write: {exc}") from exc
    except Exception as exc:
        log.error("database write failed: %s", exc)
        raise ApiError(503, "storage_unavailable", f"the database refused the write: {exc}") from exc


async def write_steps(state: ServerState, lives: list[LiveSession], rows: list[StepRow],
                      approvals: list[ApprovalRow], remember: IdempotencyRow | None = None,
                      prev: list[PrevStep] | None = None,
                      extra: Callable[..., Any] | None = None) -> None:
    """Commit step rows; the answer waits for this. On failure the sessions are dropped from memory
    (they resume from what the database holds) and the client gets a 503, never a decision; on a
    :class:`Conflict` (another replica advanced or closed a session) the caller computes them again."""
    for live in lives:
        live.inflight += 1
    waited = time.perf_counter()
    try:
        job = Storage.insert_steps(rows, approvals, prev or ())
        if extra is not None:  # e.g. the proposal the step ran, in the same transaction
            job = _then(job, extra)
        await write(state, Storage.remember(remember, job))
    except (ApiError, Conflict):
        for live in lives:
            state.sessions.forget(live)
        raise
    finally:
        for live in lives:
            live.inflight -= 1
    state.metrics.commit_seconds.observe(time.perf_counter() - waited)


def _then(first: Callable[..., Any], second: Callable[..., Any]) -> Callable[..., Any]:
    def both(conn: Any) -> Any:
        first(conn)
        return second(conn)
    return both


def chain_step(state: ServerState, live: LiveSession, body: S.StepIn, principal: Principal, *,
               approved: bool = False) -> tuple[bytes, StepRow, ApprovalRow | None, PrevStep | None]:
    """Apply an (already evaluable) step to the live session: the response bytes, the rows to write,
    and the row the step extends as this process saw it (None for a first step), checked on a shared
    database. No await in here: the step number and the history move together. ``approved``: the step
    ran a proposal a person approved; a step whose action carries the middleware's ``"approved": true``
    mark is one too."""
    before = live.session.history[-1] if live.session.history and live.next_step > 0 else None
    prev = None if before is None else PrevStep(live.id, live.next_step - 1, before.abstract,
                                         orjson.dumps(list(before.monitors)).decode() if before.monitors else None)
    if live.next_step >= state.settings.limits.max_session_steps:
        raise ApiError(409, "session_step_limit", f"session {live.id!r} has reached the limit of "
                       f"{state.settings.limits.max_session_steps} steps (limits.max_session_steps); "
                       "start a new session", field="path.session_id")
    approved = approved or (isinstance(body.action, dict) and body.action.get("approved") is True)
    decision = live.session.observe(body.state, action=body.action, t=body.t, approved=approved)
    if decision.over_budget:
        state.metrics.limit_exceeded("predicate_cpu_seconds")
    history = live.session.history
    if len(history) > 1:  # a live session keeps its last step only: memory does not grow with its length
        del history[0]
    step = live.next_step
    live.next_step += 1
    now = time.time()
    queue = decision.action is Action.ASK_HUMAN and body.ask
    approval_id = "a_" + secrets.token_urlsafe(15) if queue else None
    payload = decision_json(decision, live, step=step, approval_id=approval_id, at=now, committed=True)
    action_in = None if body.action is None else orjson.dumps(body.action).decode()
    canonical = orjson.dumps({"state": body.state, "action": body.action, "t": body.t}, option=orjson.OPT_SORT_KEYS)
    record = live.session.history[-1]
    # the monitors' states after this step: with the abstract state, all a session needs to resume
    monitors = orjson.dumps(list(record.monitors)).decode() if record.monitors else None
    row = StepRow(live.id, step, now, principal.name, live.loaded.version, hashlib.sha256(canonical).hexdigest(),
           record.abstract, monitors, action_in, body.t,
           orjson.dumps(body.state).decode() if state.settings.store_states else None,
           decision.action.value, decision.p_unsafe, payload.decode(), approval_id)
    approval = ApprovalRow(approval_id, live.id, step, now) if approval_id else None
    return payload, row, approval, prev


_DECISION_PREFIX: dict[int, tuple[Decision, bytes]] = {}


def decision_json(decision: Decision, live: LiveSession, *, step: int | None, approval_id: str | None,
                  at: float, committed: bool) -> bytes:
    """The decision as answered: the core's ``to_dict()`` (serialised once per decision object: the
    core caches decisions per product state) followed by where this answer belongs."""
    cached = _DECISION_PREFIX.get(id(decision))
    if cached is None or cached[0] is not decision:
        out = decision.to_dict()
        if len(_DECISION_PREFIX) > 100_000:
            _DECISION_PREFIX.clear()
        # keep the decision itself: its id must not be reused by another object while cached
        cached = _DECISION_PREFIX[id(decision)] = (decision, orjson.dumps(out)[:-1])
    tail = orjson.dumps({"approval_id": approval_id, "session_id": live.id, "step": step, "committed": committed,
                         "model": {"name": live.model_name, "version": live.loaded.version}, "at": at})
    return cached[1] + b"," + tail[1:]


def trace_decision(decision: Decision, session_id: str, tool_of: Any, phase: str, headers: Headers,
                   action: Action | str | None = None) -> None:
    """The sidecar's decision as a ``forewarn.decision`` span (:mod:`forewarn.guard.telemetry`), a child
    of the caller's span when its request carries a ``traceparent``; nothing at all (not even the
    headers read) unless the application configured OpenTelemetry."""
    if not tracing():
        return
    carrier = {name.decode("latin-1"): value.decode("latin-1") for name, value in headers}
    tool = tool_of.get("tool") if isinstance(tool_of, dict) else tool_of
    record_decision(decision, tool=tool if isinstance(tool, str) else None, phase=phase, session=session_id,
                    action=action, carrier=carrier)


def check_values(state: ServerState, concrete: dict[str, Any], action: Any, prefix: str,
                 action_field: str = "action") -> None:
    """:func:`check_state` for any route that hands a state (and an action) to the predicates."""
    limits = state.settings.limits
    found = shape_error(concrete, limits.max_state_depth, limits.max_state_items)
    if found is not None:
        state.metrics.limit_exceeded("max_state_depth" if "nested" in found[0] else "max_state_items")
        raise bad_request(f"state {found[0]}", f"{prefix}.state{found[1]}")
    if isinstance(action, dict | list) and (
            found := shape_error(action, limits.max_state_depth, limits.max_action_items)) is not None:
        state.metrics.limit_exceeded("max_state_depth" if "nested" in found[0] else "max_action_items")
        raise bad_request(f"{action_field} {found[0]}", f"{prefix}.{action_field}{found[1]}")
    elif isinstance(action, str) and len(action) > limits.max_action_items:
        state.metrics.limit_exceeded("max_action_items")
        raise bad_request(f"{action_field} is longer than {limits.max_action_items} characters",
                          f"{prefix}.{action_field}")
