"""A ``tools/call`` as both lean relays handle it (:mod:`.relay` over stdio, :mod:`.http_relay` over
streamable HTTP): the request as it came (bytes and its parse), judged by :class:`.calls.CallJudge`
as the SDK path judges it, forwarded as it came (or as an approver edited it) through the relay's
transport, and the frame to answer the client with.

What differs between the relays is only how a request reaches the upstream and how the client is
asked (elicitation): they pass those in.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
import orjson
from mcp.shared.exceptions import MCPError

from . import _frames as wire
from ._frames import error_frame, result_frame, text_item
from .approval import Elicit
from .calls import CallJudge, Forward
from .judge import GuardedSession

__all__ = ["lean_call", "Forwarder"]

log = logging.getLogger("forewarn.mcp")

# sends a tools/call request (a JSON-RPC frame; the tool it calls) upstream: its answer as it came (bytes)
# and parsed; raises MCPError when the upstream is down or does not answer in time
Forwarder = Callable[[bytes, str], Awaitable[tuple[bytes, dict[str, Any]]]]


async def lean_call(judge: CallJudge, message: dict[str, Any], frame: bytes, *, session: Callable[[], GuardedSession],
                    lock: asyncio.Lock, tools: set[str], list_tools: Callable[[], Awaitable[None]],
                    elicit: Elicit | None, forward: Forwarder) -> bytes:
    """The frame that answers the ``tools/call`` request ``message`` (``frame``: its bytes as they came).

    ``session``: the client's guarded session (opened on first use); ``lock``: the session's;
    ``tools``: the tools the upstream listed so far, ``list_tools`` refreshes them; ``elicit``: how to ask
    the client (None: it did not declare elicitation)."""
    rid = message["id"]
    params = message.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    args = (params.get("arguments") or {}) if isinstance(params, dict) else None
    if not isinstance(name, str) or not isinstance(args, dict):
        return error_frame(rid, types.INVALID_PARAMS, "tools/call needs params.name (a string) and "
                                                      "params.arguments (an object)")
    try:
        judge.check_size(name, args)
        if name not in tools:
            await list_tools()
            if name not in tools:
                raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name} (no upstream of this proxy lists it)")
        guarded = session()
        async with lock:
            go = await judge.settle(guarded, name, args, elicit=elicit, lists=tools.__contains__,
                                    tools=lambda: sorted(tools))
            if isinstance(go, str):
                return result_frame(rid, {"content": [text_item(go)], "isError": True})
            if go.name != name or go.args is not args:  # an approver's edit: the call as edited
                frame = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                      "params": {"name": go.name, "arguments": go.args}})
            return await _run(judge, guarded, go, rid, frame, forward)
    except MCPError as exc:
        return error_frame(rid, exc.error.code, exc.error.message)
    except Exception as exc:  # a bug or a sidecar gone: one error for this call, never a hung client
        log.exception("tools/call %r failed in the proxy", name)
        return error_frame(rid, types.INTERNAL_ERROR, f"the proxy failed on the call to {name!r}: {exc}")


async def _run(judge: CallJudge, guarded: GuardedSession, go: Forward, rid: Any, frame: bytes,
               forward: Forwarder) -> bytes:
    # the call's span and audit row are written in the loop's next turn: after the request left, while the
    # upstream works (forward writes it before it first waits)
    asyncio.get_running_loop().call_soon(judge.forwarded, guarded, go)
    try:
        answer_frame, answer = await forward(frame, go.name)
    except MCPError as exc:
        await judge.failed(guarded, go, exc.error.message)
        raise
    if "error" in answer:  # the upstream's own error, unchanged
        error = answer["error"]
        await judge.failed(guarded, go, str(error.get("message", "") if isinstance(error, dict) else error))
        return answer_frame
    result: dict[str, Any] = answer["result"] if isinstance(answer.get("result"), dict) else {}
    words = await judge.ran(guarded, go, bool(result.get("isError")), wire.text_of(result))
    if words is None and not go.edits:
        return answer_frame  # as the upstream said it
    content = list(result.get("content") or [])
    if words is not None:
        content.append(text_item(words))
    if go.edits:
        content.insert(0, text_item(" ".join(go.edits)))
    return result_frame(rid, {**result, "content": content})
