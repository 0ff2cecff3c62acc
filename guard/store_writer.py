"""Group commit in a thread of its own: the write path that ``forewarn serve``'s database (SQLite under
``synchronous=FULL``, PostgreSQL) and the MCP proxy's audit store (guard/mcp/audit.py) share.

Jobs (small functions of a connection) queue up; the thread takes what is queued (after waiting
``linger`` seconds for more, when given) and runs it in one transaction, so a burst of writes costs one
commit. If the transaction fails, each job runs in its own, so one bad job cannot sink the others
that shared it. Each job's outcome goes to its ``deliver`` callback, in the writer thread: the server
hands it to an awaiting request, the proxy only logs a failure (nothing on a call's path waits for
the disk). Here, below both integrations, because the proxy does not need the server's extra.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Job = Callable[[Any], Any]  # a SQLite connection, or PostgreSQL's adapter offering the same interface
Deliver = Callable[[Any, BaseException | None], None]
STOP = object()  # queued: the writer commits what it took before it, then ends
MAX_GROUP = 512


@dataclass(slots=True)
class Queued:
    fn: Job
    deliver: Deliver


def commit_group(conn: Any, fns: Sequence[Job], begin: str = "BEGIN IMMEDIATE",
                 wrap: Callable[[Exception], Exception] = lambda exc: exc) -> list[tuple[Any, BaseException | None]]:
    """Run ``fns`` in one transaction; if that fails, each in its own, so one bad job cannot sink
    the others that happened to share its transaction. One (result, error) per job; ``wrap`` turns a
    job's own error into what its caller is told."""
    try:
        conn.execute(begin)
        results = [fn(conn) for fn in fns]
        conn.execute("COMMIT")
        return [(result, None) for result in results]
    except Exception:
        rollback(conn)
    outcomes: list[tuple[Any, BaseException | None]] = []
    for fn in fns:
        try:
            conn.execute(begin)
            result = fn(conn)
            conn.execute("COMMIT")
            outcomes.append((result, None))
        except Exception as exc:
            rollback(conn)
            outcomes.append((None, wrap(exc)))
    return outcomes


def rollback(conn: Any) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except Exception:
            pass


class GroupWriter(threading.Thread):
    """The thread that commits queued jobs in groups on ``conn`` (which it closes when it ends).

    ``linger``: seconds to wait after a group's first job for others to join it (0: take what is
    queued at once). ``jobs`` may be shared by several writers (PostgreSQL's adapter: one takes the
    next group while another commits); ``begin`` is the statement a transaction starts with."""

    def __init__(self, conn: Any, *, name: str, linger: float = 0.0,
                 wrap: Callable[[Exception], Exception] = lambda exc: exc) -> None:
        super().__init__(name=name, daemon=True)
        self.conn, self.linger, self.wrap = conn, linger, wrap
        self.begin = "BEGIN IMMEDIATE"
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.commits = 0
        self._flush = threading.Event()  # set: stop lingering (closing)

    @property
    def alive(self) -> bool:
        return self.is_alive()

    def put(self, fn: Job, deliver: Deliver) -> None:
        self.jobs.put(Queued(fn, deliver))

    def run(self) -> None:
        try:
            while True:
                first = self.jobs.get()
                if first is STOP:
                    break
                if self.linger:  # (one wake-up per group: waking for each row would cost more than the rows)
                    self._flush.wait(self.linger)
                group = [first]
                stop = False
                while len(group) < MAX_GROUP:
                    try:
                        item = self.jobs.get_nowait()
                    except queue.Empty:
                        break
                    if item is STOP:
                        stop = True
                        break
                    group.append(item)
                outcomes = commit_group(self.conn, [job.fn for job in group], self.begin, self.wrap)
                self.commits += 1
                for job, (result, exc) in zip(group, outcomes):
                    job.deliver(result, exc)
                if stop:
                    break
        finally:
            self.conn.close()

    def close(self, timeout: float | None = 30) -> None:
        """Commit everything queued before this, then end."""
        self.jobs.put(STOP)
        self._flush.set()
        self.join(timeout=timeout)
