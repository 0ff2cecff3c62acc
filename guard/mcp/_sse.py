"""Server-sent events as the lean HTTP relay (:mod:`.http_relay`) reads them: the upstream's answer to one
request picked out of its event stream, the events before it passed on as they came."""
from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

__all__ = ["answer_in", "sse_event"]

async def answer_in(chunks: AsyncIterator[bytes], rid: Any, on_event: Callable[[bytes], Awaitable[None]] | None
                    ) -> bytes:
    """The data of the event that answers request ``rid`` (empty when the stream ends without it); every
    event before it goes to ``on_event`` (None: dropped), its lines ended by ``\n``.

    A line of an event stream ends at ``\r\n``, ``\r`` or ``\n``: the stream is read in that one form, so
    that the relay cuts events where the client does (cut only at ``\n\n``, ``\r\r`` hid an event — an
    answer the client took for the call's — inside one the relay passed on unread)."""
    buffer = b""
    held = b""  # a chunk's last "\r", which may be the first half of "\r\n"
    async for chunk in chunks:
        chunk, held = held + chunk, b""
        if chunk.endswith(b"\r"):
            chunk, held = chunk[:-1], b"\r"
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buffer += chunk
        while (end := buffer.find(b"\n\n")) >= 0:
            raw, buffer = buffer[:end], buffer[end + 2:]
            data = _data(raw)
            if data and _answers(data, rid):
                return data
            if on_event is not None and raw.strip():
                await on_event(raw + b"\n\n")
    return b""


def sse_event(data: bytes) -> bytes:
    """One ``message`` event carrying ``data``."""
    return b"event: message\n" + b"".join(b"data: " + line + b"\n" for line in data.split(b"\n")) + b"\n"


def _data(raw: bytes) -> bytes:
    lines = [line[5:] for line in raw.splitlines() if line.startswith(b"data:")]
    return b"\n".join(line[1:] if line.startswith(b" ") else line for line in lines)


def _answers(data: bytes, rid: Any) -> bool:
    try:
        message = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return isinstance(message, dict) and "method" not in message and message.get("id") == rid
