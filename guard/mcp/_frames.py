"""JSON-RPC frames as the lean relay (:mod:`.relay`) reads and writes them: bytes, parsed with orjson."""
from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

import mcp_types as types
import orjson
from mcp.shared.exceptions import MCPError

from .._version import __version__
from .calls import INSTRUCTIONS, SERVER_NAME, SERVER_TITLE

__all__ = ["Sink", "Pending", "Turn", "drained", "parse_problem", "error_frame", "result_frame", "text_item", "text_of", "as_proxy",
           "raise_error", "tool_names"]


class Sink(Protocol):
    """Where the answer to a forwarded request goes (an ``asyncio.Future``, or a callback's holder that handles
    it in the callback that read it): the answer's bytes and parse, or the MCPError that ended the wait."""

    def done(self) -> bool: ...

    def set_result(self, answer: tuple[bytes, dict[str, Any]], /) -> None: ...

    def set_exception(self, exc: BaseException, /) -> None: ...


@dataclass
class Pending:
    """A request forwarded to the upstream, waiting for its answer."""

    id: Any  # the request's id, as the client sent it
    what: str  # what it asked, for errors: "tools/call 'git_add'", "resources/read"
    timer: asyncio.TimerHandle | None
    future: Sink | None  # None: the answer goes to the client as it is


class Turn:
    """One judged call of a session at a time: a FIFO lock (as ``asyncio.Lock``) that a caller can also take
    at once, without waiting, when it is free (:meth:`take_now`: the relay's fast path, in a callback).
    On release a waiter is handed the turn, so nobody takes it in between."""

    def __init__(self) -> None:
        self._held = False
        self._waiters: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        return self._held

    def take_now(self) -> bool:
        if self._held:
            return False
        self._held = True
        return True

    async def acquire(self) -> None:
        if self.take_now():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed the turn, then cancelled: pass it on
            elif waiter in self._waiters:  # (a release may have dropped it already)
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # its turn now: still held
                return
        self._held = False



async def drained(writer: asyncio.StreamWriter) -> None:
    try:
        await writer.drain()
    except (ConnectionError, OSError):
        pass  # the other end is gone: the reader sees it


def parse_problem(problem: object) -> str:
    return f"Parse error: the line is not a JSON-RPC message ({' '.join(str(problem).split())[:200]})"


def error_frame(rid: Any, code: int, message: str) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}) + b"\n"


def result_frame(rid: Any, result: dict[str, Any]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + b"\n"


def text_item(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def text_of(result: dict[str, Any]) -> str:
    """The result's text, as the SDK path reads a ``CallToolResult`` (structured content when there is no text)."""
    parts = [c["text"] for c in result.get("content") or [] if isinstance(c, dict) and c.get("type") == "text"
             and isinstance(c.get("text"), str)]
    if result.get("structuredContent") is not None and not parts:
        parts.append(orjson.dumps(result["structuredContent"], default=str).decode())
    return "\n".join(parts)


def as_proxy(message: dict[str, Any], line: bytes) -> bytes:
    """The upstream's answer to ``initialize`` as the proxy's: its name and instructions (the protocol version
    and capabilities the upstream chose stay; its own instructions follow the proxy's)."""
    result = message.get("result")
    if not isinstance(result, dict):
        return line
    theirs = result.get("instructions")
    info = {"name": SERVER_NAME, "title": SERVER_TITLE, "version": __version__}
    ours = INSTRUCTIONS + (f"\n\n{theirs}" if isinstance(theirs, str) and theirs else "")
    return result_frame(message["id"], {**result, "serverInfo": info, "instructions": ours})


def raise_error(answer: dict[str, Any]) -> None:
    """Raise the JSON-RPC error an answer carries, as an ``MCPError`` (nothing when it is a result)."""
    if "error" in answer:
        error = answer["error"] if isinstance(answer["error"], dict) else {}
        raise MCPError(int(error.get("code", types.INTERNAL_ERROR)), str(error.get("message", "")))


def tool_names(message: dict[str, Any]) -> list[str]:
    """The names of the tools a ``tools/list`` answer lists."""
    result = message.get("result")
    tools = result.get("tools") if isinstance(result, dict) else None
    return [t["name"] for t in tools or [] if isinstance(t, dict) and isinstance(t.get("name"), str)]
