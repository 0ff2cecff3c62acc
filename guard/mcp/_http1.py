"""A small HTTP/1.1 client for the lean HTTP relay's one upstream: keep-alive connections on asyncio streams.

The relay forwards every request of every client to one URL, so what it needs of a client is little:
write the request, read the status and headers, stream the body (``Content-Length``, chunked, or to the
connection's end), keep the connection for the next request. httpx does that and much more (URL and
header models, cookies, auth, redirects, its own connection-pool machinery) at about three times the
CPU per request, and a proxy pays its client's cost on every call (docs/mcp.md, Cost).
"""
from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

__all__ = ["Http1", "Response", "HttpError", "Unreachable"]

_CHUNK = 1 << 16
_KEEP = 4.0  # seconds an idle connection is kept (uvicorn, which serves the SDK's servers, closes them after 5)
_STALE = 1.0  # seconds idle after which a connection that fails at once is taken to have been closed idle
_HEAD_LIMIT = 1 << 16


class HttpError(OSError):
    """The upstream could not be reached, or broke the protocol or the connection mid-answer."""


class Unreachable(HttpError):
    """No connection to the upstream could be made."""


class Response:
    """A response whose body is read as it comes (:meth:`chunks`); :meth:`close` when done with it."""

    def __init__(self, client: Http1, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int,
                 headers: list[tuple[bytes, bytes]], head_only: bool) -> None:
        self.status = status
        self.headers = headers  # names in lower case
        self._client, self._reader, self._writer = client, reader, writer
        self._length: int | None = None
        self._chunked = False
        keep = True
        for name, value in headers:
            if name == b"content-length":
                self._length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                self._chunked = True
            elif name == b"connection" and b"close" in value.lower():
                keep = False
        if head_only or status in (204, 304) or 100 <= status < 200:
            self._length = 0
        self._reusable = keep and (self._chunked or self._length is not None)
        self._done = False

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, decoded of its transfer encoding, as it arrives."""
        reader = self._reader
        try:
            if self._chunked:
                while True:
                    size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
                    if size == 0:
                        while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                            pass
                        break
                    data = await reader.readexactly(size + 2)
                    yield data[:-2]
            elif self._length is not None:
                left = self._length
                while left:
                    data = await reader.read(min(left, _CHUNK))
                    if not data:
                        raise HttpError("the upstream closed the connection mid-answer")
                    left -= len(data)
                    yield data
            else:
                while data := await reader.read(_CHUNK):
                    yield data
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, ConnectionError) as exc:
            self._reusable = False
            raise HttpError(f"the upstream broke its answer off: {type(exc).__name__}") from None
        self._done = True

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    def close(self) -> None:
        """Give the connection back when the body was read to its end (else it is closed)."""
        if self._done and self._reusable and not self._reader.at_eof():
            self._client._idle.append((self._reader, self._writer, time.monotonic()))
        else:
            self._writer.close()
        self._done, self._reusable = False, False


class Http1:
    """Requests to one origin (``url``: http or https) over kept-alive connections."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        default_port = (parts.scheme == "https" and self.port == 443) or (parts.scheme == "http" and self.port == 80)
        self._host_header = (self.host if default_port else f"{self.host}:{self.port}").encode()
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []  # and since when

    async def request(self, method: str, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> Response:
        """Send a request; the response once its head arrived.

        Raises:
            HttpError: the upstream cannot be reached, or closed the connection before it answered.
        """
        head = [f"{method} {self.target} HTTP/1.1\r\n".encode(), b"host: ", self._host_header, b"\r\n"]
        for name, value in headers:
            head += [name, b": ", value, b"\r\n"]
        if body or method == "POST":
            head += [b"content-length: ", str(len(body)).encode(), b"\r\n"]
        payload = b"".join([*head, b"\r\n", body])
        while self._idle:
            reader, writer, since = self._idle.pop()
            idle = time.monotonic() - since
            if reader.at_eof() or writer.is_closing() or idle > _KEEP:
                writer.close()
                continue
            try:
                return await self._exchange(reader, writer, payload, method)
            except (HttpError, ConnectionError):
                writer.close()
                if idle < _STALE:  # (a request on a connection just used: the upstream may have run it)
                    raise HttpError("the upstream closed the connection before it answered") from None
                # an idle connection the upstream closed as the request went: it never saw it, so a new one
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self._ssl, limit=_HEAD_LIMIT)
        except OSError as exc:
            raise Unreachable(f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}") from None
        try:
            return await self._exchange(reader, writer, payload, method)
        except ConnectionError as exc:  # (an upstream dying as it accepted: reset, not refused)
            writer.close()
            raise HttpError(f"the upstream closed the connection before it answered ({exc})") from None
        except BaseException:
            writer.close()
            raise

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes,
                        method: str) -> Response:
        writer.write(payload)
        try:
            await writer.drain()
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            raise HttpError("the upstream closed the connection before it answered") from None
        except asyncio.LimitOverrunError:
            raise HttpError("the upstream's answer has a head above 64 KiB") from None
        lines = raw[:-4].split(b"\r\n")
        try:
            status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise HttpError(f"the upstream's answer is not HTTP: {lines[0][:80]!r}") from None
        headers = []
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers.append((name.strip().lower(), value.strip()))
        return Response(self, reader, writer, status, headers, method == "HEAD")

    def close(self) -> None:
        for _, writer, _ in self._idle:
            writer.close()
        self._idle.clear()
