"""The sidecar's ASGI middleware: what runs before FastAPI's router sees a request.

``AuthFirst`` refuses a request without a valid key (401) or past its rate (429) before anything
reads its body; ``BodyLimit`` refuses a body over the size limit (413) or one that arrives too
slowly (408); ``FastSteps`` answers ``observe``/``preview`` without the router (the step fast
path). Their errors are in the one error shape (:mod:`server._http`).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from fastapi import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._http import JSON, ApiError, error_response, log

_JSON = JSON.encode()
PRINCIPAL = "forewarn.principal"  # the scope key where AuthFirst leaves the caller it found


class BodyLimit:
    """413 for bodies over the limit, by Content-Length or, for chunked bodies, as they arrive;
    408 when the whole body has not arrived ``timeout`` seconds after the headers. The deadline
    is for the request, not for each read: a client that drips a byte now and then cannot hold
    its connection longer than that."""

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
        started = body_done = False
        deadline = asyncio.get_running_loop().time() + self.timeout

        async def limited_receive() -> Message:
            nonlocal received, body_done
            if body_done:  # past the body, a read waits for the disconnect (a long poll): no deadline
                return await receive()
            try:  # asyncio.timeout_at, not wait_for: no task per read, only a timer handle
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise _TooSlow(self.timeout) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _TooLarge(self.limit)
                body_done = not message.get("more_body", False)
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
            payload = await handlers[op](state, session_id, authorization, body, idempotency_key, scope["headers"],
                                         scope.get(PRINCIPAL))
        except ApiError as exc:
            response = handlers["api_error"](exc)
        except HTTPException as exc:  # the body limit or deadline, raised from inside receive()
            if isinstance(exc, _TooSlow):
                raise
            response = error_response(exc.status_code, "body_too_large", str(exc.detail), field="body")
        except Exception as exc:  # a bug: the same answer as the app's own handler gives
            log.exception("unexpected error", exc_info=exc)
            response = error_response(500, "internal_error", "internal server error (see the server log)")
        else:  # the answer as two ASGI messages: what a starlette Response sends, without building one
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(len(payload)).encode()), (b"content-type", _JSON)]})
            await send({"type": "http.response.body", "body": payload})
            return
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
        if self.rate is not None and not self._take(principal.identity):
            return api_error(ApiError(429, "rate_limited", f"more than {self.rate:g} requests a "
                                      "second from this key", headers={"Retry-After": "1"}))
        scope[PRINCIPAL] = principal  # the step fast path need not hash the key a second time
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
