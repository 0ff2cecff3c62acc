"""The FastAPI application, assembled: ``create_app(settings)``.

It only puts the parts together, in this order: the settings, the state it serves, the routers
(one module per resource in :mod:`server.routers`), the error handlers (:mod:`server.handlers`),
the middleware in front of the router, and the lifespan that starts and closes the state. What a
route may depend on — the state, the caller's role, idempotency — is in :mod:`server.deps`.

:func:`server.state.start` opens the database and loads the models (blocking) and may be called
first, so that a command line can report a bad model or a locked database before it binds a port.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial

import anyio
from fastapi import FastAPI

from ..guard._version import __version__
from . import handlers
from ._http import ApiError, Route
from ._middleware import AuthFirst, BodyLimit, FastSteps
from .deps import Served, admin_key
from .expiry import sweep
from .replicas import Replication
from .routers import approvals, console, docs, health, models, proposals, sessions, steps
from .settings import ServerSettings
from .state import ServerState, start

__all__ = ["ApiError", "ServerState", "start"]  # names other modules import through this one

_DESCRIPTION = ("The Forewarn runtime guard over HTTP. Every endpoint but /healthz, /readyz and the "
                "documentation needs `Authorization: Bearer KEY`; see docs/server.md for roles.")


def create_app(settings: ServerSettings, *, state: ServerState | None = None) -> FastAPI:
    """The sidecar app. With ``state`` (from :func:`start`) it serves that; otherwise it starts
    its own on start-up (in a worker thread) and closes it on shutdown either way."""
    served = Served(state)
    # FastAPI's own OpenTelemetry hooks look up their providers on every request; the sidecar
    # has Prometheus metrics, so they stay off unless the settings ask for them.
    otel = settings.opentelemetry
    app = FastAPI(title="Forewarn sidecar", version=__version__, description=_DESCRIPTION,
                  lifespan=_lifespan(settings, served), docs_url=None, redoc_url=None,
                  telemetry={"tracing": otel, "metrics": otel, "logs": otel})
    app.state.forewarn = served
    app.router.route_class = Route  # for routes added to the app itself

    app.include_router(health.router)  # /healthz, /readyz
    app.include_router(health.metrics_router, dependencies=[] if settings.metrics_public else [admin_key])
    app.include_router(steps.router)  # observe, preview, batch: first, the router tries routes in order
    app.include_router(sessions.router)
    app.include_router(approvals.router)
    app.include_router(proposals.router)
    app.include_router(console.router)  # /console and /v1/changes
    app.include_router(docs.router)  # /docs, offline
    app.include_router(models.router)

    handlers.install(app, served)

    # observe and preview are answered by FastSteps before the router; AuthFirst, added last, runs first
    fast = {"observe": steps.observe_core, "preview": steps.preview_core, "state": served.ready,
            "api_error": partial(handlers.api_error_response, served)}
    app.add_middleware(FastSteps, handlers=lambda: fast)
    app.add_middleware(BodyLimit, limit=settings.limits.max_body_bytes, timeout=settings.limits.body_timeout)
    app.add_middleware(AuthFirst, handlers=lambda: fast, rate=settings.limits.rate_per_key,
                       burst=settings.limits.rate_burst, protect_metrics=not settings.metrics_public)
    return app


def _lifespan(settings: ServerSettings, served: Served) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start the state unless given one (off the event loop), hear the other replicas, close it at the end."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if served.state is None:
            served.state = await anyio.to_thread.run_sync(start, settings)
        Replication(served.state).attach(asyncio.get_running_loop())  # other replicas' commits
        idle = settings.session_idle_seconds
        expiring = None if idle is None else asyncio.create_task(sweep(served.state, idle))
        try:
            yield
        finally:
            if expiring is not None:
                expiring.cancel()
            current, served.state = served.state, None
            if current is not None:
                current.stopping = True
                await anyio.to_thread.run_sync(current.close)

    return lifespan
