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
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from . import _frames as wire
from ._frames import error_frame, result_frame, text_item
from .approval import Elicit
from .calls import CallJudge, Forward, Judged, unknown_tool
from .judge import GuardedSession
from .stops import RESET_TOOL

__all__ = ["lean_call", "judge_now", "answered_now", "Answered", "failure_frame", "Forwarder"]

log = logging.getLogger("forewarn.mcp")

# sends a tools/call request (a JSON-RPC frame; the tool it calls) upstream: its answer as it came (bytes)
# and parsed; raises MCPError when the upstream is down or does not answer in time
Forwarder = Callable[[bytes, str], Awaitable[tuple[bytes, dict[str, Any]]]]


async def lean_call(judge: CallJudge, message: dict[str, Any], frame: bytes, *, session: Callable[[], GuardedSession],
                    lock: AbstractAsyncContextManager[Any], tools: Mapping[str, frozenset[str]],
                    list_tools: Callable[[], Awaitable[None]],
                    elicit: Elicit | None, forward: Forwarder, judged: Judged | None = None) -> bytes:
    """The frame that answers the ``tools/call`` request ``message`` (``frame``: its bytes as they came).

    ``session``: the client's guarded session (opened on first use); ``lock``: the session's;
    ``tools``: the tools the upstream listed so far (each with its arguments' names), ``list_tools`` refreshes them; ``elicit``: how to ask
    the client (None: it did not declare elicitation); ``judged``: the call's verdict from :func:`judge_now`
    (the caller then holds the session's turn, and ``lock`` is a no-op)."""
    rid = message["id"]
    name, args = _name_and_args(message)
    if name is None or args is None:
        return error_frame(rid, types.INVALID_PARAMS, "tools/call needs params.name (a string) and "
                                                      "params.arguments (an object)")
    try:
        if name == RESET_TOOL and judge.gate.lists_reset:  # (gateway: the proxy's own tool, stops.py)
            async with lock:
                return result_frame(rid, await judge.reset_call(session(), elicit))
        judge.gate.check_call(name)  # (gateway: a hidden tool, a refused server: gate.py)
        judge.check_size(name, args)
        if judge.gate.asks(name) is not None:  # (gateway: a finding a person approves first: gate.py)
            await judge.confirm_tool(session(), name, elicit)
        if name not in tools:
            await list_tools()
            if name not in tools:
                raise unknown_tool(name)
        judge.check_names(name, args, tools[name])
        guarded = session()
        async with lock:
            go = await judge.settle(guarded, name, args, elicit=elicit, lists=tools.__contains__,
                                    tools=lambda: sorted(tools), judged=judged)
            if isinstance(go, str):
                return result_frame(rid, {"content": [text_item(go)], "isError": True})
            if go.name != name or go.args is not args:  # an approver's edit: the call as edited
                frame = wire.rewritten({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                        "params": {"name": go.name, "arguments": go.args}})
            return await _run(judge, guarded, go, rid, frame, forward)
    except MCPError as exc:
        return error_frame(rid, exc.error.code, exc.error.message)
    except Exception as exc:  # a bug or a sidecar gone: one error for this call, never a hung client
        return failure_frame(rid, name, exc)


def judge_now(judge: CallJudge, message: dict[str, Any], *, session: Callable[[], GuardedSession],
              tools: Mapping[str, frozenset[str]]) -> tuple[GuardedSession, Forward | Judged] | None:
    """The fast path's judging of the ``tools/call`` request ``message``, which waits for nothing: the
    session and a :class:`.calls.Forward` when the guard allows the call as it came (forward it now, then
    :func:`answered_now`), or the session and the call's verdict (:func:`lean_call` goes on from it:
    ``judged=``). None when the call needs what only :func:`lean_call` does: an answer of its own (bad
    params, too large, a stopped session), listing the tools again, or a sidecar. The caller holds the
    session's turn (one judged call at a time)."""
    name, args = _name_and_args(message)
    if name is None or args is None or name not in tools or judge.sidecar is not None or judge.gate.blocks(name) \
            or name == RESET_TOOL:  # (gateway: gate.py, stops.py)
        return None
    try:
        judge.check_size(name, args)
        judge.check_names(name, args, tools[name])
    except MCPError:
        return None
    guarded = session()
    if guarded.stopped is not None:
        return None
    return guarded, judge.judge_now(guarded, name, args)


def answered_now(judge: CallJudge, guarded: GuardedSession, go: Forward, rid: Any,
                 answered: tuple[bytes, dict[str, Any]] | BaseException) -> bytes:
    """The frame that answers the client for a call the fast path forwarded (:func:`judge_now`): the upstream's
    answer (its bytes and parse), or the MCPError that ended the wait; committed with nothing to wait for."""
    try:
        if isinstance(answered, BaseException):
            if not isinstance(answered, MCPError):
                raise answered
            judge.failed_now(guarded, go, answered.error.message)
            return error_frame(rid, answered.error.code, answered.error.message)
        answer_frame, answer = answered
        if "error" in answer:  # the upstream's own error, unchanged
            judge.failed_now(guarded, go, _error_text(answer))
            return answer_frame
        result = _result(answer)
        words = judge.ran_now(guarded, go, bool(result.get("isError")), wire.text_of(result))
        return _answer(judge, guarded, rid, go, answer_frame, result, words)
    except Exception as exc:  # a bug: one error for this call, never a hung client
        return failure_frame(rid, go.name, exc)


class Answered:
    """Where the upstream's answer to a call forwarded on the fast path goes (a :class:`._frames.Sink`): committed
    (:func:`answered_now`) in the callback that met it — the answer, the call's timeout or the upstream's
    end — with no task to wake, and the frame for the client handed to ``reply``; ``reply(None)`` when
    ``gone()`` says the client has left (nothing is committed then, as for a call cancelled on the slow path)."""

    __slots__ = ("_done", "_go", "_gone", "_guarded", "_judge", "_reply", "_rid")

    def __init__(self, judge: CallJudge, guarded: GuardedSession, go: Forward, rid: Any, *,
                 reply: Callable[[bytes | None], None], gone: Callable[[], bool]) -> None:
        self._judge, self._guarded, self._go, self._rid = judge, guarded, go, rid
        self._reply, self._gone, self._done = reply, gone, False

    def done(self) -> bool:
        return self._done

    def set_result(self, answer: tuple[bytes, dict[str, Any]], /) -> None:
        self._finish(answer)

    def set_exception(self, exc: BaseException, /) -> None:
        self._finish(exc)

    def _finish(self, answered: tuple[bytes, dict[str, Any]] | BaseException) -> None:
        if self._done:
            return
        self._done = True
        frame = None
        try:
            if not self._gone():
                frame = answered_now(self._judge, self._guarded, self._go, self._rid, answered)
        finally:
            self._reply(frame)


def failure_frame(rid: Any, name: str, exc: Exception) -> bytes:
    log.error("tools/call %r failed in the proxy", name, exc_info=exc)
    return error_frame(rid, types.INTERNAL_ERROR, f"the proxy failed on the call to {name!r}: {exc}")


def _name_and_args(message: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    params = message.get("params")
    if not isinstance(params, dict):
        return None, None
    name, args = params.get("name"), params.get("arguments") or {}
    return (name if isinstance(name, str) else None), (args if isinstance(args, dict) else None)


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
        await judge.failed(guarded, go, _error_text(answer))
        return answer_frame
    result = _result(answer)
    words = await judge.ran(guarded, go, bool(result.get("isError")), wire.text_of(result))
    return _answer(judge, guarded, rid, go, answer_frame, result, words)


def _error_text(answer: dict[str, Any]) -> str:
    error = answer["error"]  # (an upstream's error that is not an object is passed on, and committed as a failure)
    return str(error.get("message", "") if isinstance(error, dict) else error)


def _result(answer: dict[str, Any]) -> dict[str, Any]:
    return answer["result"] if isinstance(answer.get("result"), dict) else {}


def _answer(judge: CallJudge, guarded: GuardedSession, rid: Any, go: Forward, answer_frame: bytes,
            result: dict[str, Any], words: str | None) -> bytes:
    """The upstream's answer to a call that ran, as the client gets it: as it came, or with the guard's words
    after it (the state it led to) and what the approvers changed, and its secrets redacted where the config
    asks (after the guard read it: gate.py)."""
    redacted, records = judge.gate.redact(guarded.id, go.name, result)
    if words is None and not go.edits and not records:
        return answer_frame  # as the upstream said it
    result = dict(redacted)
    content = list(result.get("content") or [])
    if words is not None:
        content.append(text_item(words))
    if go.edits:
        content.insert(0, text_item(" ".join(go.edits)))
    return result_frame(rid, {**result, "content": content})
