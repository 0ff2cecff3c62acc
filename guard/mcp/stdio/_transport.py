"""The proxy's stdio transport: standard input and output as non-blocking pipes on the event loop.

The SDK's ``stdio_server`` reads and writes through ``anyio.wrap_file``: every line read, every
write and every flush is a hop to a worker thread and back — three per request, each a thread
wake-up that, on a busy machine, waits for a CPU. A proxy sits on the path of every call, so when
standard input and output are pipes or sockets (as hosts launch an MCP server) and the loop is
asyncio's, this transport reads and writes them on the event loop itself. Anything else (a
terminal, a file, another event loop) is served by the SDK's transport (``serve.py`` chooses).

As the SDK does, it serves the wire from private duplicates of descriptors 0 and 1 and points
those at the null device and at standard error meanwhile, so nothing else written to standard
output can corrupt the JSON-RPC stream. A line that is not JSON-RPC gets one parse error
(JSON-RPC 2.0: code -32700, id null), which the SDK would only log, leaving the client waiting.
"""
from __future__ import annotations

import asyncio
import fcntl
import os
import re
import stat
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import mcp_types as types
import orjson
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from .._lines import escape_breaks

LINE_LIMIT = 1 << 27  # one JSON-RPC message per line; the proxy refuses large arguments itself
TOO_LONG = f"the line is above the proxy's limit of {LINE_LIMIT >> 20} MiB; not read"
# a request's id where a client writes it: the first member of its line, or the second after "jsonrpc"
_HEAD_ID = re.compile(rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*'
                      rb'(-?\d{1,18}(?![\d.eE])|"(?:[^"\\]|\\.){0,200}")')


class Overlong(Exception):
    """A line above the reader's limit, read past; ``id``: the request id its first bytes carry, else None."""

    def __init__(self, rid: Any) -> None:
        super().__init__(TOO_LONG)
        self.id = rid


async def read_line(reader: asyncio.StreamReader) -> bytes:
    """The next line (empty at the end of input).

    Raises:
        Overlong: the line is above the reader's limit. It is read to its end (``StreamReader.readline``
            drops only what it holds then, and the rest of the line would be read as a line of its own),
            and its id is taken from its first bytes, so the client can be told which request it was.
    """
    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial
    except asyncio.LimitOverrunError as exc:
        match = _HEAD_ID.match(await reader.readexactly(exc.consumed))
    while True:
        try:
            await reader.readuntil(b"\n")
            break
        except asyncio.LimitOverrunError as exc:
            await reader.readexactly(exc.consumed)
        except asyncio.IncompleteReadError:
            break
    raise Overlong(_id_of(match))


def _id_of(match: re.Match[bytes] | None) -> Any:
    """The request id an overlong line's first bytes show (:data:`_HEAD_ID`), else None."""
    try:
        return None if match is None else orjson.loads(match.group(1))
    except orjson.JSONDecodeError:  # (an escape that is no character)
        return None


def _wire() -> tuple[int, int] | None:
    """The descriptors of ``sys.stdin`` and ``sys.stdout`` (the CLI may have moved standard output off
    descriptor 1 already, keeping the wire for Python alone: ``_options.stdout_for_python_only``)."""
    try:
        sys.stdout.flush()
        return sys.stdin.fileno(), sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _on_asyncio() -> bool:
    """Whether an asyncio loop (uvloop's too) runs this task; under trio there is none. (Not sniffio: the mcp
    extra does not install it, and anyio no longer needs it.)"""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def pipes_available() -> bool:
    """Whether standard input and output are pipes or sockets and the running loop is asyncio's."""
    wire = _wire()
    if wire is None or not _on_asyncio():
        return False
    try:
        modes = [os.fstat(fd).st_mode for fd in wire]
    except OSError:
        return False
    return all(stat.S_ISFIFO(m) or stat.S_ISSOCK(m) for m in modes)


def parse_error(problem: object) -> SessionMessage:
    """The answer to a line that is not a JSON-RPC message."""
    rid = problem.id if isinstance(problem, Overlong) else None
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(
        code=types.PARSE_ERROR, message=f"Parse error: the line is not a JSON-RPC message "
                                        f"({' '.join(str(problem).split())[:200]})")))


@asynccontextmanager
async def raw_stdio() -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """This process's standard input and output as an asyncio reader and writer on the event loop
    (both must be pipes or sockets: :func:`pipes_available`)."""
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    async with stdio_pipes(lambda: asyncio.StreamReaderProtocol(reader)) as writer:
        yield reader, writer


@asynccontextmanager
async def stdio_pipes(reading: Callable[[], asyncio.BaseProtocol]) -> AsyncIterator[asyncio.StreamWriter]:
    """This process's standard input read by the protocol ``reading`` makes, and its standard output as a
    writer, on the event loop (both must be pipes or sockets: :func:`pipes_available`); the lean relay
    reads and writes bytes."""
    loop = asyncio.get_running_loop()
    wire = _wire()
    if wire is None:
        raise OSError("standard input or output has no file descriptor")
    wire_in, wire_out = _claim(wire[0], 0), _claim(wire[1], 1)
    read_transport: asyncio.BaseTransport | None = None
    write_transport: asyncio.WriteTransport | None = None
    try:
        read_transport, _ = await loop.connect_read_pipe(reading, os.fdopen(os.dup(wire_in), "rb", buffering=0))
        write_transport, protocol = await loop.connect_write_pipe(_FlowControl, os.fdopen(os.dup(wire_out), "wb",
                                                                                           buffering=0))
        yield asyncio.StreamWriter(write_transport, protocol, None, loop)
    finally:
        for transport in (read_transport, write_transport):
            if transport is not None:
                transport.close()
        _release(wire[0], 0, wire_in)
        _release(wire[1], 1, wire_out)


@asynccontextmanager
async def pipe_stdio() -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage | Exception],
                                              MemoryObjectSendStream[SessionMessage]]]:
    """The client's messages and a stream to answer on, over this process's standard input and output
    (both must be pipes or sockets: :func:`pipes_available`)."""
    async with raw_stdio() as (reader, writer):
        incoming_send, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        outgoing, outgoing_receive = anyio.create_memory_object_stream[SessionMessage](0)

        async def read_lines() -> None:
            async with incoming_send:
                while True:
                    try:
                        line = await read_line(reader)
                    except Overlong as exc:
                        await outgoing.send(parse_error(exc))
                        continue
                    except OSError:
                        return
                    if not line:
                        return  # end of input: the client is gone
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except Exception as exc:  # not JSON-RPC: answered here, the server never sees it
                        await outgoing.send(parse_error(exc))
                        continue
                    await incoming_send.send(SessionMessage(message))

        async def write_messages() -> None:
            async with outgoing_receive:
                async for item in outgoing_receive:
                    json = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    # (pydantic leaves U+2028, U+2029 and NEL raw: a client reading lines may cut there)
                    writer.write(escape_breaks(json.encode()) + b"\n")
                    try:
                        await writer.drain()
                    except (ConnectionError, OSError):
                        return  # the client closed its end: nothing more can be said

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read_lines)
            tasks.start_soon(write_messages)
            yield incoming, outgoing
            tasks.cancel_scope.cancel()


class Lines:
    """A byte stream cut into its lines as it comes: each complete line (with its newline) goes to ``line``
    in the callback that read it, with no task to wake. A line above ``limit`` bytes is read past to its
    newline and ``too_long`` is told once, with the :class:`Overlong` that names the request id its first
    bytes show (as :func:`read_line` does), so the client can be told which request it was.

    While :attr:`paused` (set by whoever a line made stop reading), no more lines are handed on, not even the
    rest of the bytes at hand: they are kept, in order, until :meth:`resume`."""

    def __init__(self, line: Callable[[bytes], object], too_long: Callable[[Overlong], object],
                 limit: int = LINE_LIMIT) -> None:
        self._line, self._too_long, self._limit = line, too_long, limit
        self._partial = bytearray()  # the start of a line whose newline has not come yet
        self._dropping = False  # in a line above the limit, until its newline
        self.paused = False
        self._kept = bytearray()  # what came while paused (at most a read's worth: its reader is paused too)

    def feed(self, data: bytes) -> None:
        if self.paused:
            self._kept += data
            return
        start = 0
        while not self._held() and (end := data.find(b"\n", start)) >= 0:
            if self._dropping:
                self._dropping = False
            elif self._partial:
                self._partial += data[start:end + 1]
                line = bytes(self._partial)
                self._partial.clear()
                self._deliver(line)
            else:
                self._deliver(data if start == 0 and end == len(data) - 1 else data[start:end + 1])
            start = end + 1
        if self._held():  # (a line paused it)
            self._kept += data[start:]
            return
        if start < len(data) and not self._dropping:
            self._partial += data[start:]
            if len(self._partial) > self._limit:
                head = bytes(self._partial[:512])
                self._partial.clear()
                self._dropping = True
                self._too_long(Overlong(_id_of(_HEAD_ID.match(head))))

    def _held(self) -> bool:  # (a method: a line handed on may pause it, which narrowing the attribute hides)
        return self.paused

    def resume(self) -> None:
        """Hand on lines again, first those of what was kept."""
        self.paused = False
        if self._kept:
            kept = bytes(self._kept)
            self._kept.clear()
            self.feed(kept)

    def end(self) -> bytes:
        """What came after the last newline (a last line without one), at the end of the stream."""
        rest = bytes(self._partial)
        self._partial.clear()
        return rest

    def _deliver(self, line: bytes) -> None:
        if len(line) > self._limit:
            self._too_long(Overlong(_id_of(_HEAD_ID.match(line, 0, 512))))
        else:
            self._line(line)


class _FlowControl(asyncio.streams.FlowControlMixin, asyncio.Protocol):
    """The write side's protocol: ``drain`` waits while the pipe is full (asyncio's own recipe)."""

    def __init__(self, loop: Any = None) -> None:
        super().__init__(loop)


def _claim(fd: int, standard: int) -> int:
    """A private duplicate of ``fd`` (above the standard range) to serve the wire from. When ``fd`` is
    the standard descriptor itself (0 or 1), it then points at the null device (input) or standard
    error (output) until :func:`_release`."""
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    if fd == standard:
        target = os.open(os.devnull, os.O_RDONLY) if fd == 0 else os.dup(2)
        try:
            os.dup2(target, fd)
        finally:
            os.close(target)
    return private


def _release(fd: int, standard: int, private: int) -> None:
    """Point ``fd`` at the wire again, blocking as it was (the event loop made the pipe non-blocking)."""
    with suppress(OSError):
        if fd == standard:
            os.dup2(private, fd)
        os.set_blocking(fd, True)
    with suppress(OSError):
        os.close(private)
