"""The lean stdio relay's two ends (:mod:`.relay`) as asyncio protocols: each line that comes in is handed
on in the callback that read it, with no task to wake, as a ``readline`` loop would need.

:class:`ClientEnd` reads the client (standard input; a socket in tests); :class:`UpstreamEnd` is the
upstream's process, its output read the same way and its input a ``StreamWriter``. Flow control is the
relay's: :class:`UpstreamEnd` says when its input pipe is full (``full``), and the relay stops reading
the client until it drains.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, cast

from mcp.client.stdio import get_default_environment

from ....errors import ConfigError
from ...early_upstream import take
from .._frames import drained
from ..config import UpstreamSpec
from ._adopted import adopt
from ._transport import LINE_LIMIT, Lines, Overlong

BACKLOG = 1 << 16  # bytes written to the client and not yet taken, above which neither end is read further


class ClientEnd(asyncio.streams.FlowControlMixin, asyncio.Protocol):
    """The client's end: each line it writes goes to ``line``; ``too_long`` is told of a line above ``limit``
    (read past, with the id its first bytes show). It reads nothing until :meth:`reading` (the relay first
    starts its upstream). Where one socket carries both directions (tests), it is the ``StreamWriter``'s
    protocol too."""

    def __init__(self, line: Callable[[bytes], object], too_long: Callable[[Overlong], object],
                 limit: int = LINE_LIMIT) -> None:
        super().__init__()
        self._line = line
        self._lines = Lines(line, too_long, limit)
        self._lines.paused = True  # (what comes before reading(True) is kept: uvloop starts reading after connection_made)
        self._transport: asyncio.BaseTransport | None = None
        self._eof = False  # the client closed its end while its last lines were held back
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # the client closed its end

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        if self._lines.paused:
            transport.pause_reading()  # type: ignore[attr-defined]

    def reading(self, on: bool) -> None:
        """Read the client's end (again), or stop reading it: no more of its lines are handed on, not even
        those of the bytes at hand, until it is read again."""
        self._lines.paused = not on
        if self._transport is not None and not self._transport.is_closing():
            if on:
                self._transport.resume_reading()  # type: ignore[attr-defined]
            else:
                self._transport.pause_reading()  # type: ignore[attr-defined]
        if on:
            self._lines.resume()
            if self._eof and not self._lines.paused:
                self.eof_received()

    def data_received(self, data: bytes) -> None:
        self._lines.feed(data)

    def eof_received(self) -> bool:
        if self._lines.paused:  # (its last lines are handed on first, once it is read again)
            self._eof = True
            return True
        self._eof = False
        rest = self._lines.end()
        if rest:  # a last line without its newline
            self._line(rest)
        self._end()
        return True  # (a socket stays open for the answers still to come)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._end()

    def _end(self) -> None:
        if not self.ended.done():
            self.ended.set_result(None)


class UpstreamEnd(asyncio.streams.FlowControlMixin, asyncio.SubprocessProtocol):
    """The upstream's process: each line of its standard output goes to ``line``; ``too_long`` is told of a
    line above the limit (dropped). Its standard input is :attr:`stdin`, a ``StreamWriter``; ``full(True)``
    when that pipe is full, ``full(False)`` when it drained or closed."""

    def __init__(self, line: Callable[[bytes], object], full: Callable[[bool], object],
                 too_long: Callable[[Overlong], object], limit: int = LINE_LIMIT) -> None:
        super().__init__()
        loop = asyncio.get_running_loop()
        self._line, self._full = line, full
        self._lines = Lines(self._took, too_long, limit)
        self._holding = False
        self.answered = False  # it wrote a line
        self.transport: asyncio.SubprocessTransport
        self.stdin: asyncio.StreamWriter
        self.output: asyncio.ReadTransport | None = None
        self._closed: asyncio.Future[None] = loop.create_future()  # its output ended
        self.exited: asyncio.Future[None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (casts, not isinstance: uvloop's transports have the methods, not asyncio's classes)
        self.transport = cast(asyncio.SubprocessTransport, transport)
        stdin = cast(asyncio.WriteTransport, self.transport.get_pipe_transport(0))
        self.stdin = asyncio.StreamWriter(stdin, self, None, asyncio.get_running_loop())
        self.output = cast("asyncio.ReadTransport | None", self.transport.get_pipe_transport(1))

    @classmethod
    async def start(cls, spec: UpstreamSpec, line: Callable[[bytes], object], full: Callable[[bool], object],
                    too_long: Callable[[Overlong], object], limit: int = LINE_LIMIT) -> UpstreamEnd:
        """The upstream ``spec`` names, started: its command, in the MCP SDK's default environment with its own
        added, its standard error the proxy's.

        Raises:
            ConfigError: its command could not be run (missing, not executable), naming the upstream.
        """
        assert spec.command is not None
        launched = take(spec.command, spec.args, spec.env, spec.cwd)  # (fast start: the CLI launched it already)
        if launched is not None:
            adopted: UpstreamEnd = await adopt(cls(line, full, too_long, limit), launched)
            return adopted
        env = {**get_default_environment(), **(spec.env or {})}
        try:
            _, end = await asyncio.get_running_loop().subprocess_exec(
                lambda: cls(line, full, too_long, limit), spec.command, *spec.args, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=None, env=env, cwd=spec.cwd)
        except OSError as exc:
            raise ConfigError(f"upstream {spec.name!r} ({spec.describe()}) could not be started: "
                              f"{exc.strerror or exc}") from None
        return end

    async def stop(self, grace: float = 2.0) -> None:
        """Close its input, and kill it if it has not exited ``grace`` seconds later."""
        self.stdin.close()
        try:
            await asyncio.wait_for(asyncio.shield(self.exited), grace)
        except TimeoutError:
            self.transport.kill()
            await self.exited
        self.transport.close()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self._lines.feed(data)  # (only its standard output is a pipe)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._hold(True)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._hold(False)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 0:
            self.connection_lost(exc)  # (FlowControlMixin: a drain waiting on the pipe ends)
            self._hold(False)
            return
        rest = self._lines.end()
        if rest:  # a last line without its newline
            self._took(rest)
        if not self._closed.done():
            self._closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    async def ended(self) -> int:
        """Wait until its output has ended and its process exited: its exit code."""
        await self._closed
        await self.exited
        code = self.transport.get_returncode()
        return -1 if code is None else code

    def _took(self, line: bytes) -> None:
        self.answered = True
        self._line(line)

    def _hold(self, holding: bool) -> None:
        if holding != self._holding:
            self._holding = holding
            self._full(holding)


class Flow:
    """The relay's flow control. The client's end is read while nothing holds it: the upstream's input pipe
    full (``hold("upstream", …)``), or the client not reading what it is told (its output backed up above
    :data:`BACKLOG`: the answers the relay writes itself would pile up). The upstream's output is not read
    while the client's output is backed up. ``spawn`` runs what waits for a drain."""

    def __init__(self, spawn: Callable[[Coroutine[Any, Any, None]], object]) -> None:
        self._spawn = spawn
        self._holds: set[str] = set()
        self.client_in: ClientEnd | None = None
        self.client: asyncio.StreamWriter | None = None
        self.closing = False

    def hold(self, why: str, holding: bool) -> None:
        if holding:
            self._holds.add(why)
        else:
            self._holds.discard(why)
        if self.client_in is not None and not self.closing:
            self.client_in.reading(not self._holds)

    def client_line_done(self) -> None:
        """(After each line of the client's: it is read no further while its output is backed up.)"""
        if "client" not in self._holds and self._backed_up():
            self.hold("client", True)
            self._when_drained(lambda: self.hold("client", False))

    def upstream_line_done(self, pipe: asyncio.ReadTransport | None) -> None:
        """(After each line of the upstream's, ``pipe`` its output: as a reader waiting for the client's drain.)"""
        if pipe is not None and pipe.is_reading() and self._backed_up():
            pipe.pause_reading()
            self._when_drained(lambda: None if pipe.is_closing() else pipe.resume_reading())

    def _backed_up(self) -> bool:
        client = self.client
        return client is not None and not client.is_closing() and client.transport.get_write_buffer_size() > BACKLOG

    def _when_drained(self, then: Callable[[], object]) -> None:
        client = self.client
        assert client is not None

        async def resume() -> None:
            await drained(client)
            then()
        self._spawn(resume())
