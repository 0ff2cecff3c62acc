"""Plain HTTP to a sidecar on this machine, over the standard library's connections.

A sidecar answers a step in well under a millisecond on loopback, and httpx's own work
per request (URL and header models, its pool) is about 0.3 ms of CPU on top of it —
on a busy two-core machine, a third of the round trip (bench/middleware_overhead.py).
So the synchronous client sends requests to an ``http://`` URL on a loopback host
(127.0.0.1, ::1, localhost) through this small pool of ``http.client`` connections:
same requests, same keep-alive, errors mapped to httpx's so the retry plan is unchanged.
Anything else (https, another host, a custom transport) goes through httpx.
"""
from __future__ import annotations

import http.client
import select
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx

_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_IDLE = 16  # connections kept open (the middleware's threads share one client)


def loopback(url: str, headers: dict[str, str], timeout: float) -> LoopbackHTTP | None:
    """A pool for ``url`` when it is plain HTTP on this machine, else None (use httpx)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in _HOSTS:
        return None
    return LoopbackHTTP(parts.hostname, parts.port or 80, parts.path.rstrip("/"), headers, timeout)


@dataclass(frozen=True, slots=True)
class Answer:
    """The parts of a response the client reads (those of ``httpx.Response`` it uses)."""

    status_code: int
    content: bytes
    reason_phrase: str

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


def _readable(sock: Any) -> bool:
    poller = select.poll()  # (select.select fails on descriptors past 1023)
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class LoopbackHTTP:
    """Keep-alive ``http.client`` connections to one loopback server, shared by threads."""

    def __init__(self, host: str, port: int, prefix: str, headers: dict[str, str], timeout: float) -> None:
        self.host, self.port, self.prefix = host, port, prefix
        self.headers = dict(headers)
        self.timeout = timeout
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False  # a connection handed back after close() is closed, not kept

    def request(self, method: str, path: str, *, headers: dict[str, str], content: bytes | None,
                params: Any = None, timeout: float | None = None) -> Answer:
        """Send one request and read its whole answer; transport errors are httpx's (``ConnectError`` when
        the connection could not be opened, so nothing was sent)."""
        target = self.prefix + path + (f"?{urlencode(params)}" if params else "")
        conn = self._take()
        wait = self.timeout if timeout is None else timeout
        try:
            if conn.sock is None:
                conn.timeout = wait
                conn.connect()
            else:
                conn.sock.settimeout(wait)
        except OSError as exc:
            conn.close()
            raise httpx.ConnectError(f"{exc}") from exc
        try:
            conn.request(method, target, body=content, headers={**self.headers, **headers})
            response = conn.getresponse()
            body = response.read()
        except TimeoutError as exc:
            conn.close()
            raise httpx.ReadTimeout(f"{exc or 'timed out'}") from exc
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}") from exc
        if response.will_close:
            conn.close()
        else:
            self._give(conn)
        return Answer(response.status, body, response.reason)

    def _take(self) -> http.client.HTTPConnection:
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                # an idle connection the server closed (its keep-alive timeout) reads as ready: drop it
                if conn.sock is not None and not _readable(conn.sock):
                    return conn
                conn.close()
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def _give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < _IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for conn in idle:
            conn.close()


class AsyncLoopbackHTTP:
    """:class:`LoopbackHTTP` for :class:`~guard.client.AsyncClient`: keep-alive connections of asyncio
    streams to one loopback server (HTTP/1.1, bodies by ``Content-Length`` or chunked), so an async
    agent's step costs what a synchronous one's does. A connection belongs to the event loop that
    opened it; one of another loop (a second ``asyncio.run``) is dropped, not reused."""

    def __init__(self, host: str, port: int, prefix: str, headers: dict[str, str], timeout: float) -> None:
        self.host, self.port, self.prefix = host, port, prefix
        self.headers = {"Host": f"{host}:{port}", **headers}
        self.timeout = timeout
        self._idle: list[tuple[Any, Any, Any]] = []  # (loop, reader, writer)

    async def request(self, method: str, path: str, *, headers: dict[str, str], content: bytes | None,
                      params: Any = None, timeout: float | None = None) -> Answer:
        import asyncio

        target = self.prefix + path + (f"?{urlencode(params)}" if params else "")
        wait = self.timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        reader, writer = self._take(loop)
        if writer is None:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), wait)
            except (OSError, TimeoutError) as exc:
                raise httpx.ConnectError(f"{exc}") from exc
        body = content or b""
        lines = [f"{method} {target} HTTP/1.1", *(f"{k}: {v}" for k, v in {**self.headers, **headers}.items()),
                 f"Content-Length: {len(body)}", "", ""]
        try:
            writer.write("\r\n".join(lines).encode("latin-1") + body)
            status, reason, keep, answer = await asyncio.wait_for(_read_response(reader), wait)
        except TimeoutError as exc:
            writer.close()
            raise httpx.ReadTimeout(f"{exc or 'timed out'}") from exc
        except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
            writer.close()
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}") from exc
        if keep and len(self._idle) < _IDLE:
            self._idle.append((loop, reader, writer))
        else:
            writer.close()
        return Answer(status, answer, reason)

    def _take(self, loop: Any) -> tuple[Any, Any]:
        while self._idle:
            owner, reader, writer = self._idle.pop()
            # a connection of another loop, or one the server closed (its keep-alive timeout): drop it
            if owner is loop and not reader.at_eof() and not writer.is_closing():
                return reader, writer
            if owner is loop:
                writer.close()
        return None, None

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for owner, _, writer in idle:
            if not owner.is_closed():
                writer.close()


async def _read_response(reader: Any) -> tuple[int, str, bool, bytes]:
    """Status, reason, whether the connection stays open, and the body of one HTTP/1.1 response."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    _, status, reason = (head[0].split(" ", 2) + [""])[:3]
    fields = {}
    for line in head[1:]:
        if line:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
    if fields.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(parts)
    else:
        body = await reader.readexactly(int(fields.get("content-length", "0")))
    return int(status), reason, fields.get("connection", "").lower() != "close", body


def async_loopback(url: str, headers: dict[str, str], timeout: float) -> AsyncLoopbackHTTP | None:
    """An async pool for ``url`` when it is plain HTTP on this machine, else None (use httpx)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in _HOSTS:
        return None
    return AsyncLoopbackHTTP(parts.hostname, parts.port or 80, parts.path.rstrip("/"), headers, timeout)
