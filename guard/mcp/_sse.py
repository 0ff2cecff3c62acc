"""Server-sent events as the lean HTTP relay (:mod:`.http_relay`) reads them: the upstream's answer to one
request picked out of its event stream, the events before it passed on as they came."""
from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

__all__ = ["answer_in", "sse_event"]

_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n")


async def answer_in(chunks: AsyncIterator[bytes], rid: Any, on_event: Callable[[bytes], Awaitable[None]] | None
                    ) -> bytes:
    """The data of the event that answers request ``rid`` (empty when the stream ends without it); every
    event before it goes to ``on_event`` as it came (None: dropped)."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        while (match := _BOUNDARY.search(buffer)) is not None:
            raw, buffer = buffer[:match.start()], buffer[match.end():]
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
