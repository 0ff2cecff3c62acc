"""Human approvals: who is waiting on which, and waking them when it is resolved.

The database is the truth; this only holds the asyncio events of long-polling
requests. A resolution on this server passes through :meth:`ApprovalHub.resolved`; one on
another replica sharing the database arrives as a notification (:mod:`server.replicas`).
"""
from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

APPROVAL_STATUSES = ("pending", "approved", "rejected", "cancelled")


class ApprovalHub:
    """Events for approvals someone waits on, and the count of pending ones (for metrics)."""

    def __init__(self, pending: int = 0) -> None:
        self.pending = pending
        self._events: dict[str, _Waiters] = {}
        self.generation = 0  # bumped on every creation or resolution: what the console long-polls on
        # the same, per tenant: a caller sees the changes of its own tenants only (not others' timings)
        self._by_tenant: Counter[str] = Counter()
        self._changed: asyncio.Event | None = None

    def _bump(self, tenant: str, count: int = 1) -> None:
        self.generation += count
        self._by_tenant[tenant] += count
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def generation_of(self, tenants: frozenset[str] | None) -> int:
        """The generation ``tenants`` see (None: every tenant's, for admins)."""
        return self.generation if tenants is None else sum(self._by_tenant[t] for t in tenants)

    async def changes(self, since: int, timeout: float, tenants: frozenset[str] | None = None) -> int:
        """Wait until the generation ``tenants`` see differs from ``since`` (or ``timeout`` passes);
        return it. Another tenant's change wakes the wait, which then goes on waiting."""
        deadline = time.monotonic() + timeout
        while (seen := self.generation_of(tenants)) == since and (left := deadline - time.monotonic()) > 0:
            if self._changed is None:
                self._changed = asyncio.Event()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                break
        return seen if seen != since else self.generation_of(tenants)

    def created(self, tenant: str, count: int = 1) -> None:
        if count:
            self.pending += count
            self._bump(tenant, count)

    def resolved(self, approval_ids: Iterable[str], tenant: str) -> None:
        """Wake everyone waiting on these approvals of ``tenant`` (call after the resolution is committed)."""
        approval_ids = list(approval_ids)
        if approval_ids:
            self._bump(tenant, len(approval_ids))
        for approval_id in approval_ids:
            self.pending = max(0, self.pending - 1)
            waiters = self._events.pop(approval_id, None)
            if waiters is not None:
                waiters.event.set()

    def wake(self, approval_ids: Iterable[str]) -> None:
        """Wake the waiters of approvals another replica resolved (the pending count is its business)."""
        for approval_id in approval_ids:
            waiters = self._events.pop(approval_id, None)
            if waiters is not None:
                waiters.event.set()

    async def wait(self, approval_id: str, timeout: float) -> bool:
        """Wait until the approval is resolved or ``timeout`` passes; True if it was resolved.

        The caller must have seen it pending *without awaiting since*: then a resolution
        cannot slip in between the check and the wait (everything runs on one loop).
        """
        waiters = self._events.get(approval_id)
        if waiters is None:
            waiters = self._events[approval_id] = _Waiters(asyncio.Event())
        waiters.count += 1
        try:
            await asyncio.wait_for(waiters.event.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            waiters.count -= 1
            # drop the entry once nobody waits on it, so abandoned waits do not pile up
            if waiters.count == 0 and self._events.get(approval_id) is waiters:
                del self._events[approval_id]


@dataclass(slots=True, eq=False)
class _Waiters:
    event: asyncio.Event
    count: int = 0
