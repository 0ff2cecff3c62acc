"""Approvals of committed steps: ``GET /v1/approvals`` (list), ``GET /v1/approvals/{id}`` (with an
optional long poll) and ``POST /v1/approvals/{id}`` (approve or reject).

An ``ask_human`` decision on ``observe`` queues one approval; an approver of the session's tenant
resolves it. The waits are :class:`server.approvals.ApprovalHub`'s; the database is the truth.
"""
from __future__ import annotations

import time
from typing import Annotated

import orjson
from fastapi import APIRouter, Query
from starlette.responses import Response

from .. import schemas as S
from .._http import ERRORS, JSON, ApiError, Route, check_window, errors_for
from .._steps import write
from .._views import approval_out
from ..deps import Anyone, ApprovalId, Approver, AppState, Idempotency
from ..idempotency import Entry
from ..storage import Storage

router = APIRouter(route_class=Route, tags=["approvals"], responses=dict(ERRORS))


@router.get("/v1/approvals", response_model=S.ApprovalList)
async def list_approvals(state: AppState, principal: Approver,
                         status: Annotated[str, Query(pattern="^(pending|approved|rejected|cancelled|all)$",
                                                      description="pending (the default), an answer, or all.")]
                         = "pending",
                         session_id: Annotated[str | None, Query(pattern=S.ID_PATTERN, description=(
                             "The session's id."))] = None,
                         since: Annotated[float | None, Query(ge=0, le=1e11, description=(
                             "Asked at or after this time (epoch seconds)."))] = None,
                         until: Annotated[float | None, Query(ge=0, le=1e11, description=(
                             "Asked at or before this time (epoch seconds)."))] = None,
                         offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
                         limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Response:
    """Approvals of the tenants the caller may see, oldest first; by default the pending ones."""
    check_window(since, until)
    rows = state.storage.approvals(status=None if status == "all" else status, session_id=session_id,
                                   limit=min(limit, state.settings.limits.max_page), offset=offset,
                                   tenants=principal.tenants, since=since, until=until)
    out = {"approvals": [approval_out(r) for r in rows], "offset": offset, "limit": limit}
    return Response(orjson.dumps(out), media_type=JSON)


@router.get("/v1/approvals/{approval_id}", response_model=S.ApprovalOut,
            responses=errors_for((404, "Unknown approval")))
async def get_approval(approval_id: ApprovalId, state: AppState, principal: Anyone,
                       wait: Annotated[float, Query(ge=0, le=3600, description=(
                           "Seconds to wait for a pending approval to be resolved (long poll); "
                           "capped by the server's limits.max_wait_seconds."))] = 0) -> Response:
    """One approval. With ``wait``, answers as soon as it is resolved, or when the wait is over."""
    row = state.storage.approval(approval_id)
    if row is None or not principal.sees(row["tenant"]):
        raise ApiError(404, "not_found", f"no approval {approval_id!r}", field="path.approval_id")
    # no await between the read above and registering the wait: a resolution cannot slip between
    if row["status"] == "pending" and wait > 0 and await state.hub.wait(
            approval_id, min(wait, state.settings.limits.max_wait_seconds)):
        row = state.storage.approval(approval_id)
        assert row is not None
    return Response(orjson.dumps(approval_out(row)), media_type=JSON)


@router.post("/v1/approvals/{approval_id}", response_model=S.ApprovalOut,
             responses=errors_for((404, "Unknown approval"), (409, "Already resolved")))
async def resolve_approval(approval_id: ApprovalId, body: S.ApprovalResolve, state: AppState, principal: Approver,
                           idem: Idempotency) -> Response:
    """Approve or reject a pending approval, with an optional reason (``Idempotency-Key`` honoured)."""
    status = "approved" if body.decision == "approve" else "rejected"

    async def work(entry: Entry | None) -> tuple[int, bytes]:
        row = state.storage.approval(approval_id)
        if row is None or not principal.sees(row["tenant"]):
            raise ApiError(404, "not_found", f"no approval {approval_id!r}", field="path.approval_id")
        if row["status"] != "pending":
            raise ApiError(409, "already_resolved", f"approval {approval_id!r} is already {row['status']}",
                           field="path.approval_id")
        at = time.time()
        # the answer is known before the write, so it commits with it (a retry gets these very bytes)
        answer = orjson.dumps(approval_out({**dict(row), "status": status, "resolved_at": at,
                                            "resolved_by": principal.name, "reason": body.reason}))
        job = Storage.resolve_approval(approval_id, status, at, principal.name, body.reason,
                                       remember=None if entry is None else entry(200, answer))
        if not await write(state, job):
            current = state.storage.approval(approval_id)
            won = f"{current['status']} (by {current['resolved_by']})" if current else "gone"
            raise ApiError(409, "already_resolved", f"approval {approval_id!r} is already {won}",
                           field="path.approval_id")
        state.hub.resolved([approval_id], row["tenant"])
        state.metrics.approvals_resolved.labels(status).inc()
        return 200, answer

    _, payload = await idem.run(principal, work)
    return Response(payload, media_type=JSON)
