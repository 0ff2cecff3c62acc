"""The server's database: sessions, every committed decision (the audit log), approvals,
proposals, the answers to idempotent requests, models.

Two backends share every table, write job and query: SQLite (one server, a file) and
PostgreSQL (:mod:`forewarn.server.storage.postgres`, shared by replicas). :func:`open_storage` picks one
from the database's name.

Modules, one concept each: ``schema`` (the tables, their version and migration, the errors),
``backend`` (write jobs, the connection they get, group commit, the interface a backend
implements), ``writer`` (SQLite's group-commit writers and its checkpointer), ``sessions``
(sessions and steps), ``approvals`` (approvals and proposals), ``base`` (``StorageBase``: all
the jobs and queries, with idempotency records and models), ``sqlite`` (``Storage``, the SQLite
backend). Everything other modules use is importable from here.
"""
from __future__ import annotations

from pathlib import Path

from .base import StorageBase
from .schema import (
    CHANNEL_APPROVALS,
    CHANNEL_MODELS,
    CHANNEL_SESSIONS,
    SCHEMA_VERSION,
    Conflict,
    DatabaseLocked,
    OverBudget,
    StorageError,
)
from .sqlite import Storage

__all__ = ["Storage", "StorageBase", "StorageError", "DatabaseLocked", "Conflict", "OverBudget", "SCHEMA_VERSION", "open_storage",
           "is_postgres", "CHANNEL_APPROVALS", "CHANNEL_MODELS", "CHANNEL_SESSIONS"]


def is_postgres(db: str | Path) -> bool:
    return isinstance(db, str) and db.startswith(("postgresql://", "postgres://"))


def open_storage(db: str | Path, *, synchronous: str = "normal") -> StorageBase:
    """The database ``db`` names: a ``postgresql://`` URL (shared by replicas) or a SQLite file."""
    if is_postgres(db):
        from .postgres import PgStorage  # psycopg is an optional extra: imported only when used

        return PgStorage.open(str(db))
    return Storage.open(db, synchronous=synchronous)
