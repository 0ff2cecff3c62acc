"""The SQLite backend: one server's database file, its lock, its writer, its reader.

Durability: with ``synchronous=NORMAL`` a commit has reached the operating system before the
handler answers, so a killed server process (``kill -9``) loses nothing it answered; a power
loss or kernel crash may lose the last commits. FULL survives those too.

Reads go through a second, read-only connection used from the event loop thread;
in WAL mode readers never wait for the writer.
"""
from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ...errors import ForewarnError
from .backend import _SqliteConn
from .base import StorageBase
from .schema import DatabaseLocked, StorageError, migrate
from .writer import _Checkpointer, _connect, _LoopWriter, _ThreadWriter

T = TypeVar("T")


class Storage(StorageBase):
    """The database of one server. Open with :meth:`open`, close with :meth:`close`.

    :meth:`write` must be awaited on the event loop that serves requests; :meth:`write_sync`
    is for start-up, before that loop runs.
    """

    def __init__(self, path: Path, writer: _LoopWriter | _ThreadWriter, checkpointer: _Checkpointer,
                 reader: sqlite3.Connection, lock_fd: int) -> None:
        self.path = path
        self._writer = writer
        self._checkpointer = checkpointer
        self.reader = reader
        self._lock_fd = lock_fd
        self.closed = False

    @classmethod
    def open(cls, path: str | Path, *, synchronous: str = "normal") -> Storage:
        """Open (creating if needed) the database at ``path`` and start its writer.

        Raises:
            DatabaseLocked: another server process has it open.
            StorageError: it is not a Forewarn database of this schema, or cannot be opened.
        """
        path = Path(path)
        if not path.parent.exists():
            raise StorageError(f"{path}: the folder {path.parent} does not exist")
        # One server per database: live sessions (their next step number) are held in memory,
        # so a second writer would hand out the same step twice. flock dies with the process,
        # even on kill -9, so a crashed server never leaves a stale lock behind.
        try:
            lock_fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StorageError(f"{path}: cannot create the lock file: {exc.strerror}") from exc
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise DatabaseLocked(f"{path}: the database is in use by another forewarn server") from None
        os.ftruncate(lock_fd, 0)
        os.write(lock_fd, f"{os.getpid()}\n".encode())
        try:
            conn = _open_writer(path, synchronous)
            writer: _LoopWriter | _ThreadWriter
            if synchronous == "full":
                writer = _ThreadWriter(conn)
                writer.start()
            else:
                writer = _LoopWriter(conn)
            reader = _connect(path, readonly=True)
        except BaseException as exc:
            os.close(lock_fd)
            if isinstance(exc, ForewarnError):
                raise
            raise StorageError(f"{path}: cannot open the database: {exc}") from exc
        checkpointer = _Checkpointer(path)
        checkpointer.start()
        return cls(path, writer, checkpointer, reader, lock_fd)

    def close(self) -> None:
        """Commit whatever is queued, checkpoint, close (the WAL file is removed on a clean close)."""
        if self.closed:
            return
        self.closed = True
        self._checkpointer.close()
        self._writer.close()
        self.reader.close()
        os.close(self._lock_fd)

    # -- writing ----------------------------------------------------------------------

    @property
    def writer_alive(self) -> bool:
        return self._writer.alive and not self.closed

    @property
    def commits(self) -> int:
        """Group commits so far (each may hold many writes)."""
        return self._writer.commits

    def write(self, fn: Callable[[_SqliteConn], T]) -> asyncio.Future[T]:
        """Run ``fn`` in the writer's next transaction; the future resolves once it is committed."""
        if self.closed:
            raise StorageError("the database is closed")
        return self._writer.submit(fn)

    def write_sync(self, fn: Callable[[_SqliteConn], T]) -> T:
        """Blocking :meth:`write`, for start-up and tools (never while the event loop serves)."""
        if self.closed:
            raise StorageError("the database is closed")
        return self._writer.run_sync(fn)  # type: ignore[no-any-return]

    def _all(self, sql: str, params: tuple[Any, ...]) -> list[sqlite3.Row]:
        return _all(self.reader, sql, params)


def _open_writer(path: Path, synchronous: str) -> sqlite3.Connection:
    conn = _connect(path)
    conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
    conn.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer thread does it, off the commit path
    conn.execute(f"PRAGMA journal_size_limit={64 << 20}")  # after a checkpoint, the WAL file shrinks back
    migrate(conn, path)
    return conn


def _all(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> list[sqlite3.Row]:
    cursor = conn.execute(sql, params)
    cursor.row_factory = sqlite3.Row
    return cursor.fetchall()
