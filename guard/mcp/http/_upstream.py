"""The lean HTTP relay's client of its one upstream (:mod:`.relay`): httpx2, the MCP SDK's own HTTP
client, on kept-alive connections; the upstream's event streams read with httpx2's ``EventSource``.

The relay reads the answer to a judged call out of the upstream's event stream. It must cut that stream into
events exactly where the client will (cut only at ``\\n\\n`` where the client also cuts at ``\\r\\r``, an event the
relay passed on unread held an answer the client took for the call's): reading it with the parser the SDK's
client reads it with makes the two cuts one. The events before the answer go on written anew from what was
read (:func:`event_bytes`), never as the bytes that came.

httpx2 costs more CPU a request than the hand-written HTTP/1.1 client and SSE parser it replaced, and stays
within the budget (``bench/mcp_overhead.py --only http``, 300 calls, 2 CPUs at load 3-4, the two checkouts
run one after the other): the lean relay added +0.23 ms p50 over the server's own HTTP with them (the proxy's
CPU 0.90 ms a call) and +0.75 ms with httpx2 (1.63 ms a call), against a target of ≤ 2 ms.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2
import orjson

log = logging.getLogger("forewarn.mcp")

# the upstream cannot be reached, broke the protocol, or broke its answer off
BROKEN = (httpx2.RequestError, httpx2.StreamError)
_KEEP = 4.0  # seconds an idle connection is kept (uvicorn, which serves the SDK's servers, closes them after 5)
_DRAIN_TIMEOUT = 30.0


class HttpUpstream:
    """Requests to the upstream's one URL. Redirects are not followed and the environment's proxy settings not
    read (the relay speaks to the URL it was given); bodies come as the upstream wrote them (no compression:
    the relay reads the answers it judges)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._client = httpx2.AsyncClient(
            headers={"accept-encoding": "identity"}, timeout=httpx2.Timeout(None), trust_env=False,
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=_KEEP))

    async def request(self, method: str, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> httpx2.Response:
        """Send a request; the response once its head arrived (its body is read as it comes; close it).

        Raises:
            httpx2.RequestError: the upstream cannot be reached, or closed the connection before it answered.
        """
        request = self._client.build_request(method, self.url, headers=headers,
                                             content=body if body or method == "POST" else None)
        return await self._client.send(request, stream=True)

    async def done(self, method: str, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> None:
        """Send a request whose answer nobody reads (read to its end, so that the connection is kept)."""
        response = await self.request(method, headers, body)
        try:
            await response.aread()
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()


def head_of(response: httpx2.Response) -> list[tuple[bytes, bytes]]:
    """The response's headers as they came, names in lower case."""
    return [(name.lower(), value) for name, value in response.headers.raw]


async def answer_in(response: httpx2.Response, rid: Any, on_event: Callable[[bytes], Awaitable[None]] | None
                    ) -> bytes:
    """The data of the event in ``response``'s event stream that answers request ``rid`` (empty when the stream
    ends without it); every event before it goes to ``on_event`` (None: dropped), written anew. The stream
    is read to its end apart once the answer is in (:func:`drain`, which closes it), so that its connection
    is kept for the next request without the client waiting; else the caller closes it."""
    events = aiter(httpx2.EventSource(response, max_event_size=None))
    async for event in events:
        if event.data and _answers(event.data, rid):
            task = asyncio.create_task(drain(response, events))
            _DRAINING.add(task)
            task.add_done_callback(_DRAINING.discard)
            return event.data.encode()
        if on_event is not None:
            await on_event(event_bytes(event))
    return b""


_DRAINING: set[asyncio.Task[None]] = set()  # (a task nobody holds may be collected before it ends)


async def drain(response: httpx2.Response, rest: AsyncIterator[Any]) -> None:
    try:
        async with asyncio.timeout(_DRAIN_TIMEOUT):
            async for _ in rest:
                pass
    except (TimeoutError, *BROKEN):
        pass
    finally:
        await response.aclose()


def sse_event(data: bytes) -> bytes:
    """One ``message`` event carrying ``data``."""
    return b"event: message\n" + b"".join(b"data: " + line + b"\n" for line in data.split(b"\n")) + b"\n"


def event_bytes(event: httpx2.ServerSentEvent) -> bytes:
    """An event as read, written anew: its type, its data line by line, the last event id and the retry."""
    head = [f"event: {event.event}\n"]
    if event.id:
        head.append(f"id: {event.id}\n")
    if event.retry is not None:
        head.append(f"retry: {event.retry}\n")
    if event.data:
        head.extend(f"data: {line}\n" for line in event.data.split("\n"))
    return ("".join(head) + "\n").encode()


def _answers(data: str, rid: Any) -> bool:
    try:
        message = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return isinstance(message, dict) and "method" not in message and message.get("id") == rid
