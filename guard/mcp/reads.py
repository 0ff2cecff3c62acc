"""``resources/read`` and ``prompts/get`` judged as steps, on every path (the lean relays and the SDK path).

What a resource or a prompt holds enters the agent's context as a tool's result does (a ``.env`` read as a
resource is a secret read all the same), so each is a step the guard judges before it is forwarded and
records once it ran: a call of the tool :func:`.config.resource_tool` (arguments ``{"uri": URI}``) or
:func:`.config.prompt_tool` (the prompt's arguments), whose kind comes from ``resource_kinds`` and
``prompt_kinds`` and, when it has none, whose verdict is ``unknown_resources`` or ``unknown_prompts``.
It goes through :meth:`.calls.CallJudge.settle` as a tool call does (asked, held back, stopped alike);
a read the guard does not let through is answered with a JSON-RPC error (:data:`HELD_BACK`) — these
methods have no ``isError`` result to say it in. What a read brought is redacted as a call's result is
(``redact:``; :meth:`.gate.ToolGate.redact_read`), after the guard has read it as it came.
"""
from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from ._frames import error_frame, rewritten
from .approval import Elicit
from .calls import CallJudge, Forward, failed_step, ran_step
from .config import prompt_tool, resource_tool
from .gate import result_frame
from .judge import GuardedSession
from .lean import Relayed, error_text, failure_frame

HELD_BACK = -32012  # a resources/read or prompts/get the guard held back, or a human refused: it did not run
READS = frozenset({"resources/read", "prompts/get"})
_RESOURCE, _PROMPT = resource_tool(""), prompt_tool("")

def step_of(method: str, params: Any) -> tuple[str, dict[str, Any]]:
    """The step a read is judged as: its tool's name and arguments.

    Raises:
        MCPError: ``-32602``, the params lack what the method needs.
    """
    params = params if isinstance(params, dict) else {}
    if method == "resources/read":
        uri = params.get("uri")
        if isinstance(uri, str):
            return resource_tool(uri), {"uri": uri}
        raise MCPError(types.INVALID_PARAMS, "resources/read needs params.uri (a string)")
    name, args = params.get("name"), params.get("arguments") or {}
    if isinstance(name, str) and isinstance(args, dict):
        return prompt_tool(name), args
    raise MCPError(types.INVALID_PARAMS, "prompts/get needs params.name (a string) and params.arguments "
                                         "(an object, if given)")


def params_of(method: str, go: Forward) -> dict[str, Any]:
    """The params of the read to forward, as the judging let it through (an approver may edit a prompt's
    arguments; a resource's URI is its tool's name, which an edit cannot change)."""
    if method == "resources/read":
        return {"uri": go.args["uri"]}
    return {"name": go.name.removeprefix(_PROMPT), "arguments": go.args}


async def settle_read(judge: CallJudge, guarded: GuardedSession, name: str, args: dict[str, Any], *,
                      elicit: Elicit | None) -> Forward:
    """Judge a read (as :meth:`.calls.CallJudge.settle` a call) until it is to be forwarded. The caller holds
    the session's lock.

    Raises:
        MCPError: :data:`HELD_BACK` with the guard's or the approvers' words; ``SESSION_STOPPED``.
    """
    go = await judge.settle(guarded, name, args, elicit=elicit, lists=name.__eq__, tools=lambda: [name])
    if isinstance(go, str):
        raise MCPError(HELD_BACK, go)
    uri = name.removeprefix(_RESOURCE) if name.startswith(_RESOURCE) else None
    if uri is not None and go.args != {"uri": uri}:  # (its kind is its URI's: the URI judged is the one read)
        raise MCPError(HELD_BACK, f"an approver's edit changed the URI of resources/read {uri[:100]!r}; it did not run")
    return go


def read_text(method: str, result: Any) -> str:
    """The text a read brought, as the state after it reads it: a resource's text contents, a prompt's text
    messages (a blob is not read, as an image a tool returns is not)."""
    if not isinstance(result, dict):
        return ""
    if method == "resources/read":
        return "\n".join(c["text"] for c in result.get("contents") or []
                         if isinstance(c, dict) and isinstance(c.get("text"), str))
    contents = (m.get("content") for m in result.get("messages") or [] if isinstance(m, dict))
    return "\n".join(c["text"] for c in contents if isinstance(c, dict) and isinstance(c.get("text"), str))


async def lean_read(judge: CallJudge, relay: Relayed, message: dict[str, Any], frame: bytes, *,
                    lock: AbstractAsyncContextManager[Any]) -> bytes:
    """The frame that answers the read request ``message`` in a lean relay (``frame``: the bytes to forward
    when the judging lets it through as it came); the arguments as :func:`.lean.lean_call`'s."""
    rid, method = message["id"], message["method"]
    name = method
    try:
        name, args = step_of(method, message.get("params"))
        judge.check_size(name, args)
        guarded = relay.session()
        async with lock:
            go = await settle_read(judge, guarded, name, args, elicit=relay.elicit)
            if go.args is not args:  # an approver's edit
                frame = rewritten({"jsonrpc": "2.0", "id": rid, "method": method, "params": params_of(method, go)})
            # (its span and audit row once the request left, as a call's)
            asyncio.get_running_loop().call_soon(judge.forwarded, guarded, go)
            try:
                answer_frame, answer = await relay.exchange(message, frame, f"{method} {name.split(':', 1)[1][:100]!r}")
            except MCPError as exc:
                await judge.finish(guarded, go, failed_step(go, exc.error.message))
                raise
            if "error" in answer:  # the upstream's own error, unchanged
                await judge.finish(guarded, go, failed_step(go, error_text(answer)))
            else:
                result = answer.get("result")
                await judge.finish(guarded, go, ran_step(go, False, read_text(method, result)))
                if isinstance(result, dict):  # (gateway: redacted after the guard read it as it came: gate.py)
                    redacted, records = judge.gate.redact_read(guarded.id, method, go.name, result)
                    if records:
                        return result_frame(rid, dict(redacted))
            return answer_frame
    except MCPError as exc:
        return error_frame(rid, exc.error.code, exc.error.message)
    except Exception as exc:  # a bug or a sidecar gone: one error for this read, never a hung client
        return failure_frame(rid, name, exc)
