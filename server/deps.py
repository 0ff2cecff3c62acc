"""What the routes depend on, defined once: the served state, the caller and its role, idempotency,
the path parameters, and the look-ups that keep one tenant's sessions out of another's sight.

A route says what it needs in its signature — ``state: AppState``, ``principal: Agent``,
``idem: Idempotency``, ``session_id: SessionId`` — and FastAPI resolves it, per request, in that
order: a server starting or stopping answers 503 before a key is looked at, a key without the role
answers 401 or 403 before the route runs. The roles are those of :mod:`server.auth`; none of these
adds a parameter, header or schema of its own to the OpenAPI document beyond the bearer scheme.

The state lives in :class:`Served`, one per app, on ``app.state.forewarn``: set by the app's
lifespan (or given to ``create_app``), and gone once the server stops. The step fast path
(:class:`server._middleware.FastSteps`) reads it through the same :meth:`Served.ready`.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, cast

from fastapi import Depends, Request, Security
from fastapi import Path as PathParam
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.applications import Starlette

from ..errors import ForewarnError
from . import schemas as S
from ._http import ApiError, authorize
from .auth import ADMIN, AGENT, ANY, APPROVER, Principal
from .idempotency import Entry, IdempotencyKeys, request_hash
from .models_registry import UnknownModel
from .sessions import LiveSession, SessionNotFound
from .settings import MODEL_NAME_PATTERN
from .state import ServerState


class Served:
    """The state one app serves: ``None`` until its lifespan started it (or ``create_app`` was given
    one), and again once the lifespan closed it."""

    __slots__ = ("state",)

    def __init__(self, state: ServerState | None = None) -> None:
        self.state = state

    def ready(self) -> ServerState:
        """The state, if the server takes requests now; else a 503."""
        current = self.state
        if current is None or current.stopping:
            raise ApiError(503, "not_ready", "the server is starting or stopping")
        return current


def served(app: Starlette) -> Served:
    """The :class:`Served` of an app built by ``create_app``."""
    return cast(Served, app.state.forewarn)


# Every dependency is async, though none awaits: FastAPI runs a plain def in a worker thread, and
# that hop (and winning the GIL back from a busy loop) would cost more than the work itself.

async def _state(request: Request) -> ServerState:
    return served(request.app).ready()


AppState = Annotated[ServerState, Depends(_state)]
"""The running server's state (503 while it starts or stops)."""

_bearer = HTTPBearer(auto_error=False, description="An API key with the role the endpoint needs.")


def _caller(roles: frozenset[Any]) -> Callable[..., Awaitable[Principal]]:
    async def caller(state: AppState,
                     credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)]) -> Principal:
        header = None if credentials is None else f"{credentials.scheme} {credentials.credentials}"
        return authorize(state.auth, header, roles)
    return caller


Agent = Annotated[Principal, Depends(_caller(AGENT))]
"""A caller with an agent (or admin) key."""
Approver = Annotated[Principal, Depends(_caller(APPROVER))]
"""A caller with an approver (or admin) key."""
Admin = Annotated[Principal, Depends(_caller(ADMIN))]
"""A caller with an admin key."""
Anyone = Annotated[Principal, Depends(_caller(ANY))]
"""A caller with any valid key."""
any_key = Depends(_caller(ANY))
"""The :data:`Anyone` check as a route or router dependency."""
admin_key = Depends(_caller(ADMIN))
"""The :data:`Admin` check as a router dependency (``/metrics``, unless public: its totals and timings
are every tenant's, so a tenant's key does not read them)."""


@dataclass(frozen=True, slots=True)
class Idempotent:
    """A write's ``Idempotency-Key`` (:mod:`server.idempotency`): :meth:`run` answers a retry with the
    first attempt's very bytes, and commits nothing twice."""

    keys: IdempotencyKeys
    key: str | None
    fingerprint: str

    async def run(self, principal: Principal,
                  work: Callable[[Entry | None], Awaitable[tuple[int, bytes]]]) -> tuple[int, bytes]:
        """``work(entry)`` once per (caller, key); ``work`` commits ``entry(status, body)`` with its write."""
        return await self.keys.run(principal.identity, self.key, self.fingerprint, work)


async def _idempotent(request: Request, state: AppState) -> Idempotent:
    # the fingerprint takes the route's path with its parameters filled in, as it always has
    # (a retry after an upgrade must still match what the first attempt stored)
    route = request.scope["route"]
    path = route.path_format.format(**request.path_params)
    return Idempotent(state.idempotency, request.headers.get("idempotency-key"),
                      request_hash(request.method, path, await request.body()))


Idempotency = Annotated[Idempotent, Depends(_idempotent)]
"""The request's ``Idempotency-Key`` handling (the header is read, not declared: it is documented in prose)."""

SessionId = Annotated[str, PathParam(pattern=S.ID_PATTERN, description="A session id.")]
ApprovalId = Annotated[str, PathParam(pattern=S.ID_PATTERN, description="An approval id.")]
ModelName = Annotated[str, PathParam(pattern=MODEL_NAME_PATTERN, description="A model name.")]


def live_session(state: ServerState, session_id: str, principal: Principal,
                 field: str = "path.session_id") -> LiveSession:
    """The live session, if the caller's tenant may see it: another tenant's answers 404, as if it did
    not exist; one whose model version is gone from the database answers 503."""
    try:
        live = state.sessions.get(session_id)
    except SessionNotFound:
        raise ApiError(404, "not_found", f"no session {session_id!r}", field=field) from None
    except (UnknownModel, ForewarnError) as exc:  # its model version is gone from the database
        raise ApiError(503, "session_unavailable", f"session {session_id!r} cannot be resumed: {exc}") from exc
    if not principal.sees(live.tenant):
        raise ApiError(404, "not_found", f"no session {session_id!r}", field=field)
    return live


def step_context(state: ServerState, session_id: str, principal: Principal,
                 field: str = "path.session_id") -> LiveSession:
    """:func:`live_session`, and open: a step on a closed session answers 409."""
    live = live_session(state, session_id, principal, field)
    if live.closed:
        raise ApiError(409, "session_closed", f"session {session_id!r} is closed", field=field)
    return live
