"""Closing sessions: on request (``POST /v1/sessions/{id}/close``) and when they have been idle too long.

An agent that never closes its sessions (a crashed process, a run abandoned mid-way) would leave
them open, in memory and in the database, for ever. ``session_idle_seconds`` (default one hour;
``FOREWARN_SESSION_IDLE_SECONDS``; null turns expiry off) bounds that: a session with no step
for that long — counted from its last step, or its creation — is closed as if its agent had
closed it, by the principal ``forewarn:idle``, its pending approvals and proposals cancelled.
The sweep runs on the event loop every quarter of that time (at most every minute).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from ..errors import ForewarnError
from ._http import ApiError, log
from ._steps import write
from .sessions import LiveSession
from .state import ServerState
from .storage import Storage

IDLE_PRINCIPAL = "forewarn:idle"


async def close_live(state: ServerState, live: LiveSession, by: str,
                     remember: Callable[[float], Any] | None = None) -> None:
    """Close an open session (no more steps; pending approvals and proposals cancelled). Closing twice is
    harmless. ``remember``: given the closing time, the idempotency record to commit with the close."""
    if live.closed:
        return
    state.sessions.closed(live)  # before the write: no step may slip in while it commits
    try:
        at = time.time()
        close, cancel = Storage.close_session(live.id, at, by), Storage.cancel_proposals(live.id, at, by)
        cancelled = await write(state, Storage.remember(None if remember is None else remember(at),
                                                        lambda conn: close(conn) + cancel(conn)))
    except ApiError:
        state.sessions.reopened(live)  # the database says it is open: so it is
        raise
    state.hub.resolved(cancelled, live.tenant)
    if cancelled:
        state.metrics.approvals_resolved.labels("cancelled").inc(len(cancelled))


async def expire_idle(state: ServerState, idle_seconds: float, *, now: float | None = None) -> list[str]:
    """Close the sessions idle for more than ``idle_seconds``; their ids."""
    before = (time.time() if now is None else now) - idle_seconds
    closed = []
    for session_id in state.storage.idle_sessions(before):
        try:
            live = state.sessions.get(session_id)
        except (ForewarnError, KeyError):  # gone, or its model version is: leave it be
            continue
        if live.inflight:  # a step is being committed right now: not idle
            continue
        await close_live(state, live, IDLE_PRINCIPAL)
        closed.append(session_id)
    if closed:
        log.info("closed %d session(s) idle for more than %g s", len(closed), idle_seconds)
    return closed


async def sweep(state: ServerState, idle_seconds: float) -> None:
    """Expire idle sessions for as long as the server runs."""
    every = min(max(idle_seconds / 4, 0.05), 60.0)
    while not state.stopping:
        await asyncio.sleep(every)
        try:
            await expire_idle(state, idle_seconds)
        except Exception:
            log.exception("the idle-session sweep failed")
