"""What a replica hears from the others through the shared database (PostgreSQL ``LISTEN/NOTIFY``).

The database stays the truth: these only make a replica *notice* sooner what another one
committed. An approval resolved elsewhere wakes the requests long-polling it here; a session
closed or migrated elsewhere is dropped from this replica's cache (its next step resumes it
from the last row); a model made current elsewhere is loaded here, off the event loop, and then
swapped in with one assignment, as a local replacement is. Were a notification lost (the
listener reconnecting), a long poll still answers at its timeout from the database, and a
stale session is caught when its step is committed (:func:`server.storage.sessions._check_chain`).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio

from ..errors import ForewarnError
from .storage import CHANNEL_APPROVALS, CHANNEL_MODELS, CHANNEL_SESSIONS

log = logging.getLogger("forewarn.server")


class Replication:
    """Notifications of one replica, handled on its event loop."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self._models = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        listener = getattr(self.state.storage, "listener", None)
        if listener is not None:  # a shared database; SQLite has no other replica to hear from
            listener.deliver = lambda channel, payload: loop.call_soon_threadsafe(self.heard, channel, payload)

    def heard(self, channel: str, payload: str) -> None:
        if self.state.stopping:
            return
        if channel == CHANNEL_APPROVALS:
            self.state.hub.wake(payload.split(","))
        elif channel == CHANNEL_SESSIONS:
            self.state.sessions.drop(payload)
        elif channel == CHANNEL_MODELS:
            task = asyncio.get_running_loop().create_task(self.follow_models())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def follow_models(self) -> None:
        """Serve, for every name, the version the database says is current."""
        registry = self.state.registry
        async with self._models:
            for name, version in self.state.storage.current_models().items():
                if registry.current_version(name) == version:
                    continue
                try:  # parsing and compiling a model takes a while: not on the loop
                    await anyio.to_thread.run_sync(registry.version, version)
                except ForewarnError as exc:  # made current by another replica, refused here
                    registry.refuse(name, version, exc)
                    continue
                async with registry.lock(name):
                    # read again under the lock: while it was loading, an upload here may have made a
                    # newer version current (this replica hears its own notifications too); following
                    # what was read before would serve an older model again
                    if self.state.storage.current_models().get(name) == version:
                        registry.follow(name, version)
