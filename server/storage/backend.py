"""What a storage backend is: write jobs, the connection they get, how a group of them commits,
and the interface both backends (SQLite, PostgreSQL) implement.

A write job is a small function of a connection, run in the writer's next transaction. The
connection offers ``execute``/``executemany``, ``shared`` (other replicas write too) and
``notify`` (tell them, on commit). Jobs that queue up together commit together; one that fails
is retried alone, so it cannot sink the others that shared its transaction.
"""
from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ...guard.store_writer import commit_group, rollback
from .schema import Conflict

T = TypeVar("T")
Job = Callable[["_SqliteConn"], Any]  # PostgreSQL's adapter offers the same connection interface


class _SqliteConn(sqlite3.Connection):
    """The connection write jobs get (PostgreSQL's adapter offers the same two extras)."""

    shared = False  # one server process owns the database: no other writer to check against

    def notify(self, channel: str, payload: str) -> None:
        """Tell the other replicas (none here)."""


class Backend:
    """The reading primitives the shared queries use, and what each backend implements. The jobs
    and queries themselves are :class:`~server.storage.base.StorageBase`'s."""

    closed: bool
    # where a text parameter first occurs in a column (1-based; 0: nowhere), case-sensitive: the one
    # string function the two dialects name differently (PostgreSQL: strpos)
    POSITION = "instr({}, ?)"

    def _all(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        raise NotImplementedError

    def _one(self, sql: str, params: tuple[Any, ...]) -> sqlite3.Row | None:
        rows = self._all(sql, params)
        return rows[0] if rows else None

    def _count(self, sql: str, params: tuple[Any, ...]) -> int:
        return int(self._all(sql, params)[0][0])

    # -- what each backend implements ------------------------------------------------------

    def close(self) -> None:
        raise NotImplementedError

    @property
    def writer_alive(self) -> bool:  # what /readyz reports as `database`
        raise NotImplementedError

    def write(self, fn: Callable[[_SqliteConn], T]) -> asyncio.Future[T]:
        raise NotImplementedError

    def write_sync(self, fn: Callable[[_SqliteConn], T]) -> T:
        raise NotImplementedError


def _commit_group(conn: Any, fns: Sequence[Job], begin: str = "BEGIN IMMEDIATE"
                  ) -> list[tuple[Any, BaseException | None]]:
    """Run ``fns`` in one transaction, else each in its own (:func:`forewarn.guard.store_writer.commit_group`);
    a unique-key violation is a :class:`Conflict`."""
    return commit_group(conn, fns, begin, _conflict)


def _conflict(exc: Exception) -> Exception:
    """A unique-key violation is a lost race (:class:`Conflict`); anything else stays what it is."""
    if isinstance(exc, sqlite3.IntegrityError) or type(exc).__name__ in ("UniqueViolation", "SerializationFailure",
                                                                    "DeadlockDetected"):
        return Conflict(f"a concurrent write got there first: {exc}")
    return exc


_rollback = rollback


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # the client went away; the write is committed all the same
        return
    if exc is None:
        future.set_result(result)
    else:
        future.set_exception(exc)
