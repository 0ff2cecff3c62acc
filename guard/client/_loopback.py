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

__all__ = ["Answer", "LoopbackHTTP", "loopback"]

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
