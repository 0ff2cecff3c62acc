"""SQLite's writers: one connection writes, and it commits in *groups*.

Writes that queue up while a commit is being prepared share one transaction, so a burst of
concurrent steps costs one commit instead of one each. A request handler hands the writer a
small function (a job) and awaits its commit; only then does it answer.

Where the commit runs depends on what it costs:

* ``synchronous=NORMAL`` (the default): a WAL commit is a ``write()`` into the page
  cache, tens of microseconds, so it runs on the event loop thread itself, flushed once
  per loop iteration (:class:`_LoopWriter`). A thread hop would cost more: the writer
  thread has to win the GIL from a busy event loop, and Python hands it over only every 5 ms.
* ``synchronous=FULL``: each group commit fsyncs (milliseconds), so a writer thread
  does it (:class:`_ThreadWriter`, which PostgreSQL's adapter uses too), and the event loop
  keeps serving meanwhile (SQLite releases the GIL while it waits for the disk).

Checkpoints (copying the WAL back into the database file, with an fsync) are taken off
the commit path: automatic checkpoints are off and a background thread runs passive
ones (:class:`_Checkpointer`), which never block the writer.
"""
from __future__ import annotations

import asyncio
import sqlite3
import threading
from concurrent.futures import Future as SyncFuture
from pathlib import Path
from typing import Any

from ...guard.store_writer import STOP, GroupWriter
from .backend import Job, _commit_group, _conflict, _settle, _SqliteConn
from .schema import StorageError

__all__: list[str] = []


_STOP = STOP
_CHECKPOINT_SECONDS = 0.5


class _LoopWriter:
    """Group commit on the event loop thread (cheap commits: synchronous=NORMAL)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.pending: list[tuple[Job, asyncio.Future[Any]]] = []
        self.scheduled = False
        self.commits = 0
        self.alive = True

    def submit(self, fn: Job) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self.pending.append((fn, future))
        if not self.scheduled:
            # after the callbacks already queued: the steps of this loop iteration commit together
            self.scheduled = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self.scheduled = False
        group, self.pending = self.pending, []
        if not group:
            return
        outcomes = _commit_group(self.conn, [fn for fn, _ in group])
        self.commits += 1
        for (_, future), (result, exc) in zip(group, outcomes):
            _settle(future, result, exc)

    def run_sync(self, fn: Job) -> Any:
        result, exc = _commit_group(self.conn, [fn])[0]
        if exc is not None:
            raise exc
        return result

    def close(self) -> None:
        self._flush()  # nothing is left behind: pending jobs commit now
        self.alive = False
        self.conn.close()


class _ThreadWriter(GroupWriter):
    """Group commit in a thread of its own (expensive commits: synchronous=FULL fsyncs each), with
    answers for those who await them (:class:`forewarn.guard.store_writer.GroupWriter`)."""

    def __init__(self, conn: Any) -> None:
        super().__init__(conn, name="forewarn-sqlite-writer", wrap=_conflict)

    def submit(self, fn: Job) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def deliver(result: Any, exc: BaseException | None) -> None:
            loop.call_soon_threadsafe(_settle, future, result, exc)

        self.put(fn, deliver)
        return future

    def run_sync(self, fn: Job) -> Any:
        future: SyncFuture[Any] = SyncFuture()

        def deliver(result: Any, exc: BaseException | None) -> None:
            if exc is None:
                future.set_result(result)
            else:
                future.set_exception(exc)

        self.put(fn, deliver)
        return future.result()


class _Checkpointer(threading.Thread):
    """Passive WAL checkpoints every half second, on a connection of its own: they never block
    the writer, and their fsync never delays an answer."""

    def __init__(self, path: Path) -> None:
        super().__init__(name="forewarn-sqlite-checkpoint", daemon=True)
        self.path = path
        self.stop = threading.Event()

    def run(self) -> None:
        conn = _connect(self.path)
        try:
            while not self.stop.wait(_CHECKPOINT_SECONDS):
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error:
                    pass  # busy or locked: the next round will do
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.join(timeout=30)


def _connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN/COMMIT ourselves, so a transaction spans exactly the
    # jobs of one group; check_same_thread=False because the reader is made in one thread and
    # used in the event loop's.
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0, factory=_SqliteConn)
    conn.execute("PRAGMA busy_timeout=30000")
    if readonly:
        conn.execute("PRAGMA query_only=1")
    else:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StorageError(f"{path}: cannot switch the database to WAL mode (got {mode!r})")
    return conn
