"""Steps: ``POST /v1/sessions/{id}/observe``, ``POST /v1/sessions/{id}/preview`` and ``POST /v1/batch``.

``observe`` evaluates the predicates, looks the decision up, hands one row to the writer and
awaits its commit, then answers: a decision that went out is in the database. The answer is
serialised once (orjson) and the very bytes sent are the bytes stored.

:func:`observe_core` and :func:`preview_core` take a request's raw parts and parse it themselves
(same rules and errors as FastAPI's, documented by ``openapi_extra``): in a server, the step fast
path (:class:`server._middleware.FastSteps`) calls them before routing even starts, since FastAPI's
routing and dependency solving would cost more than the step itself. The routes here are the same
handlers, for the requests the fast path passes on (a query string, another media type).
"""
from __future__ import annotations

import time
from collections import Counter

from fastapi import APIRouter, Request
from starlette.responses import Response

from ...errors import PredicateBudgetExceeded, PredicateError
from ...guard.runtime import Decision
from .. import schemas as S
from .._http import (
    ERRORS,
    JSON,
    ApiError,
    Route,
    authorize,
    bad_request,
    check_id,
    errors_for,
    parse_json,
    short,
    step_openapi,
)
from .._steps import Headers, chain_step, check_values, decision_json, trace_decision, write_steps
from ..auth import AGENT, Principal
from ..deps import Agent, AppState, Idempotency, step_context
from ..idempotency import Entry, request_hash
from ..proposals import RUNNABLE
from ..sessions import LiveSession
from ..state import ServerState
from ..storage import Storage
from ..storage.rows import ApprovalRow, PrevStep, StepRow

# the step routes come first in the app: the router tries routes in order
router = APIRouter(route_class=Route, tags=["steps"], responses=dict(ERRORS))
_STEP_ERRORS = errors_for((404, "Unknown session"), (409, "The session is closed"))


def check_state(state: ServerState, body: S.StepIn, prefix: str) -> None:
    """422 for a state or action nested deeper than ``limits.max_state_depth`` or holding more values
    than ``limits.max_state_items`` (``max_action_items``): the predicates' work is bounded by them."""
    check_values(state, body.state, body.action, prefix)


def evaluate(live: LiveSession, body: S.StepIn, prefix: str) -> int | None:
    """The abstract state of the body's state, or a 422 naming the predicate that failed; None for a state
    past the predicates' CPU budget (not the request's fault: the step is decided as an unseen state)."""
    try:
        return live.session.guard.predicates.evaluate(body.state, live.session.metadata, body.action)
    except PredicateBudgetExceeded:
        return None
    except PredicateError as exc:
        raise predicate_failure(exc, prefix) from exc
    except Exception as exc:  # a state the predicates cannot digest is the request's fault, not a 500
        raise ApiError(422, "predicate_error", f"the state cannot be evaluated: {short(str(exc))}",
                       field=f"{prefix}.state") from exc


def predicate_failure(exc: PredicateError, prefix: str) -> ApiError:
    """The 422 for a predicate that could not read the step, in the predicate's own words."""
    field = {"meta": "session.metadata", "action": f"{prefix}.action"}.get(exc.where, f"{prefix}.state")
    return ApiError(422, "predicate_error", str(exc), field=field, predicate=exc.predicate)


def runnable_proposal(state: ServerState, session_id: str, body: S.StepIn) -> tuple[S.StepIn, bool]:
    """The step of a proposal that ran: it must be this session's, and allowed, approved or edited;
    a human already decided on it, so it queues no approval. Also whether a person approved (or
    edited) it: the approval covers that one call (guard/judge.py)."""
    row = None if body.proposal is None else state.storage.proposal(body.proposal)
    if row is None or row["session_id"] != session_id:
        raise ApiError(404, "not_found", f"no proposal {body.proposal!r} in session {session_id!r}",
                       field="body.proposal")
    if row["status"] not in RUNNABLE:
        raise ApiError(409, "proposal_not_runnable", f"proposal {body.proposal!r} is {row['status']}: "
                       f"only an allowed, approved or edited proposal may run", field="body.proposal")
    return body.model_copy(update={"ask": False}), row["status"] in ("approved", "edited")


async def observe_core(state: ServerState, session_id: str, authorization: str | None, raw: bytes,
                       idempotency_key: str | None = None, headers: Headers = (),
                       known: Principal | None = None) -> bytes:
    """The observe step, from raw parts to the answer's bytes (shared by the route and the fast path;
    ``known``: the caller the fast path's middleware already authenticated)."""
    started = time.perf_counter()
    principal = authorize(state.auth, authorization, AGENT, known)
    first: LiveSession | None = step_context(state, check_id(session_id, "session_id"), principal)
    body = parse_json(raw, S.StepIn)
    check_state(state, body, "body")

    async def work(entry: Entry | None) -> tuple[int, bytes]:
        nonlocal first
        # the first attempt without a key runs with no await since the look-up; a retry (a race lost,
        # or a key's wait) looks the session up again
        live = first if first is not None and entry is None else step_context(state, session_id, principal)
        first = None
        step_body, approved = (body, False) if body.proposal is None else runnable_proposal(state, session_id, body)
        try:
            payload, row, approval, prev = chain_step(state, live, step_body, principal, approved=approved)
        except ApiError:
            raise
        except PredicateError as exc:  # worded from what observe raised: the predicates do not run again
            raise predicate_failure(exc, "body") from exc
        except Exception:  # the predicates' fault (a 422) or the server's (raised as is): evaluate() tells
            evaluate(live, body, "body")
            raise
        decision = live.session.last  # (no await since the step: it is this step's)
        await write_steps(state, [live], [row], [approval] if approval else [],
                          None if entry is None else entry(200, payload), [prev] if prev else None,
                          None if body.proposal is None else Storage.execute_proposal(body.proposal, row.step))
        if approval:
            state.hub.created(live.tenant)
        state.metrics.decision(row.action, "observe")
        if decision is not None:
            trace_decision(decision, session_id, body.action, "observed", headers)
        return 200, payload

    _, payload = await state.idempotency.run(principal.identity, idempotency_key, request_hash(
        "POST", f"/v1/sessions/{session_id}/observe", raw), work)
    state.metrics.observe_seconds.observe(time.perf_counter() - started)
    return payload


async def preview_core(state: ServerState, session_id: str, authorization: str | None, raw: bytes,
                       idempotency_key: str | None = None, headers: Headers = (),
                       known: Principal | None = None) -> bytes:
    """The preview step, from raw parts to the answer's bytes (nothing is committed)."""
    started = time.perf_counter()
    principal = authorize(state.auth, authorization, AGENT, known)
    live = step_context(state, check_id(session_id, "session_id"), principal)
    body = parse_json(raw, S.StepIn)
    check_state(state, body, "body")
    try:
        decision = live.session.preview(body.state, action=body.action)
    except PredicateError as exc:  # worded from what preview raised: the predicates do not run again
        raise predicate_failure(exc, "body") from exc
    except Exception:  # the predicates' fault (a 422) or the server's (raised as is): evaluate() tells
        evaluate(live, body, "body")
        raise
    payload = decision_json(decision, live, step=None, approval_id=None, at=time.time(), committed=False)
    state.metrics.decision(decision.action.value, "preview")
    trace_decision(decision, session_id, body.action, "proposed", headers)
    if decision.over_budget:
        state.metrics.limit_exceeded("predicate_cpu_seconds")
    state.metrics.preview_seconds.observe(time.perf_counter() - started)
    return payload


@router.post("/v1/sessions/{session_id}/observe", response_model=S.DecisionOut, responses=_STEP_ERRORS,
             openapi_extra=step_openapi())
async def observe(request: Request, state: AppState) -> Response:
    """Commit the agent's new state and answer the guard's decision. The answer is sent only after
    the step is committed to the database."""
    payload = await observe_core(state, request.path_params["session_id"], request.headers.get("authorization"),
                                 await request.body(), request.headers.get("idempotency-key"),
                                 request.scope["headers"])
    return Response(payload, media_type=JSON)


@router.post("/v1/sessions/{session_id}/preview", response_model=S.DecisionOut, responses=_STEP_ERRORS,
             openapi_extra=step_openapi())
async def preview(request: Request, state: AppState) -> Response:
    """What the guard would decide in this state; nothing is committed."""
    payload = await preview_core(state, request.path_params["session_id"], request.headers.get("authorization"),
                                 await request.body(), headers=request.scope["headers"])
    return Response(payload, media_type=JSON)


@router.post("/v1/batch", response_model=S.BatchOut, responses=_STEP_ERRORS)
async def batch(body: S.BatchIn, request: Request, state: AppState, principal: Agent, idem: Idempotency) -> Response:
    """Many steps, of one or several sessions, in order. All are checked before any is committed:
    on an error nothing is, and the error names the step (``body.steps[i]``)."""
    started = time.perf_counter()
    limit = state.settings.limits.max_batch
    if len(body.steps) > limit:
        raise bad_request(f"at most {limit} steps per batch, got {len(body.steps)}", "body.steps")
    _, payload = await idem.run(principal, lambda entry: _batch_work(state, body, principal, entry,
                                                                     request.scope["headers"]))
    state.metrics.batch_seconds.observe(time.perf_counter() - started)
    return Response(payload, media_type=JSON)


async def _batch_work(state: ServerState, body: S.BatchIn, principal: Principal,
                      entry: Entry | None, headers: Headers) -> tuple[int, bytes]:
    lives: list[LiveSession] = []
    for i, item in enumerate(body.steps):  # check everything first: all or nothing
        live = step_context(state, item.session, principal, f"body.steps[{i}].session")
        check_state(state, item, f"body.steps[{i}]")
        evaluate(live, item, f"body.steps[{i}]")
        lives.append(live)
    payloads: list[bytes] = []
    rows: list[StepRow] = []
    approvals: list[ApprovalRow] = []
    approval_tenants: list[str] = []
    committed: list[LiveSession] = []
    chains: list[PrevStep] = []
    chained: set[str] = set()
    traced: list[tuple[Decision, str, object, str]] = []
    for live, item in zip(lives, body.steps):
        if item.op == "preview":
            decision = live.session.preview(item.state, action=item.action)
            payloads.append(decision_json(decision, live, step=None, approval_id=None, at=time.time(),
                                          committed=False))
            state.metrics.decision(decision.action.value, "preview")
            traced.append((decision, live.id, item.action, "proposed"))
            if decision.over_budget:
                state.metrics.limit_exceeded("predicate_cpu_seconds")
            continue
        payload, row, approval, prev = chain_step(state, live, item, principal)
        if (last := live.session.last) is not None:
            traced.append((last, live.id, item.action, "observed"))
        if prev is not None and prev.session_id not in chained:  # within a batch, the previous row is in it
            chains.append(prev)
        chained.add(live.id)
        payloads.append(payload)
        rows.append(row)
        committed.append(live)
        if approval:
            approvals.append(approval)
            approval_tenants.append(live.tenant)
    answer = b'{"results":[' + b",".join(payloads) + b"]}"
    if rows:
        await write_steps(state, committed, rows, approvals, None if entry is None else entry(200, answer),
                          chains)
        for tenant, count in Counter(approval_tenants).items():
            state.hub.created(tenant, count)
        for row in rows:
            state.metrics.decision(row.action, "observe")
    for decision, session_id, action, phase in traced:  # once committed, as a single observe
        trace_decision(decision, session_id, action, phase, headers)
    return 200, answer
