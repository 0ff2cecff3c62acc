"""The API documentation: ``GET /docs``, FastAPI's Swagger UI, with its JavaScript and CSS served
from the ``swagger-ui-bundle`` package under ``/docs-assets`` instead of a CDN, so that it works
offline. The document itself is FastAPI's ``/openapi.json``.
"""
from __future__ import annotations

import swagger_ui_bundle  # type: ignore[import-untyped,unused-ignore]
from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

from .._http import Route

__all__ = ["router"]

router = APIRouter(route_class=Route)
router.mount("/docs-assets", StaticFiles(directory=swagger_ui_bundle.swagger_ui_path), name="docs-assets")


@router.get("/docs", include_in_schema=False)
async def docs() -> HTMLResponse:
    return get_swagger_ui_html(openapi_url="/openapi.json", title="Forewarn sidecar — API",
                               swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                               swagger_css_url="/docs-assets/swagger-ui.css",
                               swagger_favicon_url="/docs-assets/favicon-32x32.png")
