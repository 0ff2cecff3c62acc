"""JSON-RPC frames as the lean relay (:mod:`.stdio.relay`) reads and writes them: bytes, parsed with orjson."""
from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

import mcp_types as types
import orjson
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from .._version import __version__
from ._lines import escape_breaks, plain
from .calls import INSTRUCTIONS, SERVER_NAME, SERVER_TITLE, shown

__all__ = ["plain"]  # names other modules import through this one


MAX_CALLS = 256  # tools/call requests of one session under way at once, in either lean relay
JUDGED = frozenset({"tools/call", "resources/read", "prompts/get"})  # the requests the guard judges, as steps


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

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()

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


def invalid(message: dict[str, Any], method: Any) -> str | None:
    """Why a JSON-RPC 2.0 object (``method``: its method) is no MCP message the relays pass on, or None.

    The relays route on a message's shape and forward its bytes, so what they cannot route is refused
    here, at once, rather than left for the upstream to ignore while the client waits: a request's id is a
    string or an integer (MCP; never null), and a request the guard judges (:data:`JUDGED`: ``tools/call``,
    ``resources/read``, ``prompts/get``) is always a request — as a notification it would reach the upstream
    unjudged (JSON-RPC servers run notifications; they only do not answer them).
    Nor may a name the relays read (``method``, ``params``, a call's ``name`` and ``arguments`` …) come in
    another case as well: a parser that matches names regardless of case (Go's ``encoding/json``: ``Method``,
    ``paramſ``) would read the call from the variant, not the one judged (CVE-2026-27896).
    """
    if (variant := _variant(message, _MEMBERS)) is not None:
        return variant
    if method is None:
        return None if "id" in message and ("result" in message or "error" in message) else \
            "neither a request, a notification nor an answer"
    if type(method) is not str:
        return "its method is not a string"
    if "id" in message:
        rid = message["id"]
        kind = type(rid)
        # (orjson reads an integer beyond 64 bits as a float: one that large is taken for an integer)
        if not (kind is str or kind is int or (kind is float and abs(rid) >= 2.0 ** 63)):
            return f"the id of a request is a string or an integer, not {shown(rid)}"
    elif method in JUDGED:
        return f"a {method} must carry an id (as a notification it would run unjudged); not forwarded"
    if method in JUDGED and isinstance(params := message.get("params"), dict):
        return _variant(params, _CALL_PARAMS)
    return None


_MEMBERS = frozenset({"jsonrpc", "id", "method", "params", "result", "error"})
_CALL_PARAMS = frozenset({"name", "arguments", "_meta", "uri"})  # (of a tools/call, prompts/get, resources/read)


def _variant(members: dict[str, Any], names: frozenset[str]) -> str | None:
    for key in members:
        if key not in names and key.casefold() in names:  # (casefold: also ſ → s and K → k, as Go folds them)
            return (f"{shown(key)} is no name of the protocol's but reads as {key.casefold()!r} where case is "
                    f"ignored (names are case-sensitive); not forwarded")
    return None


# -- what the relays forward: the value they judged (:mod:`._lines`: where readers cut lines) -----------------

def rewritten(message: Any) -> bytes:
    """``message`` as one line (newline-terminated) that every reader cuts as one: orjson's encoding (no
    whitespace; control characters escaped in strings) with NEL, U+2028 and U+2029 escaped too — there they
    can only stand in strings, where an escape means the same character.

    Raises:
        TypeError: orjson cannot write it (nested deeper than 254 levels, which it reads up to 1024).
    """
    return escape_breaks(orjson.dumps(message)) + b"\n"


def unwritable(method: Any, exc: TypeError) -> tuple[int, str]:
    """The error for a message :func:`rewritten` cannot write (nested deeper than orjson writes): -32602 for a
    request the guard judges (its params cannot be read, as :meth:`.calls.CallJudge.check_size` says), else
    -32600. Never its bytes as they came instead: they are what is not judged."""
    code = types.INVALID_PARAMS if method in JUDGED else types.INVALID_REQUEST
    return code, f"the message cannot be written again to be forwarded: {exc} (nested too deep); not forwarded"


def batch_problem(items: list[Any], body: bytes, version: str | None) -> str | None:
    """Why a JSON-RPC batch (``items``, parsed from ``body``) is not forwarded, or None. MCP allowed batches in
    protocol 2025-03-26 only (``version``: the session's; None: not told, which the streamable HTTP transport
    reads as 2025-03-26); a batch inside a batch and a key written twice in an object are never valid, and a
    request the guard judges must come alone (its answer is read and committed, and one judged call runs at a
    time)."""
    if version is not None and version != "2025-03-26":
        return (f"a JSON-RPC batch, which MCP protocol {version} does not allow (batches were removed in "
                f"2025-06-18); send each message alone")
    if not items:
        return "an empty JSON-RPC batch"
    for item in items:
        if not isinstance(item, dict):
            return f"in the batch, {shown(item)} is no JSON-RPC message (a batch holds objects only)"
        if item.get("method") in JUDGED:
            return f"a JSON-RPC batch may not carry {item['method']} through this proxy; send each call alone"
        if (problem := invalid(item, item.get("method"))) is not None:
            return f"in the batch, {problem}"
    if (twice := _twice(body)) is not None:
        return f"in the batch, the key {shown(twice)} is written twice in one object (readers differ on which counts)"
    return None


def _twice(body: bytes) -> str | None:
    """A key written twice in one object of the JSON document ``body``, or None (Python's parser: slow, and
    only batches, which are rare, pay it)."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and not found:
                found.append(key)
            seen.add(key)
        return dict(items)

    json.loads(body, object_pairs_hook=pairs)
    return found[0] if found else None


def taken(rid: Any) -> str:
    """Why a request is refused while another of its session with its id is under way (answers go by id)."""
    return f"Invalid Request: id {shown(rid)} is taken by a request still under way"


def too_many(limit: int) -> str:
    """Why a ``tools/call`` is refused past ``limit`` of its session's under way (:data:`MAX_CALLS`)."""
    return f"Invalid Request: {limit} calls of this session are under way already"


def legal_id(message: dict[str, Any]) -> Any:
    """The message's id when it is one an answer can carry (a string or an integer), else None (JSON-RPC's
    id of an error about a message whose id is unusable)."""
    rid = message.get("id")
    return rid if type(rid) is str or type(rid) is int else None


def error_frame(rid: Any, code: int, message: str) -> bytes:
    # (escaped: a message quotes the client's own words, a result carries the upstream's, to a client reading lines)
    return escape_breaks(orjson.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})) + b"\n"


def result_frame(rid: Any, result: dict[str, Any]) -> bytes:
    return escape_breaks(orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result})) + b"\n"


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
        code = error.get("code")
        raise MCPError(code if type(code) is int else types.INTERNAL_ERROR, str(error.get("message", "")))


def elicit_result(answer: dict[str, Any]) -> types.ElicitResult:
    """The client's answer to a question of the relay's (``elicitation/create``).

    Raises:
        MCPError: the answer is an error, or no elicitation result (the call is then refused: asking failed).
    """
    raise_error(answer)
    try:
        return types.ElicitResult.model_validate(answer.get("result") or {})
    except ValidationError as exc:
        raise MCPError(types.INVALID_PARAMS, f"the answer is no elicitation result: "
                                             f"{' '.join(str(exc).split())[:200]}") from None


def tool_arguments(message: dict[str, Any]) -> dict[str, frozenset[str]]:
    """The tools a ``tools/list`` answer lists, each with the names of the arguments its input schema declares."""
    result = message.get("result")
    tools = result.get("tools") if isinstance(result, dict) else None
    return {t["name"]: declared(t.get("inputSchema")) for t in tools or []
            if isinstance(t, dict) and isinstance(t.get("name"), str)}


def declared(schema: Any) -> frozenset[str]:
    """The names of the arguments a tool's input schema declares (its ``properties``)."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return frozenset(k for k in properties if isinstance(k, str)) if isinstance(properties, dict) else frozenset()
