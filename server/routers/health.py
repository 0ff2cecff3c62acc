"""Health and metrics: ``GET /healthz``, ``GET /readyz`` (no key needed) and ``GET /metrics``.

the :data:`router` holds the two probes; :data:`metrics_router` holds ``/metrics``, which ``create_app``
includes behind :data:`server.deps.admin_key` unless the settings make it public (its figures are
every tenant's).
"""
from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from .. import schemas as S
from .._http import JSON, Route, errors_for
from ..deps import AppState, served
from ..metrics import CONTENT_TYPE_LATEST

router = APIRouter(route_class=Route, tags=["health"])
metrics_router = APIRouter(route_class=Route, tags=["health"])


@router.get("/healthz", response_model=S.Health)
async def healthz() -> Response:
    """The process is up (no key needed)."""
    return Response(b'{"status":"ok"}', media_type=JSON)


@router.get("/readyz", response_model=S.Ready, responses={503: {"model": S.Ready, "description": "Not ready"}})
async def readyz(request: Request) -> Response:
    """The database is open and the default model loaded (no key needed)."""
    current = served(request.app).state
    checks = {
        "database": current is not None and current.storage.writer_alive,
        "models": current is not None and current.settings.default in current.registry.names(),
        "accepting": current is not None and not current.stopping,
    }
    ok = all(checks.values())
    body = {"status": "ready" if ok else "not ready", "checks": checks}
    return Response(orjson.dumps(body), status_code=200 if ok else 503, media_type=JSON)


@metrics_router.get("/metrics", responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
                                          "description": "Prometheus text format"}, **errors_for()})
async def metrics(state: AppState) -> Response:
    """Prometheus metrics (any key, unless ``metrics_public``)."""
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
