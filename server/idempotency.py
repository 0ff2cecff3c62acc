"""``Idempotency-Key``: a write retried with the same key is answered once and committed once.

A client that lost the connection cannot tell whether its write was committed. With a key
(any string of 1 to 200 visible characters, unique per write, e.g. a UUID), the answer is
committed *in the same transaction* as the write, under (caller, key), and a retry gets
that very answer back, byte for byte, without committing anything. A retry that arrives
while the first attempt is still in flight waits for it. The same key with another request
(method, path or body) is refused with 422: it is a client bug, not a retry.

Only successful writes are remembered; an error commits nothing, so a retry redoes the work.

Replicas sharing a database: a retry may reach another replica while the first attempt is
still in flight there. Both then try to commit the key; the database's primary key lets one
win, and the other, whose write is rolled back whole, answers what the winner stored. A write
that loses any other race (:class:`~server.storage.Conflict`: a session advanced or closed by
another replica) is computed again from what the database holds, a few times at most.
"""
from __future__ import annotations

import asyncio
import hashlib
import random
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ._http import ApiError
from .storage import Conflict
from .storage.rows import IdempotencyRow

Entry = Callable[[int, bytes], IdempotencyRow]  # (status, response) → the row to commit with the write
_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
_ATTEMPTS = 16  # a write that loses this many races in a row answers 503


def request_hash(method: str, path: str, body: bytes) -> str:
    return hashlib.sha256(method.encode() + b" " + path.encode() + b"\n" + body).hexdigest()


class IdempotencyKeys:
    """The in-flight keys of one server (the committed ones are in the database)."""

    def __init__(self, storage: Any) -> None:
        self._storage = storage
        self._inflight: dict[tuple[str, str], asyncio.Future[None]] = {}

    async def run(self, principal: str, key: str | None, fingerprint: str,
                  work: Callable[[Entry | None], Awaitable[tuple[int, bytes]]]) -> tuple[int, bytes]:
        """``work(entry)`` once per (principal, key); ``work`` must commit ``entry(status, body)``
        with its write (``Storage.remember``). Without a key, just ``work(None)``."""
        if key is None:
            return await _retried(work, None)
        if not _KEY.match(key):
            raise ApiError(422, "invalid_request", "header.idempotency-key: 1 to 200 visible ASCII characters",
                           field="header.idempotency-key")
        slot = (principal, key)
        while (pending := self._inflight.get(slot)) is not None:
            await asyncio.shield(pending)
        stored = self._stored(principal, key, fingerprint)
        if stored is not None:
            return stored
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inflight[slot] = done
        try:
            entry: Entry = lambda status, body: IdempotencyRow(principal, key, fingerprint, status, body, time.time())  # noqa: E731
            for attempt in range(_ATTEMPTS):
                try:
                    return await work(entry)
                except (Conflict, ApiError) as exc:
                    # another replica may have committed this very key meanwhile: then that is the answer
                    stored = self._stored(principal, key, fingerprint)
                    if stored is not None:
                        return stored
                    if not isinstance(exc, Conflict):
                        raise
                    await _back_off(attempt)
            raise _lost()
        finally:
            del self._inflight[slot]
            done.set_result(None)


    def _stored(self, principal: str, key: str, fingerprint: str) -> tuple[int, bytes] | None:
        row = self._storage.idempotent(principal, key)
        if row is None:
            return None
        if row["request_hash"] != fingerprint:
            raise ApiError(422, "idempotency_key_reused", f"Idempotency-Key {key!r} was used for another "
                           "request; use a new key for every write", field="header.idempotency-key")
        return int(row["status"]), bytes(row["response"])


async def _retried(work: Callable[[Entry | None], Awaitable[tuple[int, bytes]]],
                   entry: Entry | None) -> tuple[int, bytes]:
    """``work(entry)``, again while it loses races to other replicas (it recomputes from the database)."""
    for attempt in range(_ATTEMPTS):
        try:
            return await work(entry)
        except Conflict:
            await _back_off(attempt)
    raise _lost()


async def _back_off(attempt: int) -> None:
    """A short random pause before recomputing: writers racing for one session's next step would
    otherwise collide again in lock step (several in-flight steps on one session, or replicas)."""
    await asyncio.sleep(random.uniform(0.0, 0.001 * (1 << min(attempt, 6))))


def _lost() -> ApiError:
    return ApiError(503, "storage_conflict", f"the write lost {_ATTEMPTS} races in a row to other replicas; "
                    "retry it", headers={"Retry-After": "1"})
