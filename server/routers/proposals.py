"""Proposals, approval *before* a call runs: ``POST /v1/sessions/{id}/proposals`` (propose),
``GET /v1/proposals`` (list), ``GET /v1/proposals/{id}`` (with an optional long poll) and
``POST /v1/proposals/{id}`` (approve, reject or edit) and ``POST /v1/proposals/{id}/cancel`` (the
agent withdraws it).

What a proposal is, its statuses and how it is shown are in :mod:`server.proposals`; a proposal
that ran is observed by the step routes (:mod:`.steps`) with ``"proposal": id``.
"""
from __future__ import annotations

import secrets
import time
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Request
from fastapi import Path as PathParam
from starlette.responses import Response

from ...guard.judge import judge_call
from ...guard.toolcalls.extractor import ToolStateExtractor
from .. import schemas as S
from .._http import ERRORS, JSON, ApiError, Route, check_window, errors_for, short
from .._steps import check_values, trace_decision, write
from ..auth import Principal
from ..deps import Agent, Anyone, Approver, AppState, Idempotency, live_session, step_context
from ..idempotency import Entry
from ..proposals import STATUS_OF, proposal_out, review_facts, state_words
from ..state import ServerState
from ..storage import Storage
from ..storage.rows import ProposalRow

_KINDS = ToolStateExtractor()  # which tools only read, by the default kinds (the agent's state comes extracted)

ProposalId = Annotated[str, PathParam(pattern=S.ID_PATTERN, description="A proposal id.")]
router = APIRouter(route_class=Route, tags=["proposals"], responses=dict(ERRORS))


def _visible(state: ServerState, proposal_id: str, principal: Principal) -> Any:
    row = state.storage.proposal(proposal_id)
    if row is None or not principal.sees(row["tenant"]):  # another tenant's: as if it did not exist
        raise ApiError(404, "not_found", f"no proposal {proposal_id!r}", field="path.proposal_id")
    return row


def _edited_one(state: ServerState, proposal_id: str, session_id: str, principal: Principal) -> str:
    """The proposal an ``edit_of`` names: this session's, visible to the caller, and resolved as edited."""
    row = state.storage.proposal(proposal_id)
    if row is None or not principal.sees(row["tenant"]) or row["session_id"] != session_id:
        raise ApiError(422, "invalid_request", f"edit_of: no proposal {proposal_id!r} in session {session_id!r}",
                       field="body.edit_of")
    if row["status"] != "edited":
        raise ApiError(409, "not_edited", f"edit_of: proposal {proposal_id!r} is {row['status']}, not edited",
                       field="body.edit_of")
    return proposal_id


@router.post("/v1/sessions/{session_id}/proposals", status_code=201,
             responses=errors_for((404, "Unknown session"), (409, "The session is closed")))
async def propose(session_id: Annotated[str, PathParam(pattern=S.ID_PATTERN)], body: S.ProposalIn,
                  request: Request, state: AppState, principal: Agent, idem: Idempotency) -> Response:
    """Judge a tool call before it runs (nothing is committed); ``ask_human`` opens one pending approval."""
    step_context(state, session_id, principal)
    check_values(state, body.state, body.arguments, "body", "arguments")

    async def work(entry: Entry | None) -> tuple[int, bytes]:
        live = step_context(state, session_id, principal)
        try:  # the rule the middleware and the MCP proxy judge by (guard/judge.py)
            verdict = judge_call(live.session, body.state, body.tool, body.arguments,
                                 consequential=not _KINDS.reads_only(body.tool))
        except Exception as exc:  # a message cut short: an error never echoes the input
            raise ApiError(422, "predicate_error", f"the state cannot be evaluated: {short(str(exc))}",
                           field="body.state") from exc
        decision = verdict.decision
        if decision.over_budget:
            state.metrics.limit_exceeded("predicate_cpu_seconds")
        document = {**decision.to_dict(), "action": verdict.action.value, "why": verdict.why.value}
        document["_state_words"] = state_words(live.session.guard.model.spec, dict(decision.abstract_state))
        now = time.time()
        document["_review"] = {**review_facts(live.session.guard.model, decision, live.session.last),
                               "deadline": None if body.timeout is None else now + body.timeout,
                               # what the run is, in words a person reads: "production" said, not only predicated
                               "request": body.request,
                               "metadata": None if live.session.metadata is None else dict(live.session.metadata)}
        if body.edit_of is not None:
            document["_edit_of"] = _edited_one(state, body.edit_of, session_id, principal)
        status = STATUS_OF[verdict.action] if body.ask is None else "pending" if body.ask else "allowed"
        row = ProposalRow("p_" + secrets.token_urlsafe(15), session_id, now, principal.name, body.tool,
               orjson.dumps(body.arguments).decode(),
               None if body.tools is None else orjson.dumps(body.tools).decode(),
               orjson.dumps(document).decode(), status)
        shown = {**row._asdict(), "resolved_at": None, "resolved_by": None, "reason": None,
                 "edited": None, "step": None}
        answer = orjson.dumps(proposal_out(shown, state.storage.session_risk(session_id)))
        await write(state, Storage.remember(None if entry is None else entry(201, answer),
                                            Storage.insert_proposal(row)))
        if status == "pending":
            state.hub.created(live.tenant)
        # what the agent is told to do: a pending proposal waits for a human, whatever the guard's action was
        acted = {"pending": "ask_human", "allowed": "allow"}.get(status, verdict.action.value)
        state.metrics.decision(acted, "propose")
        trace_decision(decision, session_id, body.tool, "proposed", request.scope["headers"], acted)
        return 201, answer

    code, payload = await idem.run(principal, work)
    return Response(payload, status_code=code, media_type=JSON)


@router.get("/v1/proposals")
async def list_proposals(state: AppState, principal: Approver,
                         status: Annotated[str, Query(pattern="^(pending|allowed|held|approved|rejected|edited|"
                                                              "cancelled|executed|all)$",
                                                      description="pending (the default), another status, or all.")]
                         = "pending",
                         session_id: Annotated[str | None, Query(pattern=S.ID_PATTERN, description=(
                             "The session's id."))] = None,
                         tool: Annotated[str | None, Query(min_length=1, max_length=200, description=(
                             "The tool proposed."))] = None,
                         since: Annotated[float | None, Query(ge=0, le=1e11, description=(
                             "Proposed at or after this time (epoch seconds)."))] = None,
                         until: Annotated[float | None, Query(ge=0, le=1e11, description=(
                             "Proposed at or before this time (epoch seconds)."))] = None,
                         offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
                         limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Response:
    """Proposals (pending ones by default) of the tenants the approver sees, oldest first."""
    check_window(since, until)
    rows = state.storage.proposals(status=None if status == "all" else status, session_id=session_id,
                                   limit=min(limit, state.settings.limits.max_page), offset=offset,
                                   tenants=principal.tenants, tool=tool, since=since, until=until)
    out = {"proposals": [proposal_out(r) for r in rows], "offset": offset, "limit": limit}
    return Response(orjson.dumps(out), media_type=JSON)


@router.get("/v1/proposals/{proposal_id}", responses=errors_for((404, "Unknown proposal")))
async def get_proposal(proposal_id: ProposalId, state: AppState, principal: Anyone,
                       wait: Annotated[float, Query(ge=0, le=3600)] = 0.0) -> Response:
    """One proposal with its session's risk so far; with ``wait``, long-polls while it is pending."""
    row = _visible(state, proposal_id, principal)
    if row["status"] == "pending" and wait > 0 and await state.hub.wait(
            proposal_id, min(wait, state.settings.limits.max_wait_seconds)):
        row = _visible(state, proposal_id, principal)
    return Response(orjson.dumps(proposal_out(row, state.storage.session_risk(row["session_id"]))),
                    media_type=JSON)


@router.post("/v1/proposals/{proposal_id}",
             responses=errors_for((404, "Unknown proposal"), (409, "Not pending, or its session is closed")))
async def resolve_proposal(proposal_id: ProposalId, body: S.ProposalResolve, state: AppState, principal: Approver,
                           idem: Idempotency) -> Response:
    """Approve, reject or edit a pending proposal, with a reason (``Idempotency-Key`` honoured)."""

    async def work(entry: Entry | None) -> tuple[int, bytes]:
        row = _visible(state, proposal_id, principal)
        if row["session_closed_at"] is not None:
            raise ApiError(409, "session_closed", f"the session of proposal {proposal_id!r} is closed",
                           field="path.proposal_id")
        _still_pending(row)
        review = orjson.loads(row["decision"]).get("_review") or {}
        if review.get("irreversible") and state.settings.require_reason_irreversible \
                and not (body.reason or "").strip():
            raise ApiError(422, "reason_required", "this call cannot be undone (it makes an irreversible condition "
                           "hold): give a reason with the decision", field="body.reason")
        edited = None
        if body.decision == "edit":
            edited = await _edit(state, row, body, principal)
        elif body.tool is not None or body.arguments is not None or body.state is not None:
            raise ApiError(422, "invalid_request", "tool, arguments and state go with decision 'edit' only",
                           field="body.decision")
        status = {"approve": "approved", "reject": "rejected", "edit": "edited"}[body.decision]
        return await _settle(state, entry, row, status, principal, body.reason,
                             None if edited is None else orjson.dumps(edited).decode())

    _, payload = await idem.run(principal, work)
    return Response(payload, media_type=JSON)


@router.post("/v1/proposals/{proposal_id}/cancel",
             responses=errors_for((404, "Unknown proposal"), (409, "Not pending")))
async def cancel_proposal(proposal_id: ProposalId, body: S.ProposalCancel, state: AppState, principal: Agent,
                          idem: Idempotency) -> Response:
    """The agent withdraws a pending proposal (it stopped waiting): approvers no longer see it.

    A proposal decided meanwhile stays decided (409 ``already_resolved``): the agent reads it and
    honours the approver's answer rather than its own time-out.
    """

    async def work(entry: Entry | None) -> tuple[int, bytes]:
        row = _visible(state, proposal_id, principal)
        _still_pending(row)
        return await _settle(state, entry, row, "cancelled", principal, body.reason, None)

    _, payload = await idem.run(principal, work)
    return Response(payload, media_type=JSON)


def _still_pending(row: Any) -> None:
    if row["status"] != "pending":
        raise ApiError(409, "already_resolved", f"proposal {row['id']!r} is {row['status']}, not pending",
                       field="path.proposal_id")


async def _settle(state: ServerState, entry: Entry | None, row: Any, status: str, principal: Principal,
                  reason: str | None, edited: str | None) -> tuple[int, bytes]:
    """Resolve a pending proposal (one writer wins a race: the loser gets 409) and wake its waiters."""
    at = time.time()
    answer = orjson.dumps(proposal_out({**dict(row), "status": status, "resolved_at": at,
                                        "resolved_by": principal.name, "reason": reason, "edited": edited}))
    job = Storage.remember(None if entry is None else entry(200, answer),
                           Storage.resolve_proposal(row["id"], status, at, principal.name, reason, edited))
    if not await write(state, job):  # another caller won the compare-and-set: say what they answered
        winner = state.storage.proposal(row["id"])
        won = "gone" if winner is None else f"{winner['status']} (by {winner['resolved_by']})"
        raise ApiError(409, "already_resolved", f"proposal {row['id']!r} is already {won}",
                       field="path.proposal_id")
    state.hub.resolved([row["id"]], row["tenant"])
    state.metrics.approvals_resolved.labels(status).inc()
    return 200, answer


async def _edit(state: ServerState, row: Any, body: S.ProposalResolve, principal: Principal) -> dict[str, Any]:
    """The edited call: the agent's own tool or another it declared; its state, when given, re-checked."""
    tool = body.tool or row["tool"]
    tools = orjson.loads(row["tools"]) if row["tools"] else None
    if tool != row["tool"] and (tools is None or tool not in tools):
        have = ", ".join(tools) if tools else "none declared"
        raise ApiError(422, "unknown_tool", f"the agent has no tool {tool!r} (its tools: {have})",
                       field="body.tool")
    edited: dict[str, Any] = {"tool": tool, "arguments": body.arguments if body.arguments is not None
                              else orjson.loads(row["arguments"])}
    if body.state is not None:  # the edit re-checked: the guard's decision on where it leads
        live = live_session(state, row["session_id"], principal)
        check_values(state, body.state, edited["arguments"], "body", "arguments")
        try:
            edited["decision"] = live.session.preview(body.state, action={"tool": tool, "args": edited["arguments"]}).to_dict()
        except Exception as exc:
            raise ApiError(422, "predicate_error", f"the state cannot be evaluated: {short(str(exc))}",
                           field="body.state") from exc
    elif body.arguments is not None:
        check_values(state, {}, body.arguments, "body", "arguments")
    return edited
