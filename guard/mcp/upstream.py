"""An upstream MCP server the proxy talks to, as a client: kept connected, restarted when it crashes.

Each upstream is one supervising task (anyio) that owns the connection's context managers —
they must be entered and left by the same task — and serves the proxy's requests through the
:class:`mcp.ClientSession` it holds. A request that finds the connection gone (the server
process exited, the HTTP server went away) fails with one MCP error naming the upstream, and
the supervisor reconnects (a stdio server is started again) up to ``restarts`` times; past
that the upstream is reported down and every request to it fails at once, never hangs.
"""
from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, TextIO, TypeVar

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from ._lines import CODEC
from .config import UpstreamSpec

log = logging.getLogger("forewarn.mcp")

# JSON-RPC server-error codes (the -32000..-32099 range is the implementation's)
UPSTREAM_DOWN = -32010
UPSTREAM_TIMEOUT = -32011

T = TypeVar("T")
_CONNECT_TIMEOUT = 30.0


class Upstream:
    """One upstream server (``spec``), connected by :meth:`run` (a task of the proxy's task group)."""

    def __init__(self, spec: UpstreamSpec, *, call_timeout: float, restarts: int = 3,
                 errlog: TextIO | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.call_timeout = spec.timeout or call_timeout
        self.restarts = restarts
        self.errlog = errlog or sys.stderr
        self._session: ClientSession | None = None
        self._ready = anyio.Event()
        self._broken = anyio.Event()
        self._down: str | None = None  # why the upstream is given up on
        self._closing = False
        self.connections = 0  # how many times it was (re)connected

    # -- the supervisor -----------------------------------------------------------------

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect, and reconnect after a crash, until cancelled. Signals ``task_status`` once the
        first attempt is over (connected or not), so the proxy starts serving only then."""
        started = False
        failures = 0
        while True:
            connected = False
            try:
                async with AsyncExitStack() as stack:
                    session = await self._connect(stack)
                    broken = self._broken = anyio.Event()
                    self._session, self._down, connected = session, None, True
                    self.connections += 1
                    failures = 0
                    self._ready.set()
                    if not started:
                        task_status.started()
                        started = True
                    await broken.wait()  # set by _mark_broken (callers then wait anew) or close()
                    if self._closing:
                        return  # (leaving the stack closes the connection cleanly: DELETE, process ended)
                    log.warning("upstream %r lost its connection; reconnecting", self.name)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:  # a server that cannot start, or a transport that broke on the way out
                missing = _missing(exc) if not connected else None
                if missing is not None:  # a command that is not there will not be there on a retry
                    self._give_up(f"upstream {self.name!r} ({self.spec.describe()}) could not be started: {missing}")
                    if not started:
                        task_status.started()
                    return
                log.warning("upstream %r: %s", self.name, _reason(exc))
                if not connected:
                    failures += 1
                    if failures > self.restarts:
                        self._give_up(f"upstream {self.name!r} ({self.spec.describe()}) could not be started: "
                                      f"{_reason(exc)}")
                        if not started:
                            task_status.started()
                        return
            if self.connections > self.restarts:
                self._give_up(f"upstream {self.name!r} ({self.spec.describe()}) crashed and was restarted "
                              f"{self.restarts} time(s), its limit; it is down")
                return
            await anyio.sleep(min(0.1 * 2 ** failures, 2.0))

    def close(self) -> None:
        """Ask the supervisor to close the connection and return (the proxy is shutting down)."""
        self._closing = True
        self._give_up(f"upstream {self.name!r}: the proxy is shutting down")
        self._broken.set()

    def _mark_broken(self, session: ClientSession) -> None:
        """The connection ``session`` is gone: later callers wait for the reconnection."""
        if self._session is session:
            self._session = None
            self._ready = anyio.Event()
            self._broken.set()

    def _give_up(self, reason: str) -> None:
        self._down = reason
        self._session = None
        self._ready.set()  # wake the waiters: they read _down

    async def _connect(self, stack: AsyncExitStack) -> ClientSession:
        # (the transports' own task groups live on the stack: no cancel scope may wrap their entry)
        if self.spec.url is not None:
            read, write = await stack.enter_async_context(streamable_http_client(self.spec.url))
        else:
            assert self.spec.command is not None
            # (CODEC: the SDK writes pydantic's JSON, with U+2028, U+2029 and NEL raw in strings, where a reader
            # of lines may cut it: they go escaped)
            params = StdioServerParameters(command=self.spec.command, args=list(self.spec.args),
                                           env=dict(self.spec.env) if self.spec.env else None, cwd=self.spec.cwd,
                                           encoding=CODEC)
            read, write = await stack.enter_async_context(stdio_client(params, errlog=self.errlog))
        session = await stack.enter_async_context(_ForwardingSession(read, write))
        with anyio.fail_after(_CONNECT_TIMEOUT):
            await session.initialize()
        return session

    # -- requests -------------------------------------------------------------------------

    async def session(self) -> ClientSession:
        """The connected session (waits for a reconnection in progress).

        Raises:
            MCPError: the upstream is down, or did not come back within the connect timeout.
        """
        with anyio.move_on_after(_CONNECT_TIMEOUT):
            await self._ready.wait()
        if self._down is not None:
            raise MCPError(UPSTREAM_DOWN, self._down)
        if self._session is None:
            raise MCPError(UPSTREAM_DOWN, f"upstream {self.name!r} did not reconnect within {_CONNECT_TIMEOUT:g} s")
        return self._session

    async def request(self, what: str, call: Callable[[ClientSession], Awaitable[T]],
                      timeout: float | None = None) -> T:
        """``call`` on the session, within ``timeout`` seconds (the upstream's call timeout by default).

        Raises:
            MCPError: the upstream's own error, unchanged; or, from the proxy, the upstream is down,
                crashed during the request, or did not answer in time.
        """
        session = await self.session()
        limit = self.call_timeout if timeout is None else timeout
        try:
            with anyio.fail_after(limit):
                return await call(session)
        except TimeoutError:
            raise MCPError(UPSTREAM_TIMEOUT, f"upstream {self.name!r} did not answer {what} within {limit:g} s "
                                             f"(the call may still run there)") from None
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                self._mark_broken(session)
                raise MCPError(UPSTREAM_DOWN, f"upstream {self.name!r} closed the connection during {what} "
                                              f"({exc.error.message}); restarting it") from None
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            self._mark_broken(session)
            raise MCPError(UPSTREAM_DOWN, f"upstream {self.name!r} failed during {what} ({_reason(exc)}); "
                                          f"restarting it") from None

    async def call_tool(self, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        async def call(session: ClientSession) -> types.CallToolResult:
            return await session.call_tool(name, arguments)
        return await self.request(f"tools/call {name!r}", call)

    async def list_tools(self) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None

            async def page(session: ClientSession, params: Any = params) -> types.ListToolsResult:
                return await session.list_tools(params=params)
            result = await self.request("tools/list", page)
            tools.extend(result.tools)
            cursor = result.next_cursor
            if not cursor:
                return tools

    def capabilities(self) -> types.ServerCapabilities | None:
        session = self._session
        return None if session is None else session.server_capabilities


class _ForwardingSession(ClientSession):
    """The proxy's client of an upstream. A tool's result goes on to the agent's own client, which checks its
    structured content against the tool's output schema; checking it here as well would cost a JSON Schema
    pass on every call (and a tools/list round trip for a tool not listed yet)."""

    async def validate_tool_result(self, name: str, result: types.CallToolResult) -> None:
        return None


def _missing(exc: BaseException) -> str | None:
    """Why a command could not be run at all (not found, not executable), as the lean relay says it; else None."""
    if isinstance(exc, BaseExceptionGroup):
        return _missing(exc.exceptions[0]) if exc.exceptions else None
    # (before the server ever answered; uvloop's spawn names no file in the error, asyncio's does)
    if isinstance(exc, FileNotFoundError | PermissionError | NotADirectoryError):
        return exc.strerror or str(exc)
    return None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return _reason(inner)
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text
