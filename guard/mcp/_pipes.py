"""The lean stdio relay's two ends (:mod:`.relay`) as asyncio protocols: each line that comes in is handed
on in the callback that read it, with no task to wake, as a ``readline`` loop would need.

:class:`ClientEnd` reads the client (standard input; a socket in tests); :class:`UpstreamEnd` is the
upstream's process, its output read the same way and its input a ``StreamWriter``. Flow control is the
relay's: :class:`UpstreamEnd` says when its input pipe is full (``full``), and the relay stops reading
the client until it drains.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable

from ._stdio import Lines

__all__ = ["ClientEnd", "UpstreamEnd"]


class ClientEnd(asyncio.streams.FlowControlMixin, asyncio.Protocol):
    """The client's end: each line it writes goes to ``line``; ``too_long`` is told of a line above the
    limit (dropped). It reads nothing until :meth:`reading` (the relay first starts its upstream). Where one
    socket carries both directions (tests), it is the ``StreamWriter``'s protocol too."""

    def __init__(self, line: Callable[[bytes], object], too_long: Callable[[], object]) -> None:
        super().__init__()
        self._line = line
        self._lines = Lines(line, too_long)
        self._transport: asyncio.BaseTransport | None = None
        self._on = False
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # the client closed its end

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        if not self._on:
            transport.pause_reading()  # type: ignore[attr-defined]

    def reading(self, on: bool) -> None:
        """Read the client's end (again), or stop reading it."""
        self._on = on
        if self._transport is None or self._transport.is_closing():
            return
        if on:
            self._transport.resume_reading()  # type: ignore[attr-defined]
        else:
            self._transport.pause_reading()  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self._lines.feed(data)

    def eof_received(self) -> bool:
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
                 too_long: Callable[[], object]) -> None:
        super().__init__()
        loop = asyncio.get_running_loop()
        self._line, self._full = line, full
        self._lines = Lines(self._took, too_long)
        self._holding = False
        self.answered = False  # it wrote a line
        self.transport: asyncio.SubprocessTransport
        self.stdin: asyncio.StreamWriter
        self.output: asyncio.ReadTransport | None = None
        self._closed: asyncio.Future[None] = loop.create_future()  # its output ended
        self.exited: asyncio.Future[None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self.transport = transport
        stdin = transport.get_pipe_transport(0)
        assert isinstance(stdin, asyncio.WriteTransport)
        self.stdin = asyncio.StreamWriter(stdin, self, None, asyncio.get_running_loop())
        output = transport.get_pipe_transport(1)
        self.output = output if isinstance(output, asyncio.ReadTransport) else None

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
