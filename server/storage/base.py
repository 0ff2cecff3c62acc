"""What both backends share: every write job and read query, in SQL both speak (``?``
placeholders; the PostgreSQL adapter rewrites them).

:class:`StorageBase` gathers them by resource: sessions and steps (:mod:`.sessions`), approvals
and proposals (:mod:`.approvals`), and here the two small ones, the answers to idempotent
requests and the models. A job is used as ``Storage.insert_session(row)``: it returns the
function the writer runs (``storage.write(job)``).
"""
from __future__ import annotations

import math
import sqlite3
import time
from typing import Any

from .approvals import ApprovalRecords
from .backend import Job, _SqliteConn
from .rows import IdempotencyRow
from .schema import CHANNEL_MODELS
from .sessions import SessionRecords


class StorageBase(SessionRecords, ApprovalRecords):
    """What both backends share: the write jobs and the read queries. A write job gets a connection
    with ``execute``/``executemany``, ``shared`` (other replicas write too) and ``notify``."""

    # -- idempotency records (``Idempotency-Key``) ------------------------------------------

    @staticmethod
    def remember(entry: IdempotencyRow | None, job: Job) -> Job:
        """``job``, and in the same transaction the answer of an idempotent request; with ``entry``
        None, just ``job``."""
        if entry is None:
            return job

        def both(conn: _SqliteConn) -> Any:
            result = job(conn)
            # a compare-and-set that lost (the job says False: nothing changed) commits no answer: the
            # caller answers 409, and a retry must see that too, not a success it never had
            if result is not False:
                conn.execute("INSERT INTO idempotency VALUES (?,?,?,?,?,?)", entry)
            return result
        return both

    @staticmethod
    def forget_idempotency(before: float) -> Job:
        """Drop the answers to idempotent writes older than ``before`` (a retry comes within seconds)."""
        def job(conn: _SqliteConn) -> int:
            return int(conn.execute("DELETE FROM idempotency WHERE at < ?", (before,)).rowcount)
        return job

    def idempotent(self, principal: str, key: str) -> sqlite3.Row | None:
        return self._one("SELECT * FROM idempotency WHERE principal=? AND key=?", (principal, key))

    # -- models ----------------------------------------------------------------------------

    @staticmethod
    def put_model(name: str, version: str, source: str, document: bytes, by: str, *, current: bool,
                  signed_at: float | None = None, newer_only: bool = False) -> Job:
        """Store a model version; with ``current``, make it the one new sessions of ``name`` get.

        ``newer_only`` (rollback protection, with trusted keys): a compare-and-set in the same
        statement: the version becomes current only if the current one of ``name`` is the same
        version, or was signed no later than ``signed_at`` (or has no signing time). The job says
        False when it lost (the version is stored, not current): another replica made a newer one
        current after this one checked what it serves."""
        def job(conn: _SqliteConn) -> bool:
            now = time.time()
            conn.execute("INSERT INTO model_versions VALUES (?,?,?,?,?,?) ON CONFLICT (version) DO NOTHING",
                         (version, name, source, document, now, by))
            if not current:
                return True
            upsert = ("INSERT INTO models (name, version, updated_at, signed_at) VALUES (?,?,?,?) ON CONFLICT(name)"
                      " DO UPDATE SET version=excluded.version, updated_at=excluded.updated_at,"
                      " signed_at=excluded.signed_at")
            params: tuple[Any, ...] = (name, version, now, signed_at)
            if newer_only:
                upsert += (" WHERE models.version = excluded.version OR models.signed_at IS NULL"
                           " OR models.signed_at <= ?")
                # a time of None compares as -inf: newer than nothing signed
                params += (-math.inf if signed_at is None else signed_at,)
            if conn.execute(upsert, params).rowcount == 0:
                return False
            conn.notify(CHANNEL_MODELS, name)
            return True
        return job

    def current_models(self) -> dict[str, str]:
        return {row[0]: row[1] for row in self._all("SELECT name, version FROM models", ())}

    def model_version(self, version: str) -> sqlite3.Row | None:
        return self._one("SELECT * FROM model_versions WHERE version=?", (version,))
