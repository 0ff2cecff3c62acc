"""The lean streamable-HTTP relay: ``forewarn mcp --upstream-url URL --http HOST:PORT`` (``--relay lean``,
the default where it fits), the HTTP counterpart of :mod:`..stdio.relay`.

An ASGI app on the proxy's MCP endpoint. Each POST, GET and DELETE goes on to the upstream's URL over one
keep-alive HTTP client (httpx2, the SDK's: :mod:`._upstream`), headers both ways (``Mcp-Session-Id``, ``MCP-Protocol-Version``,
``Last-Event-ID``, authorization …) and the body re-serialised from the value read, on one line
(:mod:`._lines`); the answer streams back as it comes (JSON, or server-sent events: the upstream's
notifications and its own requests to the client pass through). Only a ``tools/call`` is more (and a
``resources/read`` or ``prompts/get``: :mod:`.reads`): it is judged by the SDK path's code (:func:`.lean.lean_call`), then
forwarded or answered by the relay; its answer is read out of the upstream's response (the events
before it pass through) so that the call is committed. The answer to ``initialize`` carries the
proxy's name and instructions. A session is an ``Mcp-Session-Id`` (the upstream's: the client and
the upstream speak one session; the relay keys its guarded sessions by it; DELETE closes one).

Asking a human by elicitation: the relay answers that ``tools/call`` with an event stream of its own,
whose first event is its request to the client (id ``forewarn-R-N``, R random); the client POSTs its answer,
which the relay keeps; the call's answer is the stream's last event.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp_types as types
import orjson
from mcp.server.streamable_http_manager import DEFAULT_SESSION_IDLE_TIMEOUT
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.requests import Request

from ....errors import ConfigError
from ..._version import __version__
from .. import _frames as wire
from .._frames import MAX_CALLS, error_frame
from ..approval import APPROVAL_SCHEMA, Elicit
from ..calls import SERVER_NAME, CallJudge
from ..judge import GuardedSession
from ..lean import lean_call, tools_listed
from ..pinning import server_key
from ..reads import lean_read
from ..upstream import UPSTREAM_DOWN, UPSTREAM_TIMEOUT
from ._asgi import (
    BODY_TIMEOUT,
    Receive,
    Reply,
    Scope,
    Send,
    back_headers,
    empty,
    pump,
    read_body,
    reply,
    session_id,
    until_gone,
)
from ._sessions import HttpSession, HttpSessions
from ._upstream import BROKEN, HttpUpstream, answer_in, head_of, sse_event

log = logging.getLogger("forewarn.mcp")


_OWN = "forewarn-"
_CONNECT_TIMEOUT = 30.0
# not forwarded: the hop's own headers (and compression: the relay reads the answers it judges)
_HOP = frozenset({b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer",
                  b"upgrade", b"proxy-authorization", b"proxy-connection", b"accept-encoding"})
_OWN_HEADERS = [(b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream")]


def lean_http_fits(judge: CallJudge) -> bool:
    """Whether the lean HTTP relay can serve this proxy: one upstream, reached by its URL."""
    upstreams = judge.config.upstreams
    return len(upstreams) == 1 and upstreams[0].url is not None


class HttpRelay:
    """Serves one MCP endpoint (``path``) in front of the single streamable-HTTP upstream of ``judge``'s config."""

    def __init__(self, judge: CallJudge, *, path: str = "/mcp", host: str = "127.0.0.1",
                 idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT) -> None:
        if not lean_http_fits(judge):
            raise ConfigError("the lean HTTP relay serves exactly one upstream reached by its URL")
        self.judge = judge
        self.spec = judge.config.upstreams[0]
        self.name = self.spec.name
        self.url: str = self.spec.url or ""
        self._server = server_key(self.name, self.spec.describe())  # (its tools' pins: pinning.py)
        self.path = path
        self.timeout = self.spec.timeout or judge.config.call_timeout
        # a body holds one message (or a batch) whose arguments the judge refuses above its limit
        self.body_limit = max(4 << 20, 2 * judge.config.max_argument_bytes)
        self.body_timeout = BODY_TIMEOUT
        self._http = HttpUpstream(self.url)
        # a session without requests for idle_timeout is ended, here and upstream (:mod:`._sessions`)
        self._sessions = HttpSessions(judge, idle_timeout, lambda sid: self._background(self._forget(sid)))
        # the relay's requests to clients: id → the session asked, and its answer
        self._mine: dict[str, tuple[str | None, asyncio.Future[dict[str, Any]]]] = {}
        self._tools: dict[str, frozenset[str]] = {}  # as the upstream listed them: each with its arguments' names
        self._under_way: set[tuple[str, Any]] = set()  # (session, id) of the clients' requests being answered
        self._ids = itertools.count(1)
        self._asking = f"{_OWN}{secrets.token_hex(8)}-"  # the ids of its questions to clients: none an upstream can guess
        self._streams: set[asyncio.Task[Any]] = set()
        self._security = TransportSecurityMiddleware(_security_for(host))

    # -- running ------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[HttpRelay]:
        """The upstream's client, once the upstream answered a handshake (as the SDK path, which connects
        at launch), and the sessions closed at the end.

        Raises:
            ConfigError: the upstream could not be reached (``restarts`` + 1 tries).
        """
        try:
            await self._probe()
            sweeper = asyncio.create_task(self._sessions.sweep())
            try:
                yield self
            finally:
                sweeper.cancel()
        finally:
            self.close()
            await self._http.aclose()

    def close(self) -> None:
        """End the open streams (a client's GET stream lives as long as its session) and the sessions."""
        for task in list(self._streams):
            task.cancel()
        self._sessions.end_all("proxy shut down")

    async def _probe(self) -> None:
        failures = 0
        while True:
            try:
                await self._handshake()
                return
            except (*BROKEN, MCPError, TimeoutError, ValueError) as exc:
                failures += 1
                reason = exc.error.message if isinstance(exc, MCPError) else f"{type(exc).__name__}: {exc}"
                if failures > self.judge.config.restarts:
                    raise ConfigError(f"upstream {self.name!r} ({self.url}) could not be reached: {reason}") from None
                log.warning("upstream %r: %s", self.name, reason)
                await asyncio.sleep(min(0.1 * 2 ** failures, 2.0))

    async def _handshake(self) -> None:
        """Initialize a session of the relay's own, list the tools, and end the session."""
        request = {"protocolVersion": types.LATEST_PROTOCOL_VERSION, "capabilities": {},
                   "clientInfo": {"name": SERVER_NAME, "version": __version__}}
        answer, back = await self._ask("initialize", request, _OWN_HEADERS)
        version = (answer.get("protocolVersion") or types.LATEST_PROTOCOL_VERSION).encode()
        mine = [*_OWN_HEADERS, (b"mcp-protocol-version", version)]
        if (sid := back.headers.get("mcp-session-id")) is not None:
            mine.append((b"mcp-session-id", sid.encode()))
        async with asyncio.timeout(_CONNECT_TIMEOUT):
            await self._http.done("POST", mine, b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
            await self._list_tools(mine)
            if sid is not None:
                await self._http.done("DELETE", mine)

    # -- the ASGI app ---------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # (no lifespan: the relay's life is running()'s)
        if scope["path"].rstrip("/") != self.path.rstrip("/"):
            return await reply(send, 404, error_frame(None, types.INVALID_REQUEST, f"Not Found: the MCP endpoint is "
                                                                                    f"{self.path}"))
        method = scope["method"]
        # the SDK path's checks: a JSON body, and on a loopback address the Host and Origin of a local client,
        # so that a web page cannot reach the proxy through a rebound domain name
        refused = await self._security.validate_request(Request(scope), is_post=method == "POST")
        if refused is not None:
            return await refused(scope, receive, send)
        headers = [(k, v) for k, v in scope["headers"] if k not in _HOP]
        sid = session_id(headers)
        if method in ("POST", "GET", "DELETE") and not self._sessions.touch(sid):
            # (the MCP spec's answer to a request on an ended session: 404, and the client starts a new one)
            return await reply(send, 404, error_frame(None, types.INVALID_REQUEST, f"Session not found: the proxy "
                                                                                    f"ended session {sid}; start a "
                                                                                    f"new one"))
        if method == "POST":
            return await self._post(headers, receive, send)
        if method in ("GET", "DELETE"):
            await self._pass(method, headers, b"", receive, send, None, stream=method == "GET")
            if method == "DELETE":
                self._sessions.end(session_id(headers), "client ended the session")
            return
        await reply(send, 405, error_frame(None, types.INVALID_REQUEST, f"Method Not Allowed: {method}"),
                     [(b"allow", b"GET, POST, DELETE")])

    async def _post(self, headers: list[tuple[bytes, bytes]], receive: Receive, send: Send) -> None:
        try:
            body = await read_body(receive, self.body_limit, self.body_timeout)
        except TimeoutError:
            return await reply(send, 408, error_frame(None, types.INVALID_REQUEST, f"the request body did not end "
                                                                                    f"within {self.body_timeout:g} s"),
                               [(b"connection", b"close")])
        if body is None:
            return await reply(send, 413, error_frame(None, types.INVALID_REQUEST,
                                                       f"the request body is above the proxy's limit of "
                                                       f"{self.body_limit} bytes; not forwarded"))
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return await reply(send, 400, error_frame(None, types.PARSE_ERROR, wire.parse_problem(exc)))
        if isinstance(message, list):  # a batch: MCP protocol 2025-03-26 only, and never one the guard judges
            version = next((v.decode(errors="replace") for k, v in headers if k == b"mcp-protocol-version"), None)
            if (problem := wire.batch_problem(message, body, version)) is not None:
                return await reply(send, 400, error_frame(None, types.INVALID_REQUEST, f"Invalid Request: {problem}"))
            try:
                body = wire.rewritten(message).rstrip(b"\n")
            except TypeError as exc:
                return await reply(send, 400, error_frame(None, *wire.unwritable(None, exc)))
            return await self._pass("POST", headers, body, receive, send, None)
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return await reply(send, 400, error_frame(None, types.INVALID_REQUEST, "not a JSON-RPC 2.0 message"))
        method, rid = message.get("method"), message.get("id")
        if (problem := wire.invalid(message, method)) is not None:
            return await reply(send, 400, error_frame(wire.legal_id(message), types.INVALID_REQUEST,
                                                      f"Invalid Request: {problem}"))
        try:  # what the upstream gets is the value read, never the client's bytes: on one line that no reader cuts
            body = wire.rewritten(message).rstrip(b"\n")  # (a bridge to a stdio server), no key written twice
        except TypeError as exc:
            return await reply(send, 400, error_frame(wire.legal_id(message), *wire.unwritable(method, exc)))
        sid = session_id(headers)
        mine = self._mine.get(rid) if method is None and isinstance(rid, str) else None
        if mine is not None and mine[0] == sid:  # the answer to the relay's own request
            future = mine[1]
            if not future.done():
                future.set_result(message)
            return await empty(send, 202)
        # a session's request whose id one under way has: the upstream answers by id, and would lose one answer
        # (the call's: the relay waited out its timeout holding the session's lock)
        key = (sid, rid) if sid is not None and method is not None and "id" in message else None
        if key is not None:
            if key in self._under_way:
                return await reply(send, 400, error_frame(rid, types.INVALID_REQUEST, wire.taken(rid)))
            self._under_way.add(key)
        try:
            if method in wire.JUDGED:  # (a request: invalid() refuses a tools/call without an id; see below)
                return await self._call(message, body, headers, send)
            if method == "initialize" and rid is not None:
                return await self._initialize(message, body, headers, send)
            if method == "tools/list" and rid is not None:  # (gateway: descriptions judged, tools pinned: gate.py)
                return await self._tools_list(rid, body, headers, send)
            await self._pass("POST", headers, body, receive, send, rid)
        finally:
            if key is not None:
                self._under_way.discard(key)

    # -- passing through ------------------------------------------------------------------

    async def _pass(self, method: str, headers: list[tuple[bytes, bytes]], body: bytes, receive: Receive,
                    send: Send, rid: Any, *, stream: bool = False) -> None:
        """Forward the request; its answer goes back as it comes (until the client leaves)."""
        try:
            async with asyncio.timeout(self.timeout):
                response = await self._http.request(method, headers, body)
        except (*BROKEN, TimeoutError) as exc:
            return await self._unreachable(send, rid, method, exc)
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": back_headers(head_of(response))})
            pumping = asyncio.create_task(pump(response, send, None if stream else self.timeout))
            self._streams.add(pumping)
            try:
                await until_gone(pumping, receive)
            finally:
                self._streams.discard(pumping)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()

    async def _unreachable(self, send: Send, rid: Any, what: str, exc: Exception) -> None:
        timeout = isinstance(exc, TimeoutError)
        message = (f"upstream {self.name!r} did not answer {what} within {self.timeout:g} s (the call may still run "
                   f"there)" if timeout else f"upstream {self.name!r} ({self.url}) is unreachable: {exc}")
        frame = error_frame(rid, UPSTREAM_TIMEOUT if timeout else UPSTREAM_DOWN, message)
        await reply(send, 200 if rid is not None else 502, frame)

    # -- requests the relay reads the answer of --------------------------------------------

    async def _exchange(self, headers: list[tuple[bytes, bytes]], body: bytes, rid: Any, what: str,
                        answer_to: Reply | None) -> tuple[bytes, dict[str, Any], httpx2.Response]:
        """POST ``body`` (a request of id ``rid``) upstream; its answer (bytes, parsed) and the response's
        headers. Events before the answer go to ``answer_to`` (None: dropped).

        Raises:
            MCPError: the upstream is unreachable, answers with an HTTP error, or not within the timeout.
        """
        response: httpx2.Response | None = None
        try:
            async with asyncio.timeout(self.timeout):
                response = back = await self._http.request("POST", headers, body)
                if response.status_code >= 400:
                    if response.status_code == 404:  # a session the upstream ended (or never had): the relay's goes too
                        self._sessions.end(session_id(headers), "the upstream does not know the session")
                    text = (await response.aread()).decode(errors="replace")
                    raise MCPError(UPSTREAM_DOWN, f"upstream {self.name!r} answered {what} with HTTP "
                                                  f"{response.status_code}: {' '.join(text.split())[:300]}")
                if response.headers.get("content-type", "").startswith("text/event-stream"):
                    frame = await answer_in(response, rid, answer_to.event if answer_to else None)
                    if frame:  # (the rest of the stream is read apart, and the response closed: answer_in)
                        response = None
                else:
                    frame = await response.aread()
                answer = orjson.loads(frame) if frame else None
        except TimeoutError:
            raise MCPError(UPSTREAM_TIMEOUT, f"upstream {self.name!r} did not answer {what} within "
                                             f"{self.timeout:g} s (the call may still run there)") from None
        except BROKEN as exc:
            happened = "is unreachable" if isinstance(exc, httpx2.ConnectError) else f"failed during {what}"
            raise MCPError(UPSTREAM_DOWN, f"upstream {self.name!r} ({self.url}) {happened}: "
                                          f"{exc or type(exc).__name__}") from None
        finally:
            if response is not None:
                await response.aclose()
        if not isinstance(answer, dict) or answer.get("id") != rid:
            raise MCPError(UPSTREAM_DOWN, f"upstream {self.name!r} ended its answer to {what} without one")
        return frame, answer, back

    async def _ask(self, method: str, params: Any, headers: list[tuple[bytes, bytes]]
                   ) -> tuple[dict[str, Any], httpx2.Response]:
        rid = f"{_OWN}{next(self._ids)}"
        body = wire.rewritten({"jsonrpc": "2.0", "id": rid, "method": method, **({"params": params} if params else {})})
        _, answer, back = await self._exchange(headers, body, rid, method, None)
        wire.raise_error(answer)
        result = answer.get("result")
        return (result if isinstance(result, dict) else {}), back

    async def _list_tools(self, headers: list[tuple[bytes, bytes]]) -> None:
        cursor: str | None = None
        while True:
            page, _ = await self._ask("tools/list", {"cursor": cursor} if cursor else None, headers)
            self._tools.update(wire.tool_arguments({"result": self.judge.gate.listed_page(self._server, page)}))
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                return

    async def _initialize(self, message: dict[str, Any], body: bytes, headers: list[tuple[bytes, bytes]],
                          send: Send) -> None:
        rid = message["id"]
        answer_to = Reply(send)
        try:
            frame, answer, back = await self._exchange(headers, body, rid, "initialize", answer_to)
        except MCPError as exc:
            return await answer_to.final(error_frame(rid, exc.error.code, exc.error.message))
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        info, capabilities = params.get("clientInfo"), params.get("capabilities")
        self._sessions.open(back.headers.get("mcp-session-id"), info.get("name") if isinstance(info, dict) else None,
                            isinstance(capabilities, dict) and "elicitation" in capabilities)
        answer_to.headers = [h for h in head_of(back) if h[0] in (b"mcp-session-id", b"mcp-protocol-version")]
        await answer_to.final(wire.as_proxy(answer, frame))

    async def _tools_list(self, rid: Any, body: bytes, headers: list[tuple[bytes, bytes]], send: Send) -> None:
        """A client's ``tools/list``: its answer read (the events before it pass on), and passed back through
        :func:`.lean.tools_listed` (the gate's checks: :mod:`.gate`), as over stdio."""
        answer_to = Reply(send)
        try:
            frame, answer, _ = await self._exchange(headers, body, rid, "tools/list", answer_to)
        except MCPError as exc:
            frame = error_frame(rid, exc.error.code, exc.error.message)
            if self._sessions.ended(session_id(headers)) and not answer_to.streaming:  # the upstream did not know it
                return await reply(send, 404, frame)
            return await answer_to.final(frame)
        frame, _ = tools_listed(self.judge, self._server, self._tools, answer, frame)
        await answer_to.final(frame)

    async def _call(self, message: dict[str, Any], body: bytes, headers: list[tuple[bytes, bytes]],
                    send: Send) -> None:
        sid = session_id(headers)
        state = self._sessions.of(sid)
        if state.calls >= MAX_CALLS:  # (they run one at a time: a client this far ahead only holds connections)
            return await reply(send, 429, error_frame(message["id"], types.INVALID_REQUEST, wire.too_many(MAX_CALLS)))
        state.calls += 1
        try:
            await self._judged(message, body, headers, send, sid, state)
        finally:
            state.calls -= 1

    async def _judged(self, message: dict[str, Any], body: bytes, headers: list[tuple[bytes, bytes]], send: Send,
                      sid: str | None, state: HttpSession) -> None:
        answer_to = Reply(send)
        relayed = _Relayed(self, headers, sid, state, answer_to)
        if message["method"] == "tools/call":
            frame = await lean_call(self.judge, relayed, message, body, lock=state.lock)
        else:
            frame = await lean_read(self.judge, relayed, message, body, lock=state.lock)
        if self._sessions.ended(sid) and not answer_to.streaming:  # the upstream did not know it
            return await reply(send, 404, frame)
        await answer_to.final(frame)

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._streams.add(task)
        task.add_done_callback(self._streams.discard)

    async def _forget(self, sid: str) -> None:
        """End an idle session upstream too (best effort: the upstream also ends idle sessions of its own)."""
        try:
            async with asyncio.timeout(self.timeout):
                await self._http.done("DELETE", [*_OWN_HEADERS, (b"mcp-session-id", sid.encode())])
        except (*BROKEN, TimeoutError) as exc:
            log.warning("upstream %r: ending idle session %s: %s", self.name, sid, exc)


class _Relayed:
    """One judged request of a session, as the call handling sees the relay (:class:`.lean.Relayed`): what it
    sends upstream carries the request's headers, and what goes to the client before the answer (the events
    before it, the relay's questions) goes on the request's own answer (``answer_to``)."""

    def __init__(self, relay: HttpRelay, headers: list[tuple[bytes, bytes]], sid: str | None, state: HttpSession,
                 answer_to: Reply) -> None:
        self._relay, self._headers, self._sid, self._state, self._answer_to = relay, headers, sid, state, answer_to

    @property
    def tools(self) -> dict[str, frozenset[str]]:
        return self._relay._tools

    @property
    def elicit(self) -> Elicit | None:
        return self._elicit if self._state.elicits else None

    def session(self) -> GuardedSession:
        if self._state.guarded is None:
            self._state.guarded = self._relay.judge.open_session(self._sid, self._state.client)
        return self._state.guarded

    async def list_tools(self) -> None:
        await self._relay._list_tools(self._headers)

    async def exchange(self, message: dict[str, Any], frame: bytes, what: str) -> tuple[bytes, dict[str, Any]]:
        answer_frame, answer, _ = await self._relay._exchange(self._headers, frame, message["id"], what,
                                                              self._answer_to)
        return answer_frame, answer

    async def _elicit(self, question: str) -> types.ElicitResult:
        relay = self._relay
        rid = f"{relay._asking}{next(relay._ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        relay._mine[rid] = (self._sid, future)
        try:
            await self._answer_to.event(sse_event(orjson.dumps({
                "jsonrpc": "2.0", "id": rid, "method": "elicitation/create",
                "params": {"message": question, "requestedSchema": APPROVAL_SCHEMA}})))
            answer = await future
        finally:
            relay._mine.pop(rid, None)
        return wire.elicit_result(answer)


def _security_for(host: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection where the SDK's server turns it on (serving a loopback address); else none."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])

