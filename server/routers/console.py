"""The approver console: ``GET /console`` (its page, script and styles) and ``GET /v1/changes``,
the long poll it follows approvals and proposals with. No external asset.

The console is one static page and one script, shipped in ``server/console/``: it holds no secret
and may be served to anyone; everything it shows comes from the API with the approver key the
person signs in with (kept in the tab's ``sessionStorage``), so an agent key or no key sees nothing
and can decide nothing.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
from fastapi import APIRouter, Query
from starlette.responses import Response

from .._http import ERRORS, JSON, Route
from ..deps import Approver, AppState

_ASSETS = Path(__file__).parent.parent / "console"
# the page's own script and styles only; no frame, no form posted elsewhere, no external fetch
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
_PAGE = (_ASSETS / "index.html").read_bytes()
_SCRIPT = (_ASSETS / "app.js").read_bytes()
_STYLES = (_ASSETS / "console.css").read_bytes()

router = APIRouter(route_class=Route, responses=dict(ERRORS))


@router.get("/console", include_in_schema=False)
async def console() -> Response:
    return Response(_PAGE, media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)


@router.get("/console/app.js", include_in_schema=False)
async def console_script() -> Response:
    return Response(_SCRIPT, media_type="text/javascript; charset=utf-8", headers=SECURITY_HEADERS)


@router.get("/console/console.css", include_in_schema=False)
async def console_styles() -> Response:
    return Response(_STYLES, media_type="text/css; charset=utf-8", headers=SECURITY_HEADERS)


@router.get("/v1/changes", tags=["approvals"])
async def changes(state: AppState, principal: Approver,
                  since: Annotated[int, Query(ge=-1, le=2**62)] = -1,
                  wait: Annotated[float, Query(ge=0, le=3600)] = 0.0) -> Response:
    """Long poll for the console: answers when approvals or proposals of the caller's tenants were
    created or resolved since generation ``since`` (or after ``wait`` seconds) with the current
    generation; another tenant's changes neither wake it nor show in the number."""
    generation = await state.hub.changes(since, min(wait, state.settings.limits.max_wait_seconds), principal.tenants)
    return Response(orjson.dumps({"generation": generation}), media_type=JSON)
