"""JSON-RPC frames as the lean relay (:mod:`.relay`) reads and writes them: bytes, parsed with orjson."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import orjson
from mcp.shared.exceptions import MCPError

from .._version import __version__
from .calls import INSTRUCTIONS, SERVER_NAME, SERVER_TITLE

__all__ = ["Pending", "drained", "parse_problem", "error_frame", "result_frame", "text_item", "text_of", "as_proxy",
           "raise_error", "tool_names"]


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
