"""The lean HTTP relay's sessions (:mod:`.relay`): one per ``Mcp-Session-Id``, each with its guarded
session (opened at its first ``tools/call``), the lock its calls take turns on, and when it was last seen.

A session without requests for ``idle_timeout`` seconds is ended — its guarded session closed and recorded,
and the upstream told — so a client that never says DELETE does not keep it (the SDK path's default: 30
minutes). The ids of ended sessions are kept (the newest few thousand) so that a request on one is answered
404, as the MCP spec says, and the client starts a new session.
"""
from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..calls import CallJudge
from ..judge import GuardedSession

_ENDED_KEPT = 4096


@dataclass
class HttpSession:
    client: str | None
    elicits: bool
    guarded: GuardedSession | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    calls: int = 0  # its tools/call requests under way (judged and forwarded one at a time)
    seen: float = field(default_factory=time.monotonic)  # the session's last request


class HttpSessions:
    """The relay's live sessions by id (None: requests without one — initialize, a stateless upstream's), and
    the ids it ended. ``forget(sid)`` ends an idle session upstream (the relay does it in the background)."""

    def __init__(self, judge: CallJudge, idle_timeout: float, forget: Callable[[str], None]) -> None:
        self.judge = judge
        self.idle_timeout = idle_timeout
        self._forget = forget
        self._live: dict[str | None, HttpSession] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()

    def open(self, sid: str | None, client: str | None, elicits: bool) -> None:
        """A session the upstream has just started (its answer to ``initialize``)."""
        self._live[sid] = HttpSession(client, elicits)

    def of(self, sid: str | None) -> HttpSession:
        """The session ``sid`` (one the relay did not see start, or a stateless upstream's, begins now)."""
        state = self._live.get(sid)
        if state is None:
            state = self._live[sid] = HttpSession(None, False)
        return state

    def ended(self, sid: str | None) -> bool:
        return sid is not None and sid in self._ended

    def touch(self, sid: str | None) -> bool:
        """Mark the session seen; False when it was ended (now, idle past the timeout, or before)."""
        if sid is None:
            return True
        if sid in self._ended:
            return False
        state = self._live.get(sid)
        now = time.monotonic()
        if state is not None and self._stale(state, now):
            self._idle(sid)  # (before the sweep came to it)
            return False
        if state is not None:
            state.seen = now
        return True

    async def sweep(self) -> None:
        """End the sessions idle past the timeout, now and then (a quarter of it, at most a minute apart)."""
        while True:
            await asyncio.sleep(min(60.0, self.idle_timeout / 4))
            now = time.monotonic()
            for key, state in list(self._live.items()):
                if key is not None and self._stale(state, now):
                    self._idle(key)

    def end(self, sid: str | None, why: str) -> None:
        """Release the session (its guarded session closed and recorded); later requests on its id get 404."""
        state = self._live.pop(sid, None)
        if state is not None and state.guarded is not None:
            self.judge.close_session(state.guarded, why)
        if sid is not None:
            self._ended[sid] = None
            if len(self._ended) > _ENDED_KEPT:
                self._ended.popitem(last=False)

    def end_all(self, why: str) -> None:
        for key in list(self._live):
            self.end(key, why)

    def _stale(self, state: HttpSession, now: float) -> bool:
        """Idle past the timeout, with no call under way."""
        return now - state.seen > self.idle_timeout and not state.lock.locked()

    def _idle(self, sid: str) -> None:
        self.end(sid, f"idle for more than {self.idle_timeout:g} s")
        self._forget(sid)
