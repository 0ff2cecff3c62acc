"""The exception handlers: every error, whatever raised it, answered in the one error shape.

``{"error": {code, message, field, predicate}, "detail": ...}`` with its HTTP status
(:func:`server._http.error_response`): an :class:`~server._http.ApiError` as it says, a request
FastAPI's validation refused as a 422 naming the field, Starlette's 404/405/413 with their codes,
a write that lost a race with another replica as a 503 to retry, and a bug as a bare 500 whose
details go to the log only. Errors are counted in the server's metrics by status.
"""
from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from ._http import ApiError, error_response, field_of, log, validation_detail
from .deps import Served
from .storage import Conflict

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}


def api_error_response(served: Served, exc: ApiError) -> Response:
    """The answer to an :class:`ApiError`, counted (shared with the step fast path)."""
    _count(served, exc.status)
    return error_response(exc.status, exc.code, exc.message, field=exc.field, predicate=exc.predicate,
                          headers=exc.headers, detail=exc.detail)


def _count(served: Served, status: int) -> None:
    if served.state is not None:  # also while stopping: the answers still went out
        served.state.metrics.errors.labels(str(status)).inc()


def install(app: FastAPI, served: Served) -> None:
    """Register the handlers on ``app``, whose state is ``served``."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> Response:
        return api_error_response(served, exc)

    @app.exception_handler(Conflict)
    async def conflict(_: Request, exc: Conflict) -> Response:  # a write raced another replica's and lost
        return error_response(503, "storage_conflict", f"{exc}; retry", headers={"Retry-After": "1"})

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        detail = validation_detail(errors)
        first = detail[0] if detail else {"loc": [], "msg": "invalid request"}
        field_name = field_of(first["loc"]) or "body"
        ctx = errors[0].get("ctx") if errors else None
        reason = f": {ctx['error']}" if isinstance(ctx, dict) and isinstance(ctx.get("error"), str) else ""
        _count(served, 422)
        return error_response(422, "invalid_request", f"{field_name}: {first['msg']}{reason}", field=field_name,
                              detail=detail)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> Response:
        return error_response(exc.status_code, _HTTP_CODES.get(exc.status_code, "http_error"), str(exc.detail),
                              field="body" if exc.status_code == 413 else None,
                              headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> Response:  # a bug: say so without details
        log.exception("unexpected error", exc_info=exc)
        return error_response(500, "internal_error", "internal server error (see the server log)")
