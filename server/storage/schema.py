"""The database's tables, their version and their migration, and the errors of the database.

The tables themselves are :mod:`forewarn.guard.store_schema`'s (SQLite's SQL), shared with the MCP
proxy's audit store, which writes the same file format without this package's extra. PostgreSQL's
adapter (:mod:`forewarn.server.storage.postgres`) creates the same tables in its own types.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

from ...errors import ForewarnError, InputError
from ...guard import store_schema
from ...guard.store_schema import BACKFILL_HELD, LEGACY_HELD_PER_BYTE, SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "BACKFILL_HELD", "LEGACY_HELD_PER_BYTE"]  # names other modules import through this one

# LISTEN/NOTIFY channels of a shared (PostgreSQL) database: what other replicas must hear about
CHANNEL_APPROVALS = "forewarn_approvals"  # payload: resolved approval ids, comma-separated
CHANNEL_MODELS = "forewarn_models"        # payload: the model name whose current version changed
CHANNEL_SESSIONS = "forewarn_sessions"    # payload: a session closed or migrated: drop it from caches


class StorageError(ForewarnError):
    """The database cannot be opened or used (wrong schema, locked, disk trouble)."""


class OverBudget(InputError):
    """A write would take a tenant past a bound on what it may hold (``limit``: the setting's name);
    nothing of it is committed."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class DatabaseLocked(StorageError):
    """Another server already uses this database."""


class Conflict(StorageError):
    """A write lost a race to another one (a step number or an idempotency key already taken, a session
    closed meanwhile): nothing of it is committed; the caller reloads what it holds and tries again."""


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Create what is missing, check the schema version, add the columns an older database lacks
    (:func:`forewarn.guard.store_schema.migrate`)."""
    store_schema.migrate(conn, path, StorageError, "this server")
