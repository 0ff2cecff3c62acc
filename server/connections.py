"""Connection-level limits uvicorn does not set by itself: a header deadline and connection caps.

uvicorn closes a keep-alive connection that stays idle, but a client that sends half
a request line and then nothing holds its connection (and a slot) forever. The
protocol below gives every request ``header_timeout`` seconds from its first byte (or
from the connection, for the first request) to finish its headers, refuses connections
beyond ``max_connections`` by closing them at once, and refuses a client address's
connections beyond ``max_per_client``: one address that opens slow connections and
reconnects whenever it is cut off then holds a few slots, not all of them. Behind a reverse
proxy every connection comes from the proxy's address: set ``max_per_client`` to 0 there and
let the proxy cap per client (docs/security.md). Body reads have their own deadline in the app
(``server._middleware.BodyLimit``), which answers 408.

At the cap, a new connection is not simply refused when a *stalled* one holds a slot: the
connection whose request has been incomplete the longest (headers or body not yet all in, for
more than ``evict_stalled_after`` seconds) is closed to make room. Slow clients from many addresses
(issue 36: 1,200 dripping bodies from 100 addresses, past the per-address cap's reach) then take
each other's slots, not those of requests that arrive whole in milliseconds. The stalled ones are
kept in the order they stalled (a dict per server), so finding the oldest costs O(1).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


class _GuardedH11(H11Protocol):
    header_timeout: float = 10.0
    max_connections: int = 1000
    max_per_client: int = 0  # 0: no cap per client address
    evict_stalled_after: float | None = None  # None: at the cap, refuse the new connection
    _header_timer: asyncio.TimerHandle | None = None
    _stalled_since: float | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self._too_many_from_client() or (len(self.connections) > self.max_connections
                                            and not self._evict_stalled()):
            self.transport.close()  # the peer sees a reset; the slots stay with those already served
            return
        self._stall()  # until its first request's headers and body are in
        self._arm()

    def _stalled(self) -> dict[_GuardedH11, float]:
        """This server's connections with a request incomplete, oldest first (insertion order)."""
        stalled: dict[_GuardedH11, float] | None = getattr(self.server_state, "forewarn_stalled", None)
        if stalled is None:
            stalled = {}
            self.server_state.forewarn_stalled = stalled  # type: ignore[attr-defined]
        return stalled

    def _stall(self) -> None:
        if self.evict_stalled_after is not None and self._stalled_since is None:
            self._stalled_since = time.monotonic()
            self._stalled()[self] = self._stalled_since

    def _unstall(self) -> None:
        if self._stalled_since is not None:
            self._stalled_since = None
            self._stalled().pop(self, None)

    def _evict_stalled(self) -> bool:
        """Close the connection stalled the longest, if past ``evict_stalled_after``: room for this one."""
        if self.evict_stalled_after is None:
            return False
        stalled = self._stalled()
        oldest = next(iter(stalled), None)
        if oldest is None or time.monotonic() - stalled[oldest] < self.evict_stalled_after:
            return False
        oldest._unstall()
        oldest._disarm()
        oldest.transport.close()  # its request, if the app has it, sees a disconnect
        self.connections.discard(oldest)  # the slot is free now, not when the loop reports the close
        return True

    def _too_many_from_client(self) -> bool:
        if not self.max_per_client or self.client is None:
            return False
        host = self.client[0]
        # a scan, not a shared counter: nothing to keep right when connections die in odd ways,
        # and at most max_connections entries are looked at, only when a connection opens
        same = 0
        for other in self.connections:
            peer = getattr(other, "client", None)
            if peer is not None and peer[0] == host:
                same += 1
                if same > self.max_per_client:
                    return True
        return False

    def data_received(self, data: bytes) -> None:
        if self._between_requests():
            self._arm()
            self._stall()
        super().data_received(data)
        if not self._between_requests():  # the headers are in: the request is the app's now
            self._disarm()
            if not self.cycle.more_body:  # and its body too: nothing more is waited for
                self._unstall()

    def on_response_complete(self) -> None:
        self._unstall()  # answered (perhaps before its body was read): idle until its next request
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._unstall()
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


def guarded_protocol(*, header_timeout: float, max_connections: int, max_per_client: int = 0,
                     evict_stalled_after: float | None = None) -> type[Any]:
    """An h11 protocol class for ``uvicorn.Config(http=...)`` with these limits."""
    return type("GuardedH11", (_GuardedH11,), {"header_timeout": header_timeout,
                                               "max_connections": max_connections,
                                               "max_per_client": max_per_client,
                                               "evict_stalled_after": evict_stalled_after})
