"""The tables of Forewarn's database, as SQLite creates them: ``forewarn serve``'s (server/storage/) and
``forewarn mcp``'s audit store (guard/mcp/audit.py) write the same file format, so the server reads a
proxy's file. Here, below both, because the proxy does not need the server's extra (FastAPI) and the
two integrations do not import each other.

PostgreSQL's adapter (:mod:`forewarn.server.storage.postgres`) creates the same tables in its own
types. A column added after a schema version shipped goes into ``ADDED_COLUMNS``: it is added in
place to older databases when they are opened, and the version stays.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

from ..errors import ForewarnError

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS model_versions (
    version   TEXT PRIMARY KEY,        -- sha256 of the model file, first 16 hex digits
    name      TEXT NOT NULL,
    source    TEXT NOT NULL,           -- the path it was loaded from
    document  BLOB NOT NULL,           -- the file itself: sessions resume on exactly this model
    loaded_at REAL NOT NULL,
    loaded_by TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS models (    -- which version new sessions of a name get
    name TEXT PRIMARY KEY, version TEXT NOT NULL, updated_at REAL NOT NULL,
    signed_at REAL                     -- its signature's time: a replacement signed before it loses (rollback)
);
CREATE TABLE IF NOT EXISTS sessions (
    id            TEXT PRIMARY KEY,
    model_name    TEXT NOT NULL,
    model_version TEXT NOT NULL,
    policy        TEXT,                -- JSON overrides, as given
    metadata      TEXT,                -- JSON, as given
    created_at    REAL NOT NULL,
    created_by    TEXT NOT NULL,
    closed_at     REAL,
    closed_by     TEXT
);
CREATE INDEX IF NOT EXISTS sessions_open ON sessions (model_name) WHERE closed_at IS NULL;
-- One row per committed step: the audit log. A rowid table, not WITHOUT ROWID keyed by (session, step):
-- a row (the decision as answered, about 1 KB) is too large for the latter, where it would spill
-- into an overflow page of its own and make each commit write several times the data.
CREATE TABLE IF NOT EXISTS decisions (
    id            INTEGER PRIMARY KEY,
    session_id    TEXT NOT NULL,
    step          INTEGER NOT NULL,
    at            REAL NOT NULL,
    principal     TEXT NOT NULL,       -- who posted the step
    model_version TEXT NOT NULL,
    input_hash    TEXT NOT NULL,       -- sha256 of the canonical JSON of {state, action, t}
    abstract      INTEGER NOT NULL,    -- the abstract state's bit mask: all a session needs to resume
    monitors      TEXT,                -- monitor states after the step (JSON), once models have monitors
    action_in     TEXT,                -- the agent's action (JSON), as given
    t             REAL,
    state         TEXT,                -- the concrete state (JSON), only with store_states
    action        TEXT NOT NULL,       -- the guard's action
    p_unsafe      REAL,
    decision      TEXT NOT NULL,       -- the whole decision (JSON), as answered
    approval_id   TEXT,
    UNIQUE (session_id, step)
);
CREATE TABLE IF NOT EXISTS approvals (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL,
    step        INTEGER NOT NULL,
    created_at  REAL NOT NULL,
    status      TEXT NOT NULL,         -- pending, approved, rejected, cancelled
    resolved_at REAL,
    resolved_by TEXT,
    reason      TEXT
);
CREATE INDEX IF NOT EXISTS approvals_status ON approvals (status, created_at);
CREATE INDEX IF NOT EXISTS approvals_session ON approvals (session_id);
-- Answers to writes sent with an Idempotency-Key, committed with the write itself: a retry gets
-- the stored answer and commits nothing new.
CREATE TABLE IF NOT EXISTS idempotency (
    principal    TEXT NOT NULL,
    key          TEXT NOT NULL,
    request_hash TEXT NOT NULL,        -- sha256 of method, path and body: a key reused for another request is refused
    status       INTEGER NOT NULL,
    response     BLOB NOT NULL,
    at           REAL NOT NULL,
    PRIMARY KEY (principal, key)
);
-- Proposals (issue 13): a tool call the agent wants to run, judged on the state it would lead to before
-- it runs; one that needs approval waits here (status pending) for a human. Nothing is in `decisions`
-- until the call ran and the agent observes it with the proposal's id (then `step` links the two).
CREATE TABLE IF NOT EXISTS proposals (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL,
    created_at  REAL NOT NULL,
    created_by  TEXT NOT NULL,
    tool        TEXT NOT NULL,
    arguments   TEXT NOT NULL,         -- JSON, as proposed
    tools       TEXT,                  -- JSON list of the agent's tools (what an edit may switch to)
    decision    TEXT NOT NULL,         -- the guard's decision on the proposed state (JSON)
    status      TEXT NOT NULL,         -- allowed, held, pending, approved, rejected, edited, cancelled, executed
    resolved_at REAL,
    resolved_by TEXT,
    reason      TEXT,
    edited      TEXT,                  -- JSON {tool, arguments, decision?} of an edit
    step        INTEGER                -- the committed step that ran it
);
CREATE INDEX IF NOT EXISTS proposals_status ON proposals (status, created_at);
CREATE INDEX IF NOT EXISTS proposals_session ON proposals (session_id);
"""

# A tenant's open sessions with the memory their metadata holds, for its sum (limits.max_tenant_metadata_bytes):
# covering, so the sum reads the index, never the metadata's own (overflow) pages
_TENANT_INDEX = ("CREATE INDEX IF NOT EXISTS sessions_open_held ON sessions (coalesce(tenant, created_by),"
                 " metadata_held) WHERE closed_at IS NULL")

# Columns added after schema version 1 shipped: added in place to older databases.
ADDED_COLUMNS = [("sessions", "tenant", "TEXT"), ("models", "signed_at", "REAL"),
                 ("sessions", "metadata_held", "INTEGER")]
# What an older database's open sessions hold, when metadata_held is added: a bound from the JSON's length
# (no JSON value costs CPython more than 32 bytes of memory per byte of its text; see server._http.held_bytes)
LEGACY_HELD_PER_BYTE = 32
BACKFILL_HELD = ("UPDATE sessions SET metadata_held = {per_byte} * {length} WHERE metadata IS NOT NULL"
                 " AND metadata_held IS NULL AND closed_at IS NULL")


def migrate(conn: sqlite3.Connection, path: Path, error: type[ForewarnError], who: str) -> None:
    """Create what is missing, check the schema version, add the columns an older database lacks.
    A file of another version raises ``error`` (``who``: what opens it, for the message)."""
    conn.executescript(_SCHEMA)
    _check_schema(conn, path, error, who)
    for table, column, kind in ADDED_COLUMNS:
        if column not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
            if column == "metadata_held":
                conn.execute(BACKFILL_HELD.format(per_byte=LEGACY_HELD_PER_BYTE, length="length(CAST(metadata AS BLOB))"))
    # after the columns: an older database has no tenant column before this point
    conn.execute(_TENANT_INDEX)


def _check_schema(conn: sqlite3.Connection, path: Path, error: type[ForewarnError], who: str) -> None:
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if row is None:
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    elif row[0] != str(SCHEMA_VERSION):
        raise error(f"{path}: database schema version {row[0]} is not supported "
                    f"({who} uses version {SCHEMA_VERSION})")
