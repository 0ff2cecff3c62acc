"""ASGI plumbing of the lean HTTP relay (:mod:`.relay`): request bodies, answers (one JSON body, or an
event stream the relay writes), and bodies streamed from the upstream to the client until it leaves."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx2

from ._upstream import BROKEN, sse_event

log = logging.getLogger("forewarn.mcp")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_JSON = [(b"content-type", b"application/json")]
# the hop's own headers, not passed back (the body goes back decoded of its transfer encoding)
_HOP_BACK = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"te", b"trailer",
                       b"upgrade"})
BODY_TIMEOUT = 30.0


class Reply:
    """The answer to a request the relay reads: one JSON body, or (once an event had to go first) a stream
    of events whose last is the answer."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.streaming = False
        self.headers: list[tuple[bytes, bytes]] = []

    async def event(self, event: bytes) -> None:
        if not self.streaming:
            self.streaming = True
            await self.send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform"),
                *self.headers]})
        await self.send({"type": "http.response.body", "body": event, "more_body": True})

    async def final(self, frame: bytes) -> None:
        frame = frame.rstrip(b"\n")
        if self.streaming:
            await self.send({"type": "http.response.body", "body": sse_event(frame), "more_body": False})
        else:
            await reply(self.send, 200, frame, self.headers)


async def read_body(receive: Receive, limit: int, timeout: float = BODY_TIMEOUT) -> bytes | None:
    """The request's body; None when it is above ``limit`` bytes (the rest is not read).

    Raises:
        TimeoutError: the body came in parts and did not end within ``timeout`` seconds (uvicorn waits for
            a body without end: a client that stops sending would hold its connection and task for good).
    """
    message = await receive()  # (a body of one part, as a client's call is: no timer)
    if message["type"] == "http.disconnect":
        return b""
    chunk = message.get("body", b"")
    if not message.get("more_body"):
        return None if len(chunk) > limit else chunk
    parts, size = [chunk], len(chunk)
    async with asyncio.timeout(timeout):
        while size <= limit:
            message = await receive()
            if message["type"] == "http.disconnect":
                return b""
            chunk = message.get("body", b"")
            size += len(chunk)
            parts.append(chunk)
            if not message.get("more_body"):
                break
    return None if size > limit else b"".join(parts)


async def pump(response: httpx2.Response, send: Send, timeout: float | None) -> None:
    """The body to the client as it comes (``timeout``: the longest wait for the next piece)."""
    chunks = response.aiter_raw()
    try:
        while True:
            async with asyncio.timeout(timeout):
                chunk = await anext(chunks, None)
            if chunk is None:
                return
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except (*BROKEN, TimeoutError) as exc:  # the upstream went away mid-answer: the client sees the stream end
        log.warning("upstream broke its answer off: %s", type(exc).__name__ if not str(exc) else exc)


async def until_gone(pump: asyncio.Task[None], receive: Receive) -> None:
    """Wait for ``pump``; cancel it if the client disconnects first."""
    gone = asyncio.create_task(disconnected(receive))
    try:
        await asyncio.wait((pump, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (pump, gone):
            task.cancel()


async def disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def reply(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = body.rstrip(b"\n")
    await send({"type": "http.response.start", "status": status,
                "headers": [*_JSON, (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


async def empty(send: Send, status: int) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


def back_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in headers if k not in _HOP_BACK]


def session_id(headers: list[tuple[bytes, bytes]]) -> str | None:
    for key, value in headers:
        if key == b"mcp-session-id":
            return value.decode()
    return None
