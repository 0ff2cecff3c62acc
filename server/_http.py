"""HTTP plumbing of the sidecar: errors, request parsing and limits, and the step fast path.

Everything here is about the wire, nothing about the guard: the error shape every
response shares, strict parsing (orjson; unknown or repeated query parameters refused),
the body-size limit, the nesting-depth check, and ``FastSteps``, which answers
``observe``/``preview`` before FastAPI's router.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from fastapi import HTTPException, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from forewarn.server import schemas as S
from forewarn.server.auth import Authenticator, Principal

__all__ = [
    "ApiError", "AuthFirst", "BodyLimit", "ERRORS", "FastSteps", "JSON", "OrjsonRequest", "Route", "authorize", "bad_request",
    "check_id", "error_response", "errors_for", "field_of", "parse_json", "step_openapi", "too_deep",
    "validation_detail",
]

log = logging.getLogger("forewarn.server")
JSON = "application/json"


class ApiError(Exception):
    """An error answered as ``{"error": {code, message, field, predicate}}`` with an HTTP status."""

    def __init__(self, status: int, code: str, message: str, *, field: str | None = None,
                 predicate: str | None = None, headers: dict[str, str] | None = None,
                 detail: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.detail = detail
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.predicate = predicate
        self.headers = headers


def error_response(status: int, code: str, message: str, *, field: str | None = None,
                   predicate: str | None = None, detail: list[dict[str, Any]] | None = None,
                   headers: dict[str, str] | None = None) -> Response:
    body = {"error": {"code": code, "message": message, "field": field, "predicate": predicate}, "detail": detail}
    return Response(orjson.dumps(body), status_code=status, media_type=JSON, headers=headers)


class OrjsonRequest(Request):
    """Bodies parsed by orjson: faster than json, and it refuses NaN and nesting past 1024 levels
    with a decode error (a 422) where json would raise RecursionError."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = orjson.loads(await self.body())
        return self._json


class Route(APIRoute):
    """Bodies through orjson, and unknown or repeated query parameters refused like unknown body
    fields are (a misspelt ``?limt=5`` would otherwise be silently ignored)."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()
        known = frozenset(_query_names(self.dependant))

        async def route(request: Request) -> Response:
            if request.scope["query_string"]:
                names = [name for name, _ in request.query_params.multi_items()]
                unknown = sorted(set(names) - known)
                if unknown:
                    raise ApiError(422, "invalid_request", f"unknown query parameter(s) {unknown}; "
                                   f"known: {sorted(known)}", field=f"query.{unknown[0]}")
                repeated = sorted({name for name in names if names.count(name) > 1})
                if repeated:  # every parameter takes one value; FastAPI would silently keep the last
                    raise ApiError(422, "invalid_request", f"query parameter {repeated[0]!r} is given more "
                                   "than once", field=f"query.{repeated[0]}")
            response: Response = await handler(OrjsonRequest(request.scope, request.receive))
            return response

        return route


def _query_names(dependant: Any) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


class BodyLimit:
    """413 for bodies over the limit, by Content-Length or, for chunked bodies, as they arrive;
    408 when the client takes longer than ``timeout`` seconds to send the next part of a body."""

    def __init__(self, app: ASGIApp, limit: int, timeout: float = 30.0) -> None:
        self.app = app
        self.limit = limit
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    too_large = int(value) > self.limit
                except ValueError:
                    too_large = False
                if too_large:
                    await self._refuse(send)
                    return
                break
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            try:  # asyncio.timeout, not wait_for: no task per read, only a timer handle
                async with asyncio.timeout(self.timeout):
                    message = await receive()
            except TimeoutError:
                raise _TooSlow(self.timeout) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _TooLarge(self.limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._refuse(send)
        except _TooSlow as exc:
            if not started:
                response = error_response(408, "request_timeout", str(exc.detail), field="body",
                                          headers={"Connection": "close"})
                await response({"type": "http"}, _no_receive, send)

    async def _refuse(self, send: Send) -> None:
        response = error_response(413, "body_too_large", f"the request body exceeds {self.limit} bytes",
                                   field="body")
        await response({"type": "http"}, _no_receive, send)


class FastSteps:
    """``POST /v1/sessions/{id}/observe`` and ``/preview`` answered without the router: the same
    handlers as the documented routes, minus FastAPI's per-request machinery. Anything else, and
    any request these two would not take as they are (a query string, another media type), goes on
    to FastAPI as usual."""

    def __init__(self, app: ASGIApp, handlers: Callable[[], dict[str, Any]]) -> None:
        self.app = app
        self.handlers = handlers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope["query_string"]:
            path: str = scope["path"]
            if path.startswith("/v1/sessions/"):
                session_id, _, op = path[13:].partition("/")
                if op == "observe" or op == "preview":
                    authorization = idempotency_key = None
                    json_body = True
                    for name, value in scope["headers"]:
                        if name == b"authorization":
                            authorization = value.decode("latin-1")
                        elif name == b"content-type":
                            json_body = _is_json(value)
                        elif name == b"idempotency-key":
                            idempotency_key = value.decode("latin-1")
                    if json_body:
                        await self._answer(op, session_id, authorization, idempotency_key, scope, receive, send)
                        return
        await self.app(scope, receive, send)

    async def _answer(self, op: str, session_id: str, authorization: str | None, idempotency_key: str | None,
                      scope: Scope, receive: Receive, send: Send) -> None:
        handlers = self.handlers()
        try:
            body = b""
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                body += message.get("body", b"")
                if not message.get("more_body", False):
                    break
            state = handlers["state"]()
            payload = await handlers[op](state, session_id, authorization, body, idempotency_key)
            response = Response(payload, media_type=JSON)
        except ApiError as exc:
            response = handlers["api_error"](exc)
        except HTTPException as exc:  # the body limit or deadline, raised from inside receive()
            if isinstance(exc, _TooSlow):
                raise
            response = error_response(exc.status_code, "body_too_large", str(exc.detail), field="body")
        except Exception as exc:  # a bug: the same answer as the app's own handler gives
            log.exception("unexpected error", exc_info=exc)
            response = error_response(500, "internal_error", "internal server error (see the server log)")
        await response(scope, receive, send)


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


class _TooSlow(HTTPException):
    """The body did not arrive in time (raised from inside receive, like :class:`_TooLarge`)."""

    def __init__(self, timeout: float) -> None:
        super().__init__(408, f"the request body did not arrive within {timeout:g} s")


class AuthFirst:
    """401 for a request to a protected path without a valid key, before anything reads its body
    (a malformed body from an unknown caller says nothing to it); and, with ``rate``, 429 for a
    key past its token bucket (``rate`` requests a second, bursts of ``burst``)."""

    def __init__(self, app: ASGIApp, handlers: Callable[[], dict[str, Any]], rate: float | None = None,
                 burst: int = 100, protect_metrics: bool = True) -> None:
        self.app = app
        self.handlers = handlers
        self.rate = rate
        self.burst = float(burst)
        self.protect_metrics = protect_metrics
        self._buckets: dict[str, tuple[float, float]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            if path.startswith("/v1/") or (path == "/metrics" and self.protect_metrics):
                refusal = self._check(scope)
                if refusal is not None:
                    await refusal(scope, _no_receive, send)
                    return
        await self.app(scope, receive, send)

    def _check(self, scope: Scope) -> Response | None:
        handlers = self.handlers()
        api_error: Callable[[ApiError], Response] = handlers["api_error"]
        try:
            state = handlers["state"]()
        except ApiError as exc:
            return api_error(exc)
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
                break
        principal = state.auth.principal(authorization)
        if principal is None:
            return api_error(ApiError(
                401, "unauthorized", "a valid API key is required: 'Authorization: Bearer KEY'",
                field="header.authorization", headers={"WWW-Authenticate": "Bearer"}))
        if self.rate is not None and not self._take(principal.name):
            return api_error(ApiError(429, "rate_limited", f"more than {self.rate:g} requests a "
                                      "second from this key", headers={"Retry-After": "1"}))
        return None

    def _take(self, who: str) -> bool:
        assert self.rate is not None
        now = time.monotonic()
        tokens, then = self._buckets.get(who, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if tokens < 1.0:
            self._buckets[who] = (tokens, now)
            return False
        self._buckets[who] = (tokens - 1.0, now)
        return True


class _TooLarge(HTTPException):
    """Raised from inside the body read; an HTTPException so that FastAPI lets it through (it turns
    any other exception met while reading a body into a 400)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body exceeds {limit} bytes")


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


def too_deep(value: Any, limit: int) -> str | None:
    """The dotted path of the first node nested deeper than ``limit``, or None. A cheap pass first
    (no paths built): nearly every state is shallow."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return _deep_path(value, limit)
        for child in (node.values() if node.__class__ is dict else node):
            if child.__class__ is dict or child.__class__ is list:
                stack.append((child, depth + 1))
    return None


def _deep_path(value: Any, limit: int) -> str:
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        node, depth, path = stack.pop()
        if node.__class__ is dict:
            if depth > limit:
                return path
            stack.extend((v, depth + 1, f"{path}.{k}") for k, v in node.items())
        elif node.__class__ is list:
            if depth > limit:
                return path
            stack.extend((v, depth + 1, f"{path}[{i}]") for i, v in enumerate(node))
    return ""


def field_of(loc: Any) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int) and parts:
            parts[-1] = f"{parts[-1]}[{part}]"
        else:
            parts.append(str(part))
    return ".".join(parts)


def authorize(auth: Authenticator, header: str | None, roles: frozenset[Any]) -> Principal:
    """The caller of a request with this ``Authorization`` header, if its role is one of ``roles``."""
    principal = auth.principal(header)
    if principal is None:
        raise ApiError(401, "unauthorized", "a valid API key is required: 'Authorization: Bearer KEY'",
                       field="header.authorization", headers={"WWW-Authenticate": "Bearer"})
    if principal.role not in roles:
        allowed = ", ".join(sorted(r.value for r in roles))
        raise ApiError(403, "forbidden", f"the role '{principal.role.value}' may not do this (needs one of: {allowed})")
    return principal


_ID = re.compile(S.ID_PATTERN)


def check_id(value: str, name: str) -> str:
    if not _ID.match(value):
        raise ApiError(422, "invalid_request", f"path.{name}: should match pattern '{S.ID_PATTERN}'",
                       field=f"path.{name}")
    return str(value)


_M = TypeVar("_M", bound=BaseModel)


def parse_json(raw: bytes, model: type[_M]) -> _M:
    """Parse and validate a JSON body the way FastAPI would, with the same 422s."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(422, "invalid_request", f"body: JSON decode error: {exc}", field="body") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        detail = validation_detail(exc.errors(), ("body",))
        first = detail[0]
        field = field_of(first["loc"])
        raise ApiError(422, "invalid_request", f"{field}: {first['msg']}", field=field, detail=detail) from None


def validation_detail(errors: Any, prefix: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [{"loc": [*prefix, *(p if isinstance(p, int) else str(p) for p in e.get("loc", ()))],
             "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))} for e in errors]


def step_openapi() -> dict[str, Any]:
    """What FastAPI would have documented for ``(session_id: path, body: StepIn, key: bearer)``."""
    return {
        "parameters": [{"name": "session_id", "in": "path", "required": True, "description": "A session id.",
                        "schema": {"type": "string", "pattern": S.ID_PATTERN, "title": "Session Id"}}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": S.StepIn.model_json_schema()}}},
        "security": [{"HTTPBearer": []}],
    }


def bad_request(message: str, field: str) -> ApiError:
    return ApiError(422, "invalid_request", message, field=field)


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": S.ErrorBody, "description": text} for status, text in [
        (401, "No API key, or an unknown one"), (403, "The key's role may not do this"),
        (413, "Request body too large"), (422, "Malformed request; the error names the field"),
        (503, "Not ready, or the database refused the write")]
}


def errors_for(*extra: tuple[int, str]) -> dict[int | str, dict[str, Any]]:
    out = dict(ERRORS)
    for status, text in extra:
        out[status] = {"model": S.ErrorBody, "description": text}
    return out
