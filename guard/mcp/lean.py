"""A ``tools/call`` as both lean relays handle it (:mod:`.stdio.relay` over stdio, :mod:`.http.relay` over
streamable HTTP): the request as it came (bytes and its parse), judged by :class:`.calls.CallJudge`
as the SDK path judges it, forwarded as it came (or as an approver edited it) through the relay's
transport, and the frame to answer the client with.

What differs between the relays is only how a request reaches the upstream and how the client is
asked (elicitation): each gives them as a :class:`Relayed`.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import mcp_types as types
from mcp.shared.exceptions import MCPError

from . import _frames as wire
from ._frames import error_frame, result_frame, text_item
from .approval import Elicit
from .calls import CallJudge, Forward, Judged, failed_step, ran_step, unknown_tool
from .judge import GuardedSession
from .stops import RESET_TOOL

log = logging.getLogger("forewarn.mcp")


class Relayed(Protocol):
    """What the call handling needs of a lean relay, for one client's session."""

    @property
    def tools(self) -> Mapping[str, frozenset[str]]:
        """The tools the upstream listed so far, each with its arguments' names."""

    @property
    def elicit(self) -> Elicit | None:
        """How to ask the client (None: its ``initialize`` did not declare elicitation)."""

    def session(self) -> GuardedSession:
        """The client's guarded session, opened on first use."""

    async def list_tools(self) -> None:
        """List the upstream's tools again (into :attr:`tools`)."""

    async def exchange(self, message: dict[str, Any], frame: bytes, what: str) -> tuple[bytes, dict[str, Any]]:
        """Send ``frame`` (the request ``message``, or as an approver edited it; ``what`` names it for errors)
        upstream: its answer as it came (bytes) and parsed.

        Raises:
            MCPError: the upstream is down, or did not answer in time.
        """


async def lean_call(judge: CallJudge, relay: Relayed, message: dict[str, Any], frame: bytes, *,
                    lock: AbstractAsyncContextManager[Any], judged: Judged | None = None) -> bytes:
    """The frame that answers the ``tools/call`` request ``message`` (``frame``: its bytes as they came).

    ``lock``: the session's; ``judged``: the call's verdict from :func:`judge_now` (the caller then holds the
    session's turn, and ``lock`` is a no-op)."""
    rid = message["id"]
    tools = relay.tools
    name, args = _name_and_args(message)
    if name is None or args is None:
        return error_frame(rid, types.INVALID_PARAMS, "tools/call needs params.name (a string) and "
                                                      "params.arguments (an object)")
    try:
        if name == RESET_TOOL and judge.gate.lists_reset:  # (gateway: the proxy's own tool, stops.py)
            async with lock:
                return result_frame(rid, await judge.reset_call(relay.session(), relay.elicit))
        judge.gate.check_call(name)  # (gateway: a hidden tool, a refused server: gate.py)
        judge.check_size(name, args)
        if judge.gate.asks(name) is not None:  # (gateway: a finding a person approves first: gate.py)
            await judge.confirm_tool(relay.session(), name, relay.elicit)
        if name not in tools:
            await relay.list_tools()
            if name not in tools:
                raise unknown_tool(name)
        judge.check_names(name, args, tools[name])
        guarded = relay.session()
        async with lock:
            go = await judge.settle(guarded, name, args, elicit=relay.elicit, lists=tools.__contains__,
                                    tools=lambda: sorted(tools), judged=judged)
            if isinstance(go, str):
                return result_frame(rid, {"content": [text_item(go)], "isError": True})
            if go.name != name or go.args is not args:  # an approver's edit: the call as edited
                frame = wire.rewritten({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                        "params": {"name": go.name, "arguments": go.args}})
            return await _run(judge, guarded, go, message, frame, relay)
    except MCPError as exc:
        return error_frame(rid, exc.error.code, exc.error.message)
    except Exception as exc:  # a bug or a sidecar gone: one error for this call, never a hung client
        return failure_frame(rid, name, exc)


def judge_now(judge: CallJudge, relay: Relayed, message: dict[str, Any]
              ) -> tuple[GuardedSession, Forward | Judged] | None:
    """The fast path's judging of the ``tools/call`` request ``message``, which waits for nothing: the
    session and a :class:`.calls.Forward` when the guard allows the call as it came (forward it now, then
    :func:`answered_now`), or the session and the call's verdict (:func:`lean_call` goes on from it:
    ``judged=``). None when the call needs what only :func:`lean_call` does: an answer of its own (bad
    params, too large, a stopped session), listing the tools again, or a sidecar. The caller holds the
    session's turn (one judged call at a time)."""
    name, args = _name_and_args(message)
    tools = relay.tools
    if name is None or args is None or name not in tools or judge.sidecar is not None or judge.gate.blocks(name) \
            or name == RESET_TOOL:  # (gateway: gate.py, stops.py)
        return None
    try:
        judge.check_size(name, args)
        judge.check_names(name, args, tools[name])
    except MCPError:
        return None
    guarded = relay.session()
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
            judge.commit(guarded, go, failed_step(go, answered.error.message))
            return error_frame(rid, answered.error.code, answered.error.message)
        answer_frame, answer = answered
        if "error" in answer:  # the upstream's own error, unchanged
            judge.commit(guarded, go, failed_step(go, error_text(answer)))
            return answer_frame
        result = _result(answer)
        after = judge.commit(guarded, go, ran_step(go, bool(result.get("isError")), wire.text_of(result)))
        return _answer(judge, guarded, rid, go, answer_frame, result, judge.words_after(guarded, after))
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


def tools_listed(judge: CallJudge, server: str, tools: dict[str, frozenset[str]], answer: dict[str, Any],
                 frame: bytes) -> tuple[bytes, dict[str, Any]]:
    """The one place where a ``tools/list`` answer passes back to the client, on either lean relay (``frame``:
    the upstream's answer as it came; ``answer``: its parse; ``server``: the upstream's key for its pins,
    :func:`.pinning.server_key`): the gate judges its descriptions, pins its tools and lists ``forewarn_reset``
    (:mod:`.gate`), the tools it lets through are learnt into ``tools`` (each with its arguments' names), and
    the answer the client gets is returned (its frame and parse: an error when the gate refuses the server).
    (A ``tools/call`` result passes back in one place too: :func:`_answer`.)"""
    frame, answer = judge.gate.listed_frame(server, answer, frame)  # (gateway: descriptions judged, tools pinned)
    tools.update(wire.tool_arguments(answer))
    return frame, answer


def failure_frame(rid: Any, name: str, exc: Exception) -> bytes:
    log.error("tools/call %r failed in the proxy", name, exc_info=exc)
    return error_frame(rid, types.INTERNAL_ERROR, f"the proxy failed on the call to {name!r}: {exc}")


def _name_and_args(message: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    params = message.get("params")
    if not isinstance(params, dict):
        return None, None
    name, args = params.get("name"), params.get("arguments") or {}
    return (name if isinstance(name, str) else None), (args if isinstance(args, dict) else None)


async def _run(judge: CallJudge, guarded: GuardedSession, go: Forward, message: dict[str, Any], frame: bytes,
               relay: Relayed) -> bytes:
    # the call's span and audit row are written in the loop's next turn: after the request left, while the
    # upstream works (forward writes it before it first waits)
    asyncio.get_running_loop().call_soon(judge.forwarded, guarded, go)
    try:
        answer_frame, answer = await relay.exchange(message, frame, f"tools/call {go.name!r}")
    except MCPError as exc:
        await judge.finish(guarded, go, failed_step(go, exc.error.message))
        raise
    if "error" in answer:  # the upstream's own error, unchanged
        await judge.finish(guarded, go, failed_step(go, error_text(answer)))
        return answer_frame
    result = _result(answer)
    after = await judge.finish(guarded, go, ran_step(go, bool(result.get("isError")), wire.text_of(result)))
    return _answer(judge, guarded, message["id"], go, answer_frame, result, judge.words_after(guarded, after))


def error_text(answer: dict[str, Any]) -> str:
    """What an upstream's error answer says, as a failed step records it."""
    error = answer["error"]  # (an upstream's error that is not an object is passed on, and committed as a failure)
    return str(error.get("message", "") if isinstance(error, dict) else error)


def _result(answer: dict[str, Any]) -> dict[str, Any]:
    return answer["result"] if isinstance(answer.get("result"), dict) else {}


def _answer(judge: CallJudge, guarded: GuardedSession, rid: Any, go: Forward, answer_frame: bytes,
            result: dict[str, Any], words: str | None) -> bytes:
    """The upstream's answer to a call that ran, as the client gets it: as it came, or with the guard's words
    after it (the state it led to) and what the approvers changed, and its secrets redacted where the config
    asks (after the guard read it: gate.py). The one place where a ``tools/call`` result passes back to the
    client, on either lean relay (fast path or not)."""
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
