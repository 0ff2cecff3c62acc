"""The lean relay: ``forewarn mcp --relay lean``, stdio in front of ONE stdio upstream, frames passed as bytes.

The SDK path (:mod:`.proxy`) is a second MCP server and a second MCP client: every message is parsed,
validated, rebuilt as SDK models and serialised again on each side. Here each newline-delimited JSON-RPC
message is parsed once (orjson) to route it, and everything but a judged request (``tools/call``,
``resources/read``, ``prompts/get``) goes on — the client's re-serialised from the value read (one ``dumps``:
no other reading of its bytes reaches the upstream, :mod:`._lines`), the upstream's as the bytes that came
in unless a client may cut them elsewhere — both ways: requests, responses, notifications, the upstream's
own requests to the client (sampling, roots, elicitation). The handshake is the client's with the upstream (its answer
carries the proxy's name and instructions). A ``tools/call`` is judged by the SDK path's code
(:class:`.calls.CallJudge`), then forwarded as it came (or as an approver edited it) or answered by the
relay. Asking uses elicitation when the client's ``initialize`` declared it: the relay's own requests
to the client carry ids of its own (``forewarn-R-N``, R random), whose answers it keeps. Every forwarded request
gets the call timeout (:data:`.upstream.UPSTREAM_TIMEOUT`); when the upstream's process ends, what it
held fails with :data:`.upstream.UPSTREAM_DOWN` and it is started again (the client's handshake
replayed), up to ``restarts`` times, as :mod:`.upstream` does.

Both ends are read by protocols (:mod:`._pipes`): each line is relayed in the
callback that read it, with no task to wake. A call the guard allows as it came is judged and written
to the upstream in that callback, and its answer committed and written to the client in the callback
that reads it (the fast path); asking a human, an unlisted tool, a sidecar, a call while another is
under way, or an upstream restarting take a task of their own. Flow control: while one side's pipe is
full, the other side is not read.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import Coroutine
from contextlib import nullcontext
from functools import partial
from typing import Any

import mcp_types as types
import orjson
from mcp.shared.exceptions import MCPError

from ....errors import ConfigError
from .. import _frames as wire
from .._frames import MAX_CALLS, Pending, Sink, Turn, drained, error_frame
from ..approval import APPROVAL_SCHEMA, Elicit
from ..calls import CallJudge, Forward, Judged
from ..judge import GuardedSession
from ..lean import Answered, judge_now, lean_call, tools_listed
from ..pinning import server_key
from ..reads import lean_read
from ..upstream import UPSTREAM_DOWN, UPSTREAM_TIMEOUT
from ._pipes import ClientEnd, Flow, UpstreamEnd
from ._transport import LINE_LIMIT, Overlong

log = logging.getLogger("forewarn.mcp")

_CONNECT_TIMEOUT = 30.0
_OWN = "forewarn-"  # the prefix of the ids of the relay's own requests


def lean_relay_fits(judge: CallJudge) -> bool:
    """Whether the lean relay can serve this proxy: one upstream, launched as a command (stdio)."""
    upstreams = judge.config.upstreams
    return len(upstreams) == 1 and upstreams[0].command is not None


class LeanRelay:
    """Relays one client (its stdio) to the single stdio upstream of ``judge``'s config; ``limit``: the longest
    line read from either (a longer one is read past and refused)."""

    def __init__(self, judge: CallJudge, *, limit: int = LINE_LIMIT) -> None:
        if not lean_relay_fits(judge):
            raise ConfigError("the lean relay serves exactly one upstream launched as a command (stdio)")
        self.judge = judge
        self.limit = limit
        self.spec = judge.config.upstreams[0]
        self.name = self.spec.name
        self.timeout = self.spec.timeout or judge.config.call_timeout
        self._server = server_key(self.name, self.spec.describe())  # (its tools' pins: pinning.py)
        self.connections = 0
        self._proc: UpstreamEnd | None = None
        self._ready = asyncio.Event()
        self._down: str | None = None
        self._closing = False
        self._pending: dict[bytes, Pending] = {}  # by id (as orjson writes it)
        self._calls: set[bytes] = set()  # the ids of the client's tools/call requests under way (judged, forwarded)
        self._mine: dict[str, asyncio.Future[dict[str, Any]]] = {}  # the relay's requests to the client
        self._ids = itertools.count(1)
        # the ids of its questions to the client: its requests to the upstream show the upstream its counter, and a
        # request of the upstream's carrying a question's id would have the client's answer to it taken for the
        # relay's (an approval the human gave to the upstream's question)
        self._asking = f"{_OWN}{secrets.token_hex(8)}-"
        self.tools: dict[str, frozenset[str]] = {}  # as the upstream listed them: each with its arguments' names
        self._init: dict[str, Any] | None = None  # the client's initialize request, replayed after a restart
        self._initialized: bytes | None = None
        self._elicits = False
        self._guarded: GuardedSession | None = None
        self._turn = Turn()  # one judged call at a time, as the SDK path's session lock
        self._client: asyncio.StreamWriter | None = None
        self._client_in: ClientEnd | None = None
        self._waiting = 0  # requests waiting for the upstream to be up again (later ones queue behind them)
        self._tasks: set[asyncio.Task[None]] = set()
        self._flow = Flow(self._spawn_task)

    # -- running ------------------------------------------------------------------------

    def client_side(self) -> asyncio.Protocol:
        """The protocol that reads the client's end (standard input; a socket in tests): connect it, then
        :meth:`serve`. Each line is relayed in the callback that read it; nothing is read before
        :meth:`serve` has started the upstream."""
        if self._client_in is None:
            self._client_in = ClientEnd(self._client_line, self._client_line_too_long, self.limit)
        return self._client_in

    async def serve(self, writer: asyncio.StreamWriter) -> None:
        """Relay until the client closes its end (read by :meth:`client_side`'s protocol; ``writer``: the
        client's other direction).

        Raises:
            ConfigError: the upstream could not be started (its command is missing, or its process
                ended before it ever answered, ``restarts`` + 1 times), as the SDK path reports it.
        """
        client_in = self._client_in
        if client_in is None:
            raise RuntimeError("connect LeanRelay.client_side() to the client's end before serve()")
        self._client = self._flow.client = writer
        self._flow.client_in = client_in
        await self._spawn()
        self._ready.set()
        supervisor = asyncio.create_task(self._supervise())
        client_in.reading(True)
        try:
            await asyncio.wait((supervisor, client_in.ended), return_when=asyncio.FIRST_COMPLETED)
            if supervisor.done() and supervisor.exception() is not None:
                await drained(writer)  # (the errors of what was pending reach the client first)
                raise supervisor.exception()  # type: ignore[misc]
        finally:
            self._closing = self._flow.closing = True
            client_in.reading(False)
            for task in list(self._tasks):
                task.cancel()
            supervisor.cancel()
            if self._guarded is not None:  # (first: nothing that waits comes before it)
                self.judge.close_session(self._guarded, "client disconnected")
            if self._proc is not None:
                await self._proc.stop()

    async def _spawn(self) -> None:
        self._proc = await UpstreamEnd.start(self.spec, self._upstream_line, partial(self._flow.hold, "upstream"),
                                             self._upstream_line_too_long, self.limit)
        self.connections += 1

    async def _supervise(self) -> None:
        """Read the upstream's messages; when its process ends, fail what it held and start it again.
        A process that ends before it ever answered did not start: after ``restarts`` + 1 such tries
        since launch, the relay stops (:meth:`serve` raises), as the SDK path refuses to serve."""
        failures, came_up = 0, False
        while True:
            proc = self._proc
            assert proc is not None
            code = await proc.ended()  # (its lines go to _from_upstream as they come: UpstreamEnd)
            answered = proc.answered
            came_up = came_up or answered
            if self._closing:
                return
            proc.transport.close()
            self._ready.clear()
            failures = 0 if answered else failures + 1
            if not came_up and failures > self.judge.config.restarts:
                reason = (f"upstream {self.name!r} ({self.spec.describe()}) could not be started: its process "
                          f"exited with code {code} before it answered, {failures} time(s)")
                self._give_up(reason)
                self._fail_pending(reason, down=True)
                raise ConfigError(reason)
            self._fail_pending(f"its process exited with code {code}")
            if came_up and self.connections > self.judge.config.restarts:
                self._give_up(f"upstream {self.name!r} ({self.spec.describe()}) crashed and was restarted "
                              f"{self.judge.config.restarts} time(s), its limit; it is down")
                return
            if answered:
                log.warning("upstream %r lost its connection; reconnecting", self.name)
            else:
                log.warning("upstream %r: its process exited with code %s before it answered; starting it again",
                            self.name, code)
            await asyncio.sleep(min(0.1 * 2 ** failures, 2.0))
            try:
                await self._spawn()
            except ConfigError as exc:
                self._give_up(str(exc))
                return
            self._spawn_task(self._handshake())  # its answer comes through _from_upstream

    async def _handshake(self) -> None:
        """The client's handshake again with a restarted upstream; requests wait for it (``_ready``)."""
        try:
            if self._init is not None:
                await self._ask_upstream("initialize", self._init.get("params"), ready=False)
                if self._initialized is not None:
                    self._to_upstream(self._initialized)
        except MCPError as exc:  # (died again: the supervisor sees it)
            log.warning("upstream %r: the handshake after a restart failed: %s", self.name, exc.error.message)
            return
        self._ready.set()

    def _give_up(self, reason: str) -> None:
        self._down = reason
        self._ready.set()  # wake the waiters: they read _down

    # -- from the client ------------------------------------------------------------------

    def _from_client(self, line: bytes) -> None:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            self._to_client(error_frame(None, types.PARSE_ERROR, wire.parse_problem(exc)))
            return
        if isinstance(message, list):  # (MCP allowed batches in 2025-03-26 only; this relay forwards none)
            self._to_client(error_frame(None, types.INVALID_REQUEST, "Invalid Request: a JSON-RPC batch, which this "
                                                                     "relay does not forward; send each message alone"))
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self._to_client(error_frame(None, types.PARSE_ERROR, wire.parse_problem("not a JSON-RPC 2.0 message")))
            return
        method = message.get("method")
        if (problem := wire.invalid(message, method)) is not None:
            self._to_client(error_frame(wire.legal_id(message), types.INVALID_REQUEST, f"Invalid Request: {problem}"))
            return
        try:  # what goes on is the value read, never the client's bytes: no other cut of them, nor another
            line = wire.rewritten(message)  # reading of a key written twice or of an escape, reaches the upstream
        except TypeError as exc:
            self._to_client(error_frame(wire.legal_id(message), *wire.unwritable(method, exc)))
            return
        if method is None:  # an answer: to one of the relay's own requests, or to the upstream's
            key = message.get("id")
            future = self._mine.get(key) if isinstance(key, str) else None
            if future is not None:
                if not future.done():
                    future.set_result(message)
            else:
                self._to_upstream(line)
            return
        if "id" not in message:  # a notification
            if method == "notifications/initialized":
                self._initialized = line
            self._to_upstream(line)
            return
        rid = message["id"]
        key = orjson.dumps(rid)
        if key in self._calls or key in self._pending:  # (its answer would go astray, or a call never end)
            self._to_client(error_frame(rid, types.INVALID_REQUEST, wire.taken(rid)))
            return
        if method in wire.JUDGED:
            if len(self._calls) >= MAX_CALLS:  # (they run one at a time: a client this far ahead only fills memory)
                self._to_client(error_frame(rid, types.INVALID_REQUEST, wire.too_many(MAX_CALLS)))
                return
            self._calls.add(key)
            if method == "tools/call":
                self._tools_call(message, line, key)
            else:
                self._spawn_task(self._read(message, line, key))
            return
        if method == "initialize":
            self._init = message
            params = message.get("params")
            capabilities = params.get("capabilities") if isinstance(params, dict) else None
            self._elicits = isinstance(capabilities, dict) and "elicitation" in capabilities
        if self._waiting or not self._ready.is_set():  # (it waits, as do the requests behind it)
            self._waiting += 1
            self._spawn_task(self._forward(rid, method, line, None, queued=True, key=key))
        elif self._down is not None:
            self._answer_error(rid, None, UPSTREAM_DOWN, self._down)
        else:
            self._send(key, rid, method, line, None)

    def _spawn_task(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _forward(self, rid: Any, what: str, line: bytes, future: Sink | None, *, ready: bool = True,
                       queued: bool = False, key: bytes | None = None) -> None:
        """Send a request upstream once it is up (``ready``); its answer goes to ``future``, else to the client
        as it is. ``queued``: one of the requests counted in ``_waiting``. A request whose id one under way
        has (the client's own, or one of the relay's) is answered with an error, not sent."""
        try:
            if ready and not self._ready.is_set():
                try:
                    await asyncio.wait_for(self._ready.wait(), _CONNECT_TIMEOUT)
                except TimeoutError:
                    self._answer_error(rid, future, UPSTREAM_DOWN,
                                       f"upstream {self.name!r} did not reconnect within {_CONNECT_TIMEOUT:g} s")
                    return
            if ready and self._down is not None:
                self._answer_error(rid, future, UPSTREAM_DOWN, self._down)
                return
            key = key or orjson.dumps(rid)
            if key in self._pending:
                self._answer_error(rid, future, types.INVALID_REQUEST, wire.taken(rid))
                return
            self._send(key, rid, what, line, future)
        finally:
            if queued:
                self._waiting -= 1

    def _send(self, key: bytes, rid: Any, what: str, line: bytes, future: Sink | None) -> None:
        timer = asyncio.get_running_loop().call_later(self._limit(what), self._expire, key)
        self._pending[key] = Pending(rid, what, timer, future)
        self._to_upstream(line)

    def _expire(self, key: bytes) -> None:
        pending = self._pending.pop(key, None)
        if pending is not None:
            self._answer_error(pending.id, pending.future, UPSTREAM_TIMEOUT,
                               f"upstream {self.name!r} did not answer {pending.what} within {self._limit(pending.what):g} s "
                               f"(the call may still run there)")

    def _limit(self, what: str) -> float:  # a starting server gets the connect timeout, as the SDK path's
        return _CONNECT_TIMEOUT if what == "initialize" else self.timeout

    def _fail_pending(self, reason: str, *, down: bool = False) -> None:
        pending, self._pending = self._pending, {}
        for item in pending.values():
            if item.timer is not None:
                item.timer.cancel()
            self._answer_error(item.id, item.future, UPSTREAM_DOWN, reason if down else
                               f"upstream {self.name!r} closed the connection during {item.what} ({reason}); "
                               f"restarting it")

    def _answer_error(self, rid: Any, future: Sink | None, code: int, message: str) -> None:
        if future is None:
            self._to_client(error_frame(rid, code, message))
        elif not future.done():
            future.set_exception(MCPError(code, message))

    async def _ask_upstream(self, method: str, params: Any, *, ready: bool = True) -> dict[str, Any]:
        """One request of the relay's own to the upstream (its answer's ``result``)."""
        rid = f"{_OWN}{next(self._ids)}"
        while (key := orjson.dumps(rid)) in self._pending or key in self._calls:  # (a client's request took it)
            rid = f"{_OWN}{next(self._ids)}"
        future: asyncio.Future[tuple[bytes, dict[str, Any]]] = asyncio.get_running_loop().create_future()
        request = {"jsonrpc": "2.0", "id": rid, "method": method, **({"params": params} if params else {})}
        await self._forward(rid, method, wire.rewritten(request), future, ready=ready, key=key)
        _, answer = await future
        wire.raise_error(answer)
        result = answer.get("result")
        return result if isinstance(result, dict) else {}

    # -- from the upstream ----------------------------------------------------------------

    def _from_upstream(self, line: bytes) -> None:
        try:
            message = orjson.loads(line)
            # (a client may cut the line where the relay did not: a second answer, or a request, smuggled)
            line = line if wire.plain(line) else wire.rewritten(message)
        except (orjson.JSONDecodeError, TypeError):
            log.warning("upstream %r sent a line that is not JSON (or not one it can write again); dropped", self.name)
            return
        if isinstance(message, dict) and "method" not in message and "id" in message:
            pending = self._pending.pop(orjson.dumps(message["id"]), None)
            if pending is None:
                return  # answered already (it timed out), or the relay's replayed handshake
            if pending.timer is not None:
                pending.timer.cancel()
            if pending.what == "tools/list":  # (gateway: descriptions judged, tools pinned: gate.py, in tools_listed)
                line, message = tools_listed(self.judge, self._server, self.tools, message, line)
            elif pending.what == "initialize" and pending.future is None:
                line = wire.as_proxy(message, line)
            if pending.future is not None:
                if not pending.future.done():
                    pending.future.set_result((line, message))
                return
        self._to_client(line)

    # -- tools/call -------------------------------------------------------------------------

    def _tools_call(self, message: dict[str, Any], line: bytes, key: bytes) -> None:
        """A call the guard allows as it came, when no other call of the session is under way, the upstream is
        up and there is no sidecar, takes the fast path: judged and written to the upstream here, in the
        callback that read it, and its answer committed and relayed in the callback that reads that
        (:class:`.lean.Answered`). Any other call is a task of its own (:func:`.lean.lean_call`), which waits
        for the session's turn; a call the fast path judged and did not allow hands it its verdict."""
        judged: Judged | None = None
        if not self._waiting and self._ready.is_set() and self._down is None and self._turn.take_now():
            try:
                now = judge_now(self.judge, self, message)
            except Exception:  # a bug: lean_call meets it again and answers with it
                now = None
            if now is None:
                self._turn.release()
            elif isinstance(now[1], Forward):
                guarded, go, rid = now[0], now[1], message["id"]
                self._send(key, rid, f"tools/call {go.name!r}", line,
                           Answered(self.judge, guarded, go, rid, reply=partial(self._replied, key),
                                    gone=lambda: self._closing))
                try:
                    self.judge.forwarded(guarded, go)  # (its span and audit row, once the request is on its way)
                except Exception:  # (in the callback that read the line: never let it close the client's end)
                    log.exception("tools/call %r: recording the decision failed", go.name)
                return
            else:
                judged = now[1]  # (the turn is the task's now)
        self._spawn_task(self._call(message, line, key, judged))

    def _replied(self, key: bytes, frame: bytes | None) -> None:
        """A call on the fast path is over: the session's turn goes on, and its answer to the client."""
        self._calls.discard(key)
        self._turn.release()
        if frame is not None:
            self._to_client(frame)

    async def _call(self, message: dict[str, Any], line: bytes, key: bytes, judged: Judged | None) -> None:
        """A call on the slow path; ``judged``: its verdict from the fast path, which handed it the turn."""
        try:  # (the turn is taken once the tool is known to be listed, as the SDK path takes its lock)
            frame = await lean_call(self.judge, self, message, line, lock=self._turn if judged is None else nullcontext(),
                                    judged=judged)
        finally:
            self._calls.discard(key)
            if judged is not None:
                self._turn.release()
        self._to_client(frame)

    async def _read(self, message: dict[str, Any], line: bytes, key: bytes) -> None:
        """A resources/read or prompts/get: judged as a step (:func:`.reads.lean_read`), always in a task."""
        try:
            frame = await lean_read(self.judge, self, message, line, lock=self._turn)
        finally:
            self._calls.discard(key)
        self._to_client(frame)

    # -- what the call handling needs of the relay (:class:`.lean.Relayed`) --------------------

    async def exchange(self, message: dict[str, Any], frame: bytes, what: str) -> tuple[bytes, dict[str, Any]]:
        rid = message["id"]
        future: asyncio.Future[tuple[bytes, dict[str, Any]]] = asyncio.get_running_loop().create_future()
        await self._forward(rid, what, frame, future, key=orjson.dumps(rid))
        return await future

    @property
    def elicit(self) -> Elicit | None:
        return self._elicit if self._elicits else None

    async def list_tools(self) -> None:
        cursor: str | None = None
        while True:
            page = await self._ask_upstream("tools/list", {"cursor": cursor} if cursor else None)
            self.tools.update(wire.tool_arguments({"result": page}))
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                return

    def session(self) -> GuardedSession:
        if self._guarded is None:
            info = ((self._init or {}).get("params") or {}).get("clientInfo") or {}
            self._guarded = self.judge.open_session(None, info.get("name") if isinstance(info, dict) else None)
        return self._guarded

    async def _elicit(self, question: str) -> types.ElicitResult:
        rid = f"{self._asking}{next(self._ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._mine[rid] = future
        try:
            self._to_client(wire.rewritten({"jsonrpc": "2.0", "id": rid, "method": "elicitation/create",
                                            "params": {"message": question, "requestedSchema": APPROVAL_SCHEMA}}))
            answer = await future
        finally:
            self._mine.pop(rid, None)
        return wire.elicit_result(answer)

    def _to_client(self, line: bytes) -> None:
        if self._client is not None and not self._client.is_closing():
            self._client.write(line if line.endswith(b"\n") else line + b"\n")

    def _to_upstream(self, line: bytes) -> None:
        """(While the upstream's input pipe is full, the client's end is not read: :class:`._pipes.Flow`.)"""
        proc = self._proc
        if proc is None or proc.stdin.is_closing():
            return  # (the supervisor fails what is pending and starts it again)
        proc.stdin.write(line if line.endswith(b"\n") else line + b"\n")

    def _upstream_line(self, line: bytes) -> None:
        self._from_upstream(line)
        self._flow.upstream_line_done(None if self._proc is None else self._proc.output)

    def _upstream_line_too_long(self, exc: Overlong) -> None:  # dropped: its request times out
        log.warning("upstream %r sent a line above %d bytes; dropped", self.name, self.limit)

    def _client_line(self, line: bytes) -> None:
        self._from_client(line)
        self._flow.client_line_done()

    def _client_line_too_long(self, exc: Overlong) -> None:
        self._to_client(error_frame(exc.id, types.PARSE_ERROR, wire.parse_problem(exc)))
