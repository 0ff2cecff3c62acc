"""JSON-RPC frames as the lean relay (:mod:`.relay`) reads and writes them: bytes, parsed with orjson."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["Pending", "drained", "parse_problem", "error_frame", "result_frame", "text_item", "text_of"]


@dataclass
class Pending:
    """A request forwarded to the upstream, waiting for its answer."""

    id: Any  # the request's id, as the client sent it
    what: str  # what it asked, for errors: "tools/call 'git_add'", "resources/read"
    timer: asyncio.TimerHandle | None
    future: asyncio.Future[tuple[bytes, dict[str, Any]]] | None  # None: the answer goes to the client as it is



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

