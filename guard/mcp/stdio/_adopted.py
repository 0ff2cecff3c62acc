"""A process started before the event loop ran (:mod:`forewarn.guard.early_upstream`), driven as
``loop.subprocess_exec`` drives one it starts: its pipes read and written by the loop, and the same
:class:`asyncio.SubprocessProtocol` callbacks (``pipe_data_received``, ``pipe_connection_lost``,
``process_exited``, flow control), so :class:`._pipes.UpstreamEnd` serves it unchanged."""
from __future__ import annotations

import asyncio
import subprocess
from typing import Any


class _Process(asyncio.SubprocessTransport):
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        super().__init__()
        self.proc = proc
        self.pipes: dict[int, asyncio.BaseTransport] = {}
        self._closing = False

    def get_pid(self) -> int:
        return self.proc.pid

    def get_returncode(self) -> int | None:
        return self.proc.returncode

    def get_pipe_transport(self, fd: int) -> Any:
        return self.pipes.get(fd)

    def send_signal(self, signal: int) -> None:
        self.proc.send_signal(signal)

    def terminate(self) -> None:
        self.proc.terminate()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        for pipe in self.pipes.values():
            pipe.close()
        self.kill()  # (as asyncio's own transport: a process still running when it is closed is killed)


class _Side(asyncio.Protocol):
    """One pipe of the process, its events passed on to the process's protocol as ``fd``'s."""

    def __init__(self, end: Any, fd: int) -> None:
        self.end, self.fd = end, fd

    def data_received(self, data: bytes) -> None:
        self.end.pipe_data_received(self.fd, data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.end.pipe_connection_lost(self.fd, exc)

    def pause_writing(self) -> None:
        self.end.pause_writing()

    def resume_writing(self) -> None:
        self.end.resume_writing()


async def adopt(end: Any, proc: subprocess.Popen[bytes]) -> Any:
    """``end`` (a subprocess protocol) connected to ``proc``'s standard input and output: ``end``."""
    assert proc.stdin is not None and proc.stdout is not None
    loop = asyncio.get_running_loop()
    process = _Process(proc)
    process.pipes[0], _ = await loop.connect_write_pipe(lambda: _Side(end, 0), proc.stdin)
    process.pipes[1], _ = await loop.connect_read_pipe(lambda: _Side(end, 1), proc.stdout)
    end.connection_made(process)  # (before the loop's next pass: no data can reach end before it)
    loop.run_in_executor(None, proc.wait).add_done_callback(lambda _: end.process_exited())
    return end
