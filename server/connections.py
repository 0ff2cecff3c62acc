"""Connection-level limits uvicorn does not set by itself: a header deadline and a connection cap.

uvicorn closes a keep-alive connection that stays idle, but a client that sends half
a request line and then nothing holds its connection (and a slot) forever. The
protocol below gives every request ``header_timeout`` seconds from its first byte (or
from the connection, for the first request) to finish its headers, and refuses
connections beyond ``max_connections`` by closing them at once. Body reads have their
own deadline in the app (``server._middleware.BodyLimit``), which answers 408.
"""
from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["guarded_protocol"]


class _GuardedH11(H11Protocol):
    header_timeout: float = 10.0
    max_connections: int = 1000
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self.transport.close()  # the peer sees a reset; the slots stay with those already served
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._between_requests():
            self._arm()
        super().data_received(data)
        if not self._between_requests():  # the headers are in: the request is the app's now
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._between_requests() and not self.transport.is_closing():
            self.transport.close()


def guarded_protocol(*, header_timeout: float, max_connections: int) -> type[Any]:
    """An h11 protocol class for ``uvicorn.Config(http=...)`` with these limits."""
    return type("GuardedH11", (_GuardedH11,), {"header_timeout": header_timeout,
                                               "max_connections": max_connections})
