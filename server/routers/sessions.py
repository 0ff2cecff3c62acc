"""Sessions: ``POST /v1/sessions`` (create), ``GET /v1/sessions`` (list and search), ``GET
/v1/sessions/{id}`` (with its committed steps), ``GET /v1/sessions/{id}/trail`` (everything that
happened in it, in order) and ``POST /v1/sessions/{id}/close``.

A session belongs to the tenant of the agent key that opened it; a key that may not see it gets
404, as if it did not exist (:func:`server.deps.live_session`). Its steps are in :mod:`.steps`,
its proposals in :mod:`.proposals`.
"""
from __future__ import annotations

import secrets
import time
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query
from starlette.responses import Response

from ...errors import ForewarnError
from .. import schemas as S
from .._http import ERRORS, JSON, ApiError, Route, bad_request, check_window, errors_for, held_bytes, shape_error
from .._steps import write
from .._views import policy_overrides, session_summary, step_out
from ..deps import Agent, Anyone, AppState, Idempotency, SessionId, live_session
from ..expiry import close_live
from ..idempotency import Entry
from ..models_registry import UnknownModel
from ..sessions import LiveSession, effective_policy, make_session
from ..storage import Storage
from ..storage.rows import SessionRow
from ..storage.sessions import SessionSearch
from ..trail import trail_events

router = APIRouter(route_class=Route, tags=["sessions"], responses=dict(ERRORS))


@router.post("/v1/sessions", response_model=S.SessionCreated, status_code=201,
             responses=errors_for((404, "Unknown model"), (409, "The tenant's open sessions hold "
                                                             "limits.max_tenant_metadata_bytes of metadata")))
async def create_session(body: S.SessionCreate, state: AppState, principal: Agent, idem: Idempotency) -> Response:
    """Start a session on a model (the default one unless named), with optional policy overrides
    (``Idempotency-Key`` honoured: a retry gets the same session, and no second one is made)."""
    name = body.model or state.settings.default
    try:
        loaded = state.registry.current(name)
    except UnknownModel as exc:
        raise ApiError(404, "unknown_model", str(exc), field="body.model") from None
    overrides = policy_overrides(body.policy)
    metadata = None if body.metadata is None else orjson.dumps(body.metadata).decode()
    held = 0
    if body.metadata is not None:  # held in memory with every live session: small, and bounded
        limits = state.settings.limits
        if (found := shape_error(body.metadata, limits.max_state_depth, limits.max_metadata_items)) is not None:
            state.metrics.limit_exceeded("max_state_depth" if "nested" in found[0] else "max_metadata_items")
            raise bad_request(f"metadata {found[0]}", f"body.metadata{found[1]}")
        if len((metadata or "").encode()) > limits.max_metadata_bytes:
            state.metrics.limit_exceeded("max_metadata_bytes")
            raise bad_request(f"metadata is larger than {limits.max_metadata_bytes} bytes as JSON", "body.metadata")
        held = held_bytes(body.metadata)  # what the tenant's budget counts: memory, not JSON
    try:
        session = make_session(loaded, overrides, body.metadata)
    except (ValueError, TypeError) as exc:
        raise bad_request(f"policy: {exc}", "body.policy") from exc

    async def work(entry: Entry | None) -> tuple[int, bytes]:
        session_id = "s_" + secrets.token_urlsafe(15)
        now = time.time()
        row = SessionRow(session_id, name, loaded.version, orjson.dumps(overrides).decode() if overrides else None,
                         metadata, now, principal.name, principal.tenant, held)
        out = orjson.dumps({"id": session_id, "model": {"name": name, "version": loaded.version},
                            "policy": effective_policy(session.guard.policy), "created_at": now})
        job = Storage.insert_session(row, state.settings.limits.max_tenant_metadata_bytes)
        await write(state, Storage.remember(None if entry is None else entry(201, out), job))
        state.sessions.add(LiveSession(session_id, name, loaded, overrides, session, closed=False, next_step=0,
                                       tenant=principal.tenant))
        return 201, out

    code, payload = await idem.run(principal, work)
    return Response(payload, status_code=code, media_type=JSON)


_DECISIONS = "^(allow|reflect|ask_human|stop|approved|rejected|edited|cancelled)$"


@router.get("/v1/sessions", response_model=S.SessionList)
async def list_sessions(state: AppState, principal: Anyone,
                        status: Annotated[str, Query(pattern="^(open|closed|all)$", description=(
                            "open, closed, or all (the default)."))] = "all",
                        session_id: Annotated[str | None, Query(pattern=S.ID_PATTERN, description=(
                            "A part of the session's id."))] = None,
                        tool: Annotated[str | None, Query(min_length=1, max_length=200, description=(
                            "A tool the session proposed or called."))] = None,
                        decision: Annotated[str | None, Query(pattern=_DECISIONS, description=(
                            "A guard action one of its steps or proposals got (allow, reflect, ask_human, stop), "
                            "or an answer a proposal or approval got (approved, rejected, edited, cancelled)."))]
                        = None,
                        since: Annotated[float | None, Query(ge=0, le=1e11, description=(
                            "Open at or after this time (epoch seconds)."))] = None,
                        until: Annotated[float | None, Query(ge=0, le=1e11, description=(
                            "Opened at or before this time (epoch seconds)."))] = None,
                        offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
                        limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Response:
    """Sessions the caller may see (its tenant's, an approver's tenants', all for admin), newest first;
    searched by a part of their id, a tool, a decision or answer, and the time they were open."""
    check_window(since, until)
    search = SessionSearch(session_id, tool, decision, since, until)
    rows = state.storage.list_sessions(status=None if status == "all" else status, limit=min(limit, state.settings.limits.max_page),
                                       offset=offset, tenants=principal.tenants,
                                       search=None if search == SessionSearch() else search)
    out = {"sessions": [session_summary(r) for r in rows], "offset": offset, "limit": limit}
    return Response(orjson.dumps(out), media_type=JSON)


@router.get("/v1/sessions/{session_id}", response_model=S.SessionOut, responses=errors_for((404, "Unknown session")))
async def get_session(session_id: SessionId, state: AppState, principal: Anyone,
                      offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
                      limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Response:
    """A session with its committed steps and their decisions (paged: ``offset``, ``limit``)."""
    row = state.storage.session_row(session_id)
    if row is None or not principal.sees(row["tenant"] or row["created_by"]):
        raise ApiError(404, "not_found", f"no session {session_id!r}", field="path.session_id")
    limit = min(limit, state.settings.limits.max_page)
    steps = state.storage.steps(session_id, limit=limit, offset=offset)
    overrides = orjson.loads(row["policy"]) if row["policy"] else None
    try:
        loaded = state.registry.version(row["model_version"])
        names = loaded.model.spec.predicate_names
        policy = effective_policy(make_session(loaded, overrides).guard.policy)
    except (ForewarnError, ValueError):
        names, policy = [], None
    out = {
        **session_summary(row, steps_total=state.storage.step_count(session_id)),
        "policy": overrides,
        "effective_policy": policy,
        "created_by": row["created_by"],
        "closed_by": row["closed_by"],
        "offset": offset, "limit": limit,
        "steps": [step_out(r, names) for r in steps],
    }
    return Response(orjson.dumps(out), media_type=JSON)


@router.get("/v1/sessions/{session_id}/trail", response_model=S.Trail,
            responses=errors_for((404, "Unknown session")))
async def session_trail(session_id: SessionId, state: AppState, principal: Anyone,
                        offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
                        limit: Annotated[int, Query(ge=1, le=1000)] = 1000) -> Response:
    """Everything that happened in a session, oldest first, with who did it: opened, each proposal
    (a call asked about before it ran) and its answer (approved, rejected, edited, cancelled), each
    committed step with the guard's decision, each approval a step asked for and its answer, closed
    (paged: ``offset``, ``limit``)."""
    row = state.storage.session_row(session_id)
    if row is None or not principal.sees(row["tenant"] or row["created_by"]):
        raise ApiError(404, "not_found", f"no session {session_id!r}", field="path.session_id")
    limit = min(limit, state.settings.limits.max_page)
    # the first `upto` events are among the first `upto` steps, proposals and approvals, each in time
    # order (an answer comes after its request): a page reads no more than it shows, and what precedes it
    upto = offset + limit
    storage = state.storage
    events = trail_events(row, storage.trail_steps(session_id, upto),
                          storage.proposals(status=None, session_id=session_id, limit=upto, offset=0),
                          storage.approvals(status=None, session_id=session_id, limit=upto, offset=0))
    out = {"session": session_summary(row, steps_total=storage.step_count(session_id)),
           "events": events[offset:upto], "events_total": storage.trail_size(session_id), "offset": offset,
           "limit": limit}
    return Response(orjson.dumps(out), media_type=JSON)


@router.post("/v1/sessions/{session_id}/close", response_model=S.SessionSummary,
             responses=errors_for((404, "Unknown session")))
async def close_session(session_id: SessionId, state: AppState, principal: Agent, idem: Idempotency) -> Response:
    """Close a session: no more steps; its pending approvals are cancelled. Closing twice is harmless
    (``Idempotency-Key`` honoured: a retry gets the first answer's very bytes)."""
    live = live_session(state, session_id, principal)

    async def work(entry: Entry | None) -> tuple[int, bytes]:
        if not live.closed:
            answer = b""

            def remember(at: float) -> Any:
                # the answer is known before the write, so it commits with it (a retry gets these very bytes)
                nonlocal answer
                row = {**dict(state.storage.session_row(session_id) or {}), "closed_at": at,
                       "closed_by": principal.name}
                answer = orjson.dumps(session_summary(row, steps_total=live.next_step))
                return None if entry is None else entry(200, answer)

            await close_live(state, live, principal.name, remember)
            return 200, answer
        stored = state.storage.session_row(session_id)
        if stored is None:  # sessions are never deleted; this would be a bug
            raise ApiError(503, "session_unavailable", f"session {session_id!r} vanished")
        answer = orjson.dumps(session_summary(stored, steps_total=live.next_step))
        if entry is not None:  # already closed: the answer is remembered all the same
            await write(state, Storage.remember(entry(200, answer), lambda conn: None))
        return 200, answer

    _, payload = await idem.run(principal, work)
    return Response(payload, media_type=JSON)

