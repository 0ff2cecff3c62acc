"""The API documentation: ``GET /docs``, Swagger UI, with its JavaScript and CSS served from the
``swagger-ui-bundle`` package under ``/docs-assets`` instead of a CDN, so that it works offline.
The document itself is FastAPI's ``/openapi.json``.

The page carries the console's Content-Security-Policy (``frame-ancestors 'none'``: no site can
frame it to trick a click; scripts from this origin only). So its start-up script is a file of
its own, ``/docs/init.js``, not inline: an inline script is exactly what the policy forbids.
"""
from __future__ import annotations

import swagger_ui_bundle  # type: ignore[import-untyped,unused-ignore]
from fastapi import APIRouter
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from .._http import Route
from .console import SECURITY_HEADERS

router = APIRouter(route_class=Route)
router.mount("/docs-assets", StaticFiles(directory=swagger_ui_bundle.swagger_ui_path), name="docs-assets")

_PAGE = b"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link type="text/css" rel="stylesheet" href="/docs-assets/swagger-ui.css">
<link rel="icon" href="/docs-assets/favicon-32x32.png">
<title>Forewarn sidecar \xe2\x80\x94 API</title>
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs-assets/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body>
</html>
"""
_INIT = b"""window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
"""


@router.get("/docs", include_in_schema=False)
async def docs() -> Response:
    return Response(_PAGE, media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)


@router.get("/docs/init.js", include_in_schema=False)
async def docs_script() -> Response:
    return Response(_INIT, media_type="text/javascript; charset=utf-8", headers=SECURITY_HEADERS)
