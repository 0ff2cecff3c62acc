"""The approver console (``/console``) and the API documentation (``/docs``), with no external asset.

The console is one static page and one script, shipped in ``server/console/``: it holds no secret
and may be served to anyone; everything it shows comes from the API with the approver key the
person signs in with (kept in the tab's ``sessionStorage``), so an agent key or no key sees nothing
and can decide nothing. It follows pending approvals live by long-polling ``GET /v1/changes``.

``/docs`` is FastAPI's Swagger UI with its JavaScript and CSS served from the
``swagger-ui-bundle`` package instead of a CDN, so it works offline.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import orjson
import swagger_ui_bundle
from fastapi import FastAPI, Query
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.responses import HTMLResponse, Response
from starlette.staticfiles import StaticFiles

from forewarn.server._http import JSON

__all__ = ["install"]

_HERE = Path(__file__).with_name("console")
# the page's own script and styles only; no frame, no form posted elsewhere, no external fetch
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def install(app: FastAPI, st: Callable[[], Any], as_approver: Any) -> None:
    page = (_HERE / "index.html").read_bytes()
    script = (_HERE / "app.js").read_bytes()
    styles = (_HERE / "console.css").read_bytes()
    headers = {"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}

    @app.get("/console", include_in_schema=False)
    async def console() -> Response:
        return Response(page, media_type="text/html; charset=utf-8", headers=headers)

    @app.get("/console/app.js", include_in_schema=False)
    async def console_script() -> Response:
        return Response(script, media_type="text/javascript; charset=utf-8", headers=headers)

    @app.get("/console/console.css", include_in_schema=False)
    async def console_styles() -> Response:
        return Response(styles, media_type="text/css; charset=utf-8", headers=headers)

    @app.get("/v1/changes", tags=["approvals"])
    async def changes(since: Annotated[int, Query(ge=-1, le=2**62)] = -1,
                      wait: Annotated[float, Query(ge=0, le=3600)] = 0.0,
                      _: Any = as_approver) -> Response:
        """Long poll for the console: answers when approvals or proposals were created or resolved
        since generation ``since`` (or after ``wait`` seconds) with the current generation."""
        state = st()
        generation = await state.hub.changes(since, min(wait, state.settings.limits.max_wait_seconds))
        return Response(orjson.dumps({"generation": generation}), media_type=JSON)

    app.mount("/docs-assets", StaticFiles(directory=swagger_ui_bundle.swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="Forewarn sidecar — API",
                                   swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-assets/swagger-ui.css",
                                   swagger_favicon_url="/docs-assets/favicon-32x32.png")
