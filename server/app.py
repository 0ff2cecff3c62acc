"""The FastAPI application: the routes.

``create_app(settings)`` builds the app; :func:`server.state.start` opens the database
and loads the models (blocking) and may be called first, so that a command line can
report a bad model or a locked database before it binds a port. The wire-level pieces
(errors, parsing, limits, the step fast path) are in ``_http``, the step path after
parsing in ``_steps``, and the JSON views of stored rows in ``_views``.

The step path (``observe``) evaluates the predicates, looks the decision up, hands
one row to the writer and awaits its commit, then answers: a decision that went out
is in the database. Responses are serialised once with orjson and the very bytes
sent are the bytes stored.
"""
from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
import orjson
from fastapi import Depends, FastAPI, Query, Request, Security
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from forewarn.guard._version import __version__
from forewarn.guard.errors import ForewarnError, PredicateError
from forewarn.server import schemas as S
from forewarn.server._http import (
    ERRORS, JSON, ApiError, AuthFirst, BodyLimit, FastSteps, Route, authorize, bad_request, check_id, error_response, errors_for,
    field_of, log, parse_json, step_openapi, too_deep, validation_detail,
)
from forewarn.server._steps import chain_step, decision_json, write, write_steps
from forewarn.server._views import approval_out, policy_overrides, session_summary, step_out
from forewarn.server.auth import ADMIN, AGENT, ANY, APPROVER, Principal
from forewarn.server.metrics import CONTENT_TYPE_LATEST
from forewarn.server.idempotency import Entry, request_hash
from forewarn.server.replicas import Replication
from forewarn.server.models_registry import UnknownModel, parse_model, read_model
from forewarn.server.sessions import LiveSession, SessionNotFound, effective_policy, make_session
from forewarn.server.settings import MODEL_NAME_PATTERN, ServerSettings
from forewarn.server.state import ServerState, start
from forewarn.server.console import install as install_console
from forewarn.server.proposals import RUNNABLE
from forewarn.server.proposals import install as install_proposals
from forewarn.server.storage import Conflict, Storage

__all__ = ["ApiError", "ServerState", "create_app", "start"]

# Path parameters (module level: annotations are strings, resolved in this module's globals).
SessionId = Annotated[str, PathParam(pattern=S.ID_PATTERN, description="A session id.")]
ApprovalId = Annotated[str, PathParam(pattern=S.ID_PATTERN, description="An approval id.")]
ModelName = Annotated[str, PathParam(pattern=MODEL_NAME_PATTERN, description="A model name.")]



def create_app(settings: ServerSettings, *, state: ServerState | None = None) -> FastAPI:
    """The sidecar app. With ``state`` (from :func:`start`) it serves that; otherwise it starts
    its own on start-up (in a worker thread) and closes it on shutdown either way."""
    holder: dict[str, ServerState] = {}
    if state is not None:
        holder["state"] = state

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if "state" not in holder:
            holder["state"] = await anyio.to_thread.run_sync(start, settings)
        Replication(holder["state"]).attach(asyncio.get_running_loop())  # other replicas' commits
        try:
            yield
        finally:
            current = holder.pop("state")
            current.stopping = True
            await anyio.to_thread.run_sync(current.close)

    # FastAPI's own OpenTelemetry hooks look up their providers on every request; the sidecar
    # has Prometheus metrics, so they stay off unless the settings ask for them.
    otel = settings.opentelemetry
    app = FastAPI(
        title="Forewarn sidecar", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
        telemetry={"tracing": otel, "metrics": otel, "logs": otel},
        description="The Forewarn runtime guard over HTTP. Every endpoint but /healthz, /readyz and the "
                    "documentation needs `Authorization: Bearer KEY`; see docs/server.md for roles.",
    )
    app.router.route_class = Route
    bearer = HTTPBearer(auto_error=False, description="An API key with the role the endpoint needs.")

    def st() -> ServerState:
        current = holder.get("state")
        if current is None or current.stopping:
            raise ApiError(503, "not_ready", "the server is starting or stopping")
        return current

    def require(roles: frozenset[Any]) -> Callable[..., Any]:
        # async, though it never awaits: FastAPI runs a plain def in a worker thread, and that hop
        # (and winning the GIL back from a busy loop) would cost more than the check itself
        async def dependency(credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> Principal:
            header = None if credentials is None else f"{credentials.scheme} {credentials.credentials}"
            return authorize(st().auth, header, roles)
        return dependency

    as_agent = Depends(require(AGENT))
    as_approver = Depends(require(APPROVER))
    as_admin = Depends(require(ADMIN))
    as_anyone = Depends(require(ANY))

    # -- errors ----------------------------------------------------------------------

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> Response:
        if holder.get("state") is not None:
            holder["state"].metrics.errors.labels(str(exc.status)).inc()
        return error_response(exc.status, exc.code, exc.message, field=exc.field, predicate=exc.predicate,
                               headers=exc.headers, detail=exc.detail)

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, exc: Conflict) -> Response:  # a write raced another replica's and lost
        return error_response(503, "storage_conflict", f"{exc}; retry", headers={"Retry-After": "1"})

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> Response:
        detail = validation_detail(exc.errors())
        first = detail[0] if detail else {"loc": [], "msg": "invalid request"}
        field_name = field_of(first["loc"]) or "body"
        ctx = exc.errors()[0].get("ctx") if exc.errors() else None
        reason = f": {ctx['error']}" if isinstance(ctx, dict) and isinstance(ctx.get("error"), str) else ""
        if holder.get("state") is not None:
            holder["state"].metrics.errors.labels("422").inc()
        return error_response(422, "invalid_request", f"{field_name}: {first['msg']}{reason}", field=field_name,
                               detail=detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> Response:
        codes = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
        return error_response(exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail),
                               field="body" if exc.status_code == 413 else None,
                               headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> Response:  # a bug: say so without details
        log.exception("unexpected error", exc_info=exc)
        return error_response(500, "internal_error", "internal server error (see the server log)")

    # -- health ------------------------------------------------------------------------

    @app.get("/healthz", response_model=S.Health, tags=["health"])
    async def healthz() -> Response:
        """The process is up (no key needed)."""
        return Response(b'{"status":"ok"}', media_type=JSON)

    @app.get("/readyz", response_model=S.Ready, tags=["health"],
             responses={503: {"model": S.Ready, "description": "Not ready"}})
    async def readyz() -> Response:
        """The database is open and the default model loaded (no key needed)."""
        current = holder.get("state")
        checks = {
            "database": current is not None and current.storage.writer_alive,
            "models": current is not None and current.settings.default in current.registry.names(),
            "accepting": current is not None and not current.stopping,
        }
        ok = all(checks.values())
        body = {"status": "ready" if ok else "not ready", "checks": checks}
        return Response(orjson.dumps(body), status_code=200 if ok else 503, media_type=JSON)

    metrics_auth = [] if settings.metrics_public else [as_anyone]

    @app.get("/metrics", tags=["health"], dependencies=metrics_auth,
             responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
                              "description": "Prometheus text format"}, **errors_for()})
    async def metrics() -> Response:
        """Prometheus metrics (any key, unless ``metrics_public``)."""
        return Response(st().metrics.render(), media_type=CONTENT_TYPE_LATEST)

    # -- sessions ----------------------------------------------------------------------

    # Routes go straight on the app's router (an included router costs a second dispatch per request),
    # the step routes first: the router tries routes in order.
    router = app.router
    router.responses = dict(ERRORS)

    def live_session(state: ServerState, session_id: str, principal: Principal,
                     field: str = "path.session_id") -> LiveSession:
        try:
            live = state.sessions.get(session_id)
        except SessionNotFound:
            raise ApiError(404, "not_found", f"no session {session_id!r}", field=field) from None
        except (UnknownModel, ForewarnError) as exc:  # its model version is gone from the database
            raise ApiError(503, "session_unavailable", f"session {session_id!r} cannot be resumed: {exc}") from exc
        if not principal.sees(live.tenant):  # another tenant's session: as if it did not exist
            raise ApiError(404, "not_found", f"no session {session_id!r}", field=field)
        return live

    def step_context(state: ServerState, session_id: str, principal: Principal,
                     field: str = "path.session_id") -> LiveSession:
        live = live_session(state, session_id, principal, field)
        if live.closed:
            raise ApiError(409, "session_closed", f"session {session_id!r} is closed", field=field)
        return live

    def check_state(state: ServerState, body: S.StepIn, prefix: str) -> None:
        limit = state.settings.limits.max_state_depth
        where = too_deep(body.state, limit)
        if where is not None:
            raise bad_request(f"state is nested deeper than {limit} levels", f"{prefix}.state{where}")
        if isinstance(body.action, dict) and (where := too_deep(body.action, limit)) is not None:
            raise bad_request(f"action is nested deeper than {limit} levels", f"{prefix}.action{where}")

    def evaluate(live: LiveSession, body: S.StepIn, prefix: str) -> int:
        """The abstract state of the body's state, or a 422 naming the predicate that failed."""
        try:
            return live.session.guard.predicates.evaluate(body.state, live.session.metadata)
        except PredicateError as exc:
            field = "session.metadata" if exc.where == "meta" else f"{prefix}.state"
            raise ApiError(422, "predicate_error", str(exc), field=field, predicate=exc.predicate) from exc
        except Exception as exc:  # a state the predicates cannot digest is the request's fault, not a 500
            raise ApiError(422, "predicate_error", f"the state cannot be evaluated: {exc}",
                           field=f"{prefix}.state") from exc

    step_errors = errors_for((404, "Unknown session"), (409, "The session is closed"))

    def runnable_proposal(state: ServerState, session_id: str, body: S.StepIn) -> S.StepIn:
        """The step of a proposal that ran: it must be this session's, and allowed, approved or edited;
        a human already decided on it, so it queues no approval."""
        row = state.storage.proposal(body.proposal)
        if row is None or row["session_id"] != session_id:
            raise ApiError(404, "not_found", f"no proposal {body.proposal!r} in session {session_id!r}",
                           field="body.proposal")
        if row["status"] not in RUNNABLE:
            raise ApiError(409, "proposal_not_runnable", f"proposal {body.proposal!r} is {row['status']}: "
                           f"only an allowed, approved or edited proposal may run", field="body.proposal")
        return body.model_copy(update={"ask": False})

    async def observe_core(state: ServerState, session_id: str, authorization: str | None, raw: bytes,
                           idempotency_key: str | None = None) -> bytes:
        """The observe step, from raw parts to the answer's bytes (shared by the route and the fast path)."""
        started = time.perf_counter()
        principal = authorize(state.auth, authorization, AGENT)
        step_context(state, check_id(session_id, "session_id"), principal)
        body = parse_json(raw, S.StepIn)
        check_state(state, body, "body")

        async def work(entry: Entry | None) -> tuple[int, bytes]:
            live = step_context(state, session_id, principal)  # again: a retry may have waited
            step_body = body if body.proposal is None else runnable_proposal(state, session_id, body)
            try:  # observe evaluates the predicates itself; evaluate() only to report a failure well
                payload, row, approval, prev = chain_step(state, live, step_body, principal)
            except ApiError:
                raise
            except Exception:
                evaluate(live, body, "body")
                raise
            await write_steps(state, [live], [row], [approval] if approval else [],
                              None if entry is None else entry(200, payload), [prev] if prev else None,
                              None if body.proposal is None else Storage.execute_proposal(body.proposal, row[1]))
            if approval:
                state.hub.created()
            state.metrics.decision(row[11], "observe")
            return 200, payload

        _, payload = await state.idempotency.run(principal.name, idempotency_key, request_hash(
            "POST", f"/v1/sessions/{session_id}/observe", raw), work)
        state.metrics.observe_seconds.observe(time.perf_counter() - started)
        return payload

    async def preview_core(state: ServerState, session_id: str, authorization: str | None, raw: bytes,
                           idempotency_key: str | None = None) -> bytes:
        started = time.perf_counter()
        principal = authorize(state.auth, authorization, AGENT)
        live = step_context(state, check_id(session_id, "session_id"), principal)
        body = parse_json(raw, S.StepIn)
        check_state(state, body, "body")
        try:
            decision = live.session.preview(body.state)
        except Exception:
            evaluate(live, body, "body")
            raise
        payload = decision_json(decision, live, step=None, approval_id=None, at=time.time(), committed=False)
        state.metrics.decision(decision.action.value, "preview")
        state.metrics.preview_seconds.observe(time.perf_counter() - started)
        return payload

    # Both step routes parse their own request (same rules and errors as FastAPI's, documented by
    # openapi_extra), and in a server they are normally answered by FastSteps before routing even
    # starts: FastAPI's routing and dependency solving would cost more than the step itself.

    @router.post("/v1/sessions/{session_id}/observe", response_model=S.DecisionOut, tags=["steps"],
                 responses=step_errors, openapi_extra=step_openapi())
    async def observe(request: Request) -> Response:
        """Commit the agent's new state and answer the guard's decision. The answer is sent only after
        the step is committed to the database."""
        payload = await observe_core(st(), request.path_params["session_id"], request.headers.get("authorization"),
                                     await request.body(), request.headers.get("idempotency-key"))
        return Response(payload, media_type=JSON)

    @router.post("/v1/sessions/{session_id}/preview", response_model=S.DecisionOut, tags=["steps"],
                 responses=step_errors, openapi_extra=step_openapi())
    async def preview(request: Request) -> Response:
        """What the guard would decide in this state; nothing is committed."""
        payload = await preview_core(st(), request.path_params["session_id"], request.headers.get("authorization"),
                                     await request.body())
        return Response(payload, media_type=JSON)

    @router.post("/v1/sessions", response_model=S.SessionCreated, status_code=201, tags=["sessions"],
                 responses=errors_for((404, "Unknown model")))
    async def create_session(body: S.SessionCreate, principal: Principal = as_agent) -> Response:
        """Start a session on a model (the default one unless named), with optional policy overrides."""
        state = st()
        name = body.model or state.settings.default
        try:
            loaded = state.registry.current(name)
        except UnknownModel as exc:
            raise ApiError(404, "unknown_model", str(exc), field="body.model") from None
        overrides = policy_overrides(body.policy)
        if body.metadata is not None and (where := too_deep(body.metadata, state.settings.limits.max_state_depth)):
            raise bad_request(f"metadata is nested deeper than {state.settings.limits.max_state_depth} levels",
                               f"body.metadata{where}")
        try:
            session = make_session(loaded, overrides, body.metadata)
        except (ValueError, TypeError) as exc:
            raise bad_request(f"policy: {exc}", "body.policy") from exc
        session_id = "s_" + secrets.token_urlsafe(15)
        now = time.time()
        row = (session_id, name, loaded.version, orjson.dumps(overrides).decode() if overrides else None,
               orjson.dumps(body.metadata).decode() if body.metadata is not None else None, now, principal.name,
               principal.tenant)
        await write(state, Storage.insert_session(row))
        state.sessions.add(LiveSession(session_id, name, loaded, overrides, session, closed=False, next_step=0,
                                       tenant=principal.tenant))
        out = {"id": session_id, "model": {"name": name, "version": loaded.version},
               "policy": effective_policy(session.guard.policy), "created_at": now}
        return Response(orjson.dumps(out), status_code=201, media_type=JSON)

    @router.get("/v1/sessions", response_model=S.SessionList, tags=["sessions"])
    async def list_sessions(status: Annotated[str | None, Query(pattern="^(open|closed)$")] = None,
                            offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
                            limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                            principal: Principal = as_anyone) -> Response:
        """Sessions the caller may see (its tenant's, an approver's tenants', all for admin), newest first."""
        state = st()
        rows = state.storage.list_sessions(status=status, limit=min(limit, state.settings.limits.max_page),
                                           offset=offset, tenants=principal.tenants)
        out = {"sessions": [session_summary(r) for r in rows], "offset": offset, "limit": limit}
        return Response(orjson.dumps(out), media_type=JSON)

    @router.get("/v1/sessions/{session_id}", response_model=S.SessionOut, tags=["sessions"],
                responses=errors_for((404, "Unknown session")))
    async def get_session(session_id: SessionId, offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
                          limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                          principal: Principal = as_anyone) -> Response:
        """A session with its committed steps and their decisions (paged: ``offset``, ``limit``)."""
        state = st()
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

    @router.post("/v1/sessions/{session_id}/close", response_model=S.SessionSummary, tags=["sessions"],
                 responses=errors_for((404, "Unknown session")))
    async def close_session(session_id: SessionId, principal: Principal = as_agent) -> Response:
        """Close a session: no more steps; its pending approvals are cancelled. Closing twice is harmless."""
        state = st()
        live = live_session(state, session_id, principal)
        if not live.closed:
            state.sessions.closed(live)  # before the write: no step may slip in while it commits
            try:
                at = time.time()
                cancelled = await write(state, Storage.close_session(session_id, at, principal.name))
                cancelled += await write(state, Storage.cancel_proposals(session_id, at, principal.name))
            except ApiError:
                state.sessions.reopened(live)  # the database says it is open: so it is
                raise
            state.hub.resolved(cancelled)
        row = state.storage.session_row(session_id)
        if row is None:  # sessions are never deleted; this would be a bug
            raise ApiError(503, "session_unavailable", f"session {session_id!r} vanished")
        return Response(orjson.dumps(session_summary(row, steps_total=live.next_step)), media_type=JSON)

    @router.post("/v1/batch", response_model=S.BatchOut, tags=["steps"], responses=step_errors)
    async def batch(body: S.BatchIn, request: Request, principal: Principal = as_agent) -> Response:
        """Many steps, of one or several sessions, in order. All are checked before any is committed:
        on an error nothing is, and the error names the step (``body.steps[i]``)."""
        started = time.perf_counter()
        state = st()
        limit = state.settings.limits.max_batch
        if len(body.steps) > limit:
            raise bad_request(f"at most {limit} steps per batch, got {len(body.steps)}", "body.steps")
        _, payload = await state.idempotency.run(
            principal.name, request.headers.get("idempotency-key"),
            request_hash("POST", "/v1/batch", await request.body()),
            lambda entry: batch_work(state, body, principal, entry))
        state.metrics.batch_seconds.observe(time.perf_counter() - started)
        return Response(payload, media_type=JSON)

    async def batch_work(state: ServerState, body: S.BatchIn, principal: Principal,
                         entry: Entry | None) -> tuple[int, bytes]:
        lives: list[LiveSession] = []
        for i, item in enumerate(body.steps):  # check everything first: all or nothing
            live = step_context(state, item.session, principal, f"body.steps[{i}].session")
            check_state(state, item, f"body.steps[{i}]")
            evaluate(live, item, f"body.steps[{i}]")
            lives.append(live)
        payloads: list[bytes] = []
        rows: list[tuple[Any, ...]] = []
        approvals: list[tuple[Any, ...]] = []
        committed: list[LiveSession] = []
        chains: list[tuple[str, int, int, str | None]] = []
        chained: set[str] = set()
        for live, item in zip(lives, body.steps):
            if item.op == "preview":
                decision = live.session.preview(item.state)
                payloads.append(decision_json(decision, live, step=None, approval_id=None, at=time.time(),
                                               committed=False))
                state.metrics.decision(decision.action.value, "preview")
                continue
            payload, row, approval, prev = chain_step(state, live, item, principal)
            if prev is not None and prev[0] not in chained:  # within a batch, the previous row is in it
                chains.append(prev)
            chained.add(live.id)
            payloads.append(payload)
            rows.append(row)
            committed.append(live)
            if approval:
                approvals.append(approval)
        answer = b'{"results":[' + b",".join(payloads) + b"]}"
        if rows:
            await write_steps(state, committed, rows, approvals, None if entry is None else entry(200, answer),
                              chains)
            state.hub.created(len(approvals))
            for row in rows:
                state.metrics.decision(row[11], "observe")
        return 200, answer

    # -- approvals ---------------------------------------------------------------------

    @router.get("/v1/approvals", response_model=S.ApprovalList, tags=["approvals"])
    async def list_approvals(status: Annotated[str, Query(pattern="^(pending|approved|rejected|cancelled|all)$")]
                             = "pending",
                             session_id: Annotated[str | None, Query(pattern=S.ID_PATTERN)] = None,
                             offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
                             limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                             principal: Principal = as_approver) -> Response:
        """Approvals of the tenants the caller may see, oldest first; by default the pending ones."""
        state = st()
        rows = state.storage.approvals(status=None if status == "all" else status, session_id=session_id,
                                       limit=min(limit, state.settings.limits.max_page), offset=offset,
                                       tenants=principal.tenants)
        out = {"approvals": [approval_out(r) for r in rows], "offset": offset, "limit": limit}
        return Response(orjson.dumps(out), media_type=JSON)

    @router.get("/v1/approvals/{approval_id}", response_model=S.ApprovalOut, tags=["approvals"],
                responses=errors_for((404, "Unknown approval")))
    async def get_approval(approval_id: ApprovalId,
                           wait: Annotated[float, Query(ge=0, le=3600, description=(
                               "Seconds to wait for a pending approval to be resolved (long poll); "
                               "capped by the server's limits.max_wait_seconds."))] = 0,
                           principal: Principal = as_anyone) -> Response:
        """One approval. With ``wait``, answers as soon as it is resolved, or when the wait is over."""
        state = st()
        row = state.storage.approval(approval_id)
        if row is None or not principal.sees(row["tenant"]):
            raise ApiError(404, "not_found", f"no approval {approval_id!r}", field="path.approval_id")
        if row["status"] == "pending" and wait > 0:
            # no await between the read above and registering the wait: a resolution cannot slip between
            if await state.hub.wait(approval_id, min(wait, state.settings.limits.max_wait_seconds)):
                row = state.storage.approval(approval_id)
                assert row is not None
        return Response(orjson.dumps(approval_out(row)), media_type=JSON)

    @router.post("/v1/approvals/{approval_id}", response_model=S.ApprovalOut, tags=["approvals"],
                 responses=errors_for((404, "Unknown approval"), (409, "Already resolved")))
    async def resolve_approval(approval_id: ApprovalId, body: S.ApprovalResolve, request: Request,
                               principal: Principal = as_approver) -> Response:
        """Approve or reject a pending approval, with an optional reason (``Idempotency-Key`` honoured)."""
        state = st()
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
                raise ApiError(409, "already_resolved", f"approval {approval_id!r} is already "
                               f"{current['status'] if current else 'gone'}", field="path.approval_id")
            state.hub.resolved([approval_id])
            state.metrics.approvals_resolved.labels(status).inc()
            return 200, answer

        _, payload = await state.idempotency.run(principal.name, request.headers.get("idempotency-key"),
                                                 request_hash("POST", f"/v1/approvals/{approval_id}",
                                                              await request.body()), work)
        return Response(payload, media_type=JSON)

    install_proposals(router, st, step_context, live_session, as_agent, as_approver, as_anyone)
    install_console(app, st, as_approver)  # /console, /v1/changes and an offline /docs

    # -- models ------------------------------------------------------------------------

    @router.get("/v1/models", response_model=S.ModelList, tags=["models"])
    async def list_models(_: Principal = as_anyone) -> Response:
        """The models served: provenance, policy and PAC summary of each."""
        state = st()
        default = state.settings.default
        models = [state.registry.current(n).describe(n, default=n == default) for n in state.registry.names()]
        return Response(orjson.dumps({"models": models, "default": default}), media_type=JSON)

    @router.get("/v1/models/{name}", response_model=S.ModelOut, tags=["models"],
                responses=errors_for((404, "Unknown model")))
    async def get_model(name: ModelName,
                        _: Principal = as_anyone) -> Response:
        """One model, with its full PAC report (every state's visits)."""
        state = st()
        try:
            loaded = state.registry.current(name)
        except UnknownModel as exc:
            raise ApiError(404, "unknown_model", str(exc), field="path.name") from None
        out = loaded.describe(name, default=name == state.settings.default, full_pac=True)
        return Response(orjson.dumps(out), media_type=JSON)

    @router.get("/v1/models/{name}/document", tags=["models"], responses=errors_for((404, "Unknown model")))
    async def get_model_document(name: ModelName, _: Principal = as_anyone) -> Response:
        """The current version's model file, exactly as stored: what a remote middleware previews
        states with (``Client.guard()``), so its look-ahead decides as this server does."""
        state = st()
        try:
            loaded = state.registry.current(name)
        except UnknownModel as exc:
            raise ApiError(404, "unknown_model", str(exc), field="path.name") from None
        row = state.storage.model_version(loaded.version)
        if row is None:
            raise ApiError(404, "unknown_model", f"model version {loaded.version!r} is not in the database",
                           field="path.name")
        return Response(bytes(row["document"]), media_type=JSON,
                        headers={"X-Forewarn-Model-Version": loaded.version})

    @router.post("/v1/models", response_model=S.ModelLoaded, tags=["models"],
                 responses=errors_for((409, "The open sessions cannot move to this model")))
    async def load_model(body: S.ModelLoad, principal: Principal = as_admin) -> Response:
        """Load a model file under a name, or atomically replace the model of that name. New sessions
        get it; open sessions keep theirs unless ``migrate_sessions`` is set."""
        state = st()
        rules = state.registry.rules
        source = body.path if body.path is not None else f"upload by {principal.name}"
        field_name = "body.path" if body.path is not None else "body.document"
        try:
            if body.path is not None:
                real = rules.confine(body.path)
                raw, version, model, guard = await anyio.to_thread.run_sync(read_model, real, rules)
            else:
                raw = orjson.dumps(body.document)
                raw, version, model, guard = await anyio.to_thread.run_sync(parse_model, raw, source, rules)
        except ForewarnError as exc:
            raise ApiError(422, "invalid_model", str(exc), field=field_name) from exc
        names = state.registry.names()
        previous = state.registry.current(body.name).version if body.name in names else None
        to_move: list[str] = []
        if body.migrate_sessions:
            to_move = state.storage.open_sessions(body.name)
            wanted = model.spec.predicate_names
            for live in (state.sessions.get(i) for i in to_move):
                if live.loaded.model.spec.predicate_names != wanted:
                    raise ApiError(409, "incompatible_model",
                                   f"session {live.id!r} uses predicates {live.loaded.model.spec.predicate_names}, "
                                   f"the new model {wanted}: it cannot be migrated", field="body.migrate_sessions")
        await write(state, Storage.put_model(body.name, version, source, raw, principal.name, current=True))
        loaded = state.registry.install(body.name, version, source, model, guard, principal.name)
        if to_move:
            await write(state, Storage.migrate_sessions(body.name, version, to_move))
            for live in (state.sessions.get(i) for i in to_move):
                if live.loaded.version != version and not live.closed:
                    state.sessions.switch_model(live, loaded)
        state.metrics.model_loads.labels(body.name).inc()
        out = {**loaded.describe(body.name, default=body.name == state.settings.default), "replaced": previous,
               "migrated_sessions": len(to_move)}
        return Response(orjson.dumps(out), media_type=JSON)

    def api_error_response(exc: ApiError) -> Response:
        current = holder.get("state")
        if current is not None:
            current.metrics.errors.labels(str(exc.status)).inc()
        return error_response(exc.status, exc.code, exc.message, field=exc.field, predicate=exc.predicate,
                               headers=exc.headers, detail=exc.detail)

    fast = {"observe": observe_core, "preview": preview_core, "state": st, "api_error": api_error_response}
    app.add_middleware(FastSteps, handlers=lambda: fast)
    app.add_middleware(BodyLimit, limit=settings.limits.max_body_bytes, timeout=settings.limits.body_timeout)
    app.add_middleware(AuthFirst, handlers=lambda: fast, rate=settings.limits.rate_per_key,  # added last: runs first
                       burst=settings.limits.rate_burst, protect_metrics=not settings.metrics_public)
    return app
