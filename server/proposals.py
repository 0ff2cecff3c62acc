"""Proposals: approval *before* a call runs (issue 13).

``POST /v1/sessions/{id}/proposals`` — "the agent wants to run this tool with these
arguments, leading to this state" — answers the guard's decision on that state without
committing anything. ``allow`` → status ``allowed``; ``reflect``/``stop`` → ``held`` (the
agent must not run it); ``ask_human`` → ``pending``: one approval a human resolves with
``POST /v1/proposals/{id}`` (approve, reject, or edit to other arguments — or another of
the agent's declared tools — whose state, when given, is re-checked and recorded). The
agent waits with ``GET /v1/proposals/{id}?wait=S``; on an edit an agent that extracts
states (the LangChain middleware) re-proposes the edited call with the state it leads to
(``edit_of``: a new proposal linked to the edited one), so an edit made where no state is
known (the console) is re-checked too; ``ask`` carries the agent's own verdict. When the call (as approved or edited)
has run, the agent observes its state with ``"proposal": id``: that commits the step,
links it, and queues no second approval. A rejected, pending or already executed proposal
cannot be observed; closing the session cancels its pending proposals.
"""
from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Annotated, Any

import orjson
from fastapi import Path as PathParam
from fastapi import Query, Request
from starlette.responses import Response

from forewarn.guard.spec import Action
from forewarn.server import schemas as S
from forewarn.server._http import JSON, ApiError, errors_for
from forewarn.server._steps import write
from forewarn.server.idempotency import Entry, request_hash
from forewarn.server.storage import Storage

__all__ = ["install", "proposal_out", "RUNNABLE"]

ProposalId = Annotated[str, PathParam(pattern=S.ID_PATTERN, description="A proposal id.")]
RUNNABLE = ("allowed", "approved", "edited")  # what an observe may name
_STATUS = {Action.ALLOW: "allowed", Action.ASK_HUMAN: "pending", Action.REFLECT: "held", Action.STOP: "held"}


def state_words(spec: Any, abstract_state: dict[str, bool]) -> str:
    holding = []
    for name, value in abstract_state.items():
        if value:
            text = spec.predicates[name].description if name in spec.predicates else None
            holding.append(f"{name} ({text})" if text else name)
    return "; ".join(holding) if holding else "none of the watched conditions holds"


def proposal_out(row: Any, risk: list[tuple[int, float, float | None]] | None = None) -> dict[str, Any]:
    decision = orjson.loads(row["decision"])
    out = {"id": row["id"], "session_id": row["session_id"], "status": row["status"], "tool": row["tool"],
           "arguments": orjson.loads(row["arguments"]),
           "tools": orjson.loads(row["tools"]) if row["tools"] else None,
           "created_at": row["created_at"], "created_by": row["created_by"], "resolved_at": row["resolved_at"],
           "resolved_by": row["resolved_by"], "reason": row["reason"],
           "edited": orjson.loads(row["edited"]) if row["edited"] else None, "step": row["step"],
           "decision": decision, "state_words": decision.pop("_state_words", None),
           "edit_of": decision.pop("_edit_of", None),
           "risk": {"p_unsafe": decision.get("p_unsafe"), "ci_low": decision.get("ci_low"),
                    "ci_high": decision.get("ci_high"), "visits": decision.get("visits")}}
    if risk is not None:
        out["session_risk"] = [{"step": step, "at": at, "p_unsafe": p} for step, at, p in risk]
    return out


def install(router: Any, st: Callable[[], Any], step_context: Callable[..., Any], live_session: Callable[..., Any],
            as_agent: Any, as_approver: Any, as_anyone: Any) -> None:
    """Add the proposal routes to the app's router (helpers are ``create_app``'s)."""

    def visible(state: Any, proposal_id: str, principal: Any) -> Any:
        row = state.storage.proposal(proposal_id)
        if row is None or not principal.sees(row["tenant"]):  # another tenant's: as if it did not exist
            raise ApiError(404, "not_found", f"no proposal {proposal_id!r}", field="path.proposal_id")
        return row

    def edited_one(state: Any, proposal_id: str, session_id: str, principal: Any) -> str:
        row = state.storage.proposal(proposal_id)
        if row is None or not principal.sees(row["tenant"]) or row["session_id"] != session_id:
            raise ApiError(422, "invalid_request", f"edit_of: no proposal {proposal_id!r} in session {session_id!r}",
                           field="body.edit_of")
        if row["status"] != "edited":
            raise ApiError(409, "not_edited", f"edit_of: proposal {proposal_id!r} is {row['status']}, not edited",
                           field="body.edit_of")
        return proposal_id

    @router.post("/v1/sessions/{session_id}/proposals", status_code=201, tags=["proposals"],
                 responses=errors_for((404, "Unknown session"), (409, "The session is closed")))
    async def propose(session_id: Annotated[str, PathParam(pattern=S.ID_PATTERN)], body: S.ProposalIn,
                      request: Request, principal: Any = as_agent) -> Response:
        """Judge a tool call before it runs (nothing is committed); ``ask_human`` opens one pending approval."""
        state = st()
        step_context(state, session_id, principal)

        async def work(entry: Entry | None) -> tuple[int, bytes]:
            live = step_context(state, session_id, principal)
            try:
                decision = live.session.preview(body.state)
            except Exception as exc:
                raise ApiError(422, "predicate_error", f"the state cannot be evaluated: {exc}",
                               field="body.state") from exc
            document = decision.to_dict()
            document["_state_words"] = state_words(live.session.guard.model.spec, dict(decision.abstract_state))
            if body.edit_of is not None:
                document["_edit_of"] = edited_one(state, body.edit_of, session_id, principal)
            status = _STATUS[decision.action] if body.ask is None else "pending" if body.ask else "allowed"
            now = time.time()
            row = ("p_" + secrets.token_urlsafe(15), session_id, now, principal.name, body.tool,
                   orjson.dumps(body.arguments).decode(),
                   None if body.tools is None else orjson.dumps(body.tools).decode(),
                   orjson.dumps(document).decode(), status)
            keys = ("id", "session_id", "created_at", "created_by", "tool", "arguments", "tools", "decision", "status")
            shown = {**dict(zip(keys, row)), "resolved_at": None, "resolved_by": None, "reason": None,
                     "edited": None, "step": None}
            answer = orjson.dumps(proposal_out(shown, state.storage.session_risk(session_id)))
            await write(state, Storage.remember(None if entry is None else entry(201, answer),
                                                Storage.insert_proposal(row)))
            if status == "pending":
                state.hub.created()
            return 201, answer

        code, payload = await state.idempotency.run(principal.name, request.headers.get("idempotency-key"),
                                                    request_hash("POST", f"/v1/sessions/{session_id}/proposals",
                                                                 await request.body()), work)
        return Response(payload, status_code=code, media_type=JSON)

    @router.get("/v1/proposals", tags=["proposals"])
    async def list_proposals(status: Annotated[str, Query(pattern="^(pending|allowed|held|approved|rejected|edited|"
                                                                  "cancelled|executed|all)$")] = "pending",
                             session_id: Annotated[str | None, Query(pattern=S.ID_PATTERN)] = None,
                             offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
                             limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                             principal: Any = as_approver) -> Response:
        """Proposals (pending ones by default) of the tenants the approver sees, oldest first."""
        state = st()
        rows = state.storage.proposals(status=None if status == "all" else status, session_id=session_id,
                                       limit=limit, offset=offset, tenants=principal.tenants)
        return Response(orjson.dumps({"proposals": [proposal_out(r) for r in rows]}), media_type=JSON)

    @router.get("/v1/proposals/{proposal_id}", tags=["proposals"], responses=errors_for((404, "Unknown proposal")))
    async def get_proposal(proposal_id: ProposalId,
                           wait: Annotated[float, Query(ge=0, le=3600)] = 0.0,
                           principal: Any = as_anyone) -> Response:
        """One proposal with its session's risk so far; with ``wait``, long-polls while it is pending."""
        state = st()
        row = visible(state, proposal_id, principal)
        if row["status"] == "pending" and wait > 0:
            if await state.hub.wait(proposal_id, min(wait, state.settings.limits.max_wait_seconds)):
                row = visible(state, proposal_id, principal)
        return Response(orjson.dumps(proposal_out(row, state.storage.session_risk(row["session_id"]))),
                        media_type=JSON)

    @router.post("/v1/proposals/{proposal_id}", tags=["proposals"],
                 responses=errors_for((404, "Unknown proposal"), (409, "Not pending, or its session is closed")))
    async def resolve_proposal(proposal_id: ProposalId, body: S.ProposalResolve, request: Request,
                               principal: Any = as_approver) -> Response:
        """Approve, reject or edit a pending proposal, with a reason (``Idempotency-Key`` honoured)."""
        state = st()

        async def work(entry: Entry | None) -> tuple[int, bytes]:
            row = visible(state, proposal_id, principal)
            if row["session_closed_at"] is not None:
                raise ApiError(409, "session_closed", f"the session of proposal {proposal_id!r} is closed",
                               field="path.proposal_id")
            if row["status"] != "pending":
                raise ApiError(409, "already_resolved", f"proposal {proposal_id!r} is {row['status']}, not pending",
                               field="path.proposal_id")
            edited = None
            if body.decision == "edit":
                edited = await _edit(state, row, body, principal)
            elif body.tool is not None or body.arguments is not None or body.state is not None:
                raise ApiError(422, "invalid_request", "tool, arguments and state go with decision 'edit' only",
                               field="body.decision")
            status = {"approve": "approved", "reject": "rejected", "edit": "edited"}[body.decision]
            at = time.time()
            text = None if edited is None else orjson.dumps(edited).decode()
            answer = orjson.dumps(proposal_out({**dict(row), "status": status, "resolved_at": at,
                                                "resolved_by": principal.name, "reason": body.reason, "edited": text}))
            job = Storage.remember(None if entry is None else entry(200, answer),
                                   Storage.resolve_proposal(proposal_id, status, at, principal.name, body.reason, text))
            if not await write(state, job):
                raise ApiError(409, "already_resolved", f"proposal {proposal_id!r} is no longer pending",
                               field="path.proposal_id")
            state.hub.resolved([proposal_id])
            return 200, answer

        _, payload = await state.idempotency.run(principal.name, request.headers.get("idempotency-key"),
                                                 request_hash("POST", f"/v1/proposals/{proposal_id}",
                                                              await request.body()), work)
        return Response(payload, media_type=JSON)

    async def _edit(state: Any, row: Any, body: S.ProposalResolve, principal: Any) -> dict[str, Any]:
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
            try:
                edited["decision"] = live.session.preview(body.state).to_dict()
            except Exception as exc:
                raise ApiError(422, "predicate_error", f"the state cannot be evaluated: {exc}",
                               field="body.state") from exc
        return edited
