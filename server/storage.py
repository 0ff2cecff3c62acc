"""SQLite storage: sessions, every committed decision (the audit log), approvals, models.

One connection writes, and it commits in *groups*: writes that queue up while a
commit is being prepared share one transaction, so a burst of concurrent steps costs
one commit instead of one each. A request handler hands the writer a small function
and awaits its commit; only then does it answer.

Where the commit runs depends on what it costs:

* ``synchronous=NORMAL`` (the default): a WAL commit is a ``write()`` into the page
  cache, tens of microseconds, so it runs on the event loop thread itself, flushed once
  per loop iteration. A thread hop would cost more: the writer thread has to win the
  GIL from a busy event loop, and Python hands it over only every 5 ms.
* ``synchronous=FULL``: each group commit fsyncs (milliseconds), so a writer thread
  does it, and the event loop keeps serving meanwhile (SQLite releases the GIL while
  it waits for the disk).

Checkpoints (copying the WAL back into the database file, with an fsync) are taken off
the commit path: automatic checkpoints are off and a background thread runs passive
ones, which never block the writer.

Durability: with NORMAL a commit has reached the operating system before the handler
answers, so a killed server process (``kill -9``) loses nothing it answered; a power
loss or kernel crash may lose the last commits. FULL survives those too.

Reads go through a second, read-only connection used from the event loop thread;
in WAL mode readers never wait for the writer.
"""
from __future__ import annotations

import asyncio
import fcntl
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future as SyncFuture
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from forewarn.guard.errors import ForewarnError

__all__ = ["Storage", "StorageBase", "StorageError", "DatabaseLocked", "Conflict", "SCHEMA_VERSION", "open_storage",
           "is_postgres"]

SCHEMA_VERSION = 1
# LISTEN/NOTIFY channels of a shared (PostgreSQL) database: what other replicas must hear about
CHANNEL_APPROVALS = "forewarn_approvals"  # payload: resolved approval ids, comma-separated
CHANNEL_MODELS = "forewarn_models"        # payload: the model name whose current version changed
CHANNEL_SESSIONS = "forewarn_sessions"    # payload: a session closed or migrated: drop it from caches
T = TypeVar("T")
Job = Callable[[sqlite3.Connection], Any]

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
    name TEXT PRIMARY KEY, version TEXT NOT NULL, updated_at REAL NOT NULL
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

# Columns added after schema version 1 shipped: added in place to older databases.
_ADDED_COLUMNS = [("sessions", "tenant", "TEXT")]


class StorageError(ForewarnError):
    """The database cannot be opened or used (wrong schema, locked, disk trouble)."""


class DatabaseLocked(StorageError):
    """Another server already uses this database."""


class Conflict(StorageError):
    """A write lost a race to another one (a step number or an idempotency key already taken, a session
    closed meanwhile): nothing of it is committed; the caller reloads what it holds and tries again."""


class _SqliteConn(sqlite3.Connection):
    """The connection write jobs get (PostgreSQL's adapter offers the same two extras)."""

    shared = False  # one server process owns the database: no other writer to check against

    def notify(self, channel: str, payload: str) -> None:
        """Tell the other replicas (none here)."""


@dataclass(slots=True)
class _Job:
    fn: Job
    deliver: Callable[[Any, BaseException | None], None]


_STOP = object()
_MAX_GROUP = 512
_CHECKPOINT_SECONDS = 0.5


def _commit_group(conn: Any, fns: Sequence[Job], begin: str = "BEGIN IMMEDIATE"
                  ) -> list[tuple[Any, BaseException | None]]:
    """Run ``fns`` in one transaction; if that fails, each in its own, so one bad job cannot sink
    the others that happened to share its transaction. One (result, error) per job."""
    try:
        conn.execute(begin)
        results = [fn(conn) for fn in fns]
        conn.execute("COMMIT")
        return [(result, None) for result in results]
    except Exception:
        _rollback(conn)
    outcomes: list[tuple[Any, BaseException | None]] = []
    for fn in fns:
        try:
            conn.execute(begin)
            result = fn(conn)
            conn.execute("COMMIT")
            outcomes.append((result, None))
        except Exception as exc:
            _rollback(conn)
            outcomes.append((None, _conflict(exc)))
    return outcomes


def _conflict(exc: Exception) -> Exception:
    """A unique-key violation is a lost race (:class:`Conflict`); anything else stays what it is."""
    if isinstance(exc, sqlite3.IntegrityError) or type(exc).__name__ in ("UniqueViolation", "SerializationFailure",
                                                                    "DeadlockDetected"):
        return Conflict(f"a concurrent write got there first: {exc}")
    return exc


def _open_writer(path: Path, synchronous: str) -> sqlite3.Connection:
    conn = _connect(path)
    conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
    conn.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer thread does it, off the commit path
    conn.execute(f"PRAGMA journal_size_limit={64 << 20}")  # after a checkpoint, the WAL file shrinks back
    conn.executescript(_SCHEMA)
    _check_schema(conn, path)
    for table, column, kind in _ADDED_COLUMNS:
        if column not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    return conn


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


class _ThreadWriter(threading.Thread):
    """Group commit in a thread of its own (expensive commits: synchronous=FULL fsyncs each)."""

    def __init__(self, conn: Any) -> None:
        super().__init__(name="forewarn-sqlite-writer", daemon=True)
        self.conn = conn
        self.begin = "BEGIN IMMEDIATE"
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.commits = 0

    @property
    def alive(self) -> bool:
        return self.is_alive()

    def run(self) -> None:
        try:
            while True:
                first = self.jobs.get()
                if first is _STOP:
                    break
                group = [first]
                stop = False
                while len(group) < _MAX_GROUP:
                    try:
                        item = self.jobs.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stop = True
                        break
                    group.append(item)
                outcomes = _commit_group(self.conn, [job.fn for job in group], self.begin)
                self.commits += 1
                for job, (result, exc) in zip(group, outcomes):
                    job.deliver(result, exc)
                if stop:
                    break
        finally:
            self.conn.close()

    def submit(self, fn: Job) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def deliver(result: Any, exc: BaseException | None) -> None:
            loop.call_soon_threadsafe(_settle, future, result, exc)

        self.jobs.put(_Job(fn, deliver))
        return future

    def run_sync(self, fn: Job) -> Any:
        future: SyncFuture[Any] = SyncFuture()

        def deliver(result: Any, exc: BaseException | None) -> None:
            if exc is None:
                future.set_result(result)
            else:
                future.set_exception(exc)

        self.jobs.put(_Job(fn, deliver))
        return future.result()

    def close(self) -> None:
        self.jobs.put(_STOP)  # after everything queued before it
        self.join(timeout=30)


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


def _rollback(conn: Any) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except Exception:
            pass


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


def _check_schema(conn: sqlite3.Connection, path: Path) -> None:
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if row is None:
        conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    elif row[0] != str(SCHEMA_VERSION):
        raise StorageError(f"{path}: database schema version {row[0]} is not supported "
                           f"(this server uses version {SCHEMA_VERSION})")


class StorageBase:
    """What both backends share: the write jobs and the read queries, in SQL both speak
    (``?`` placeholders; the PostgreSQL adapter rewrites them). A write job gets a connection
    with ``execute``/``executemany``, ``shared`` (other replicas write too) and ``notify``."""

    closed: bool

    def _all(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        raise NotImplementedError

    def _one(self, sql: str, params: tuple[Any, ...]) -> Any:
        rows = self._all(sql, params)
        return rows[0] if rows else None

    def _count(self, sql: str, params: tuple[Any, ...]) -> int:
        return int(self._all(sql, params)[0][0])

    @property
    def writer_alive(self) -> bool:  # each backend says
        raise NotImplementedError

    # -- write jobs (run in the writer thread) -------------------------------------------

    @staticmethod
    def remember(entry: tuple[Any, ...] | None, job: Job) -> Job:
        """``job``, and in the same transaction the answer of an idempotent request
        ``(principal, key, request_hash, status, response, at)``; with ``entry`` None, just ``job``."""
        if entry is None:
            return job

        def both(conn: sqlite3.Connection) -> Any:
            result = job(conn)
            conn.execute("INSERT INTO idempotency VALUES (?,?,?,?,?,?)", entry)
            return result
        return both

    @staticmethod
    def insert_steps(rows: Sequence[tuple[Any, ...]], approvals: Sequence[tuple[Any, ...]],
                     prev: Sequence[tuple[str, int, int, str | None]] = ()) -> Job:
        """Insert step rows (and their approvals). ``prev``: for each step after the first, (session,
        step - 1, abstract, monitors) as the replica that computed it saw them. On a shared database
        the step is committed only if that is still the session's last row and the session is open;
        otherwise :class:`Conflict` (the unique (session, step) key catches two replicas at once)."""
        def job(conn: Any) -> None:
            if conn.shared:
                _check_chain(conn, {row[0]: row[4] for row in rows}, prev)
            conn.executemany(
                "INSERT INTO decisions (session_id, step, at, principal, model_version, input_hash, abstract,"
                " monitors, action_in, t, state, action, p_unsafe, decision, approval_id)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            if approvals:
                conn.executemany("INSERT INTO approvals (id, session_id, step, created_at, status)"
                                 " VALUES (?,?,?,?,'pending')", approvals)
        return job

    @staticmethod
    def insert_session(row: tuple[Any, ...]) -> Job:
        def job(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO sessions (id, model_name, model_version, policy, metadata, created_at,"
                         " created_by, tenant) VALUES (?,?,?,?,?,?,?,?)", row)
        return job

    @staticmethod
    def close_session(session_id: str, at: float, by: str) -> Job:
        """Close an open session and cancel its pending approvals; returns their ids."""
        def job(conn: sqlite3.Connection) -> list[str]:
            conn.execute("UPDATE sessions SET closed_at=?, closed_by=? WHERE id=? AND closed_at IS NULL",
                         (at, by, session_id))
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM approvals WHERE session_id=? AND status='pending'", (session_id,))]
            conn.execute("UPDATE approvals SET status='cancelled', resolved_at=?, resolved_by=?,"
                         " reason='session closed' WHERE session_id=? AND status='pending'",
                         (at, by, session_id))
            conn.notify(CHANNEL_SESSIONS, session_id)
            if ids:
                conn.notify(CHANNEL_APPROVALS, ",".join(ids))
            return ids
        return job

    @staticmethod
    def resolve_approval(approval_id: str, status: str, at: float, by: str, reason: str | None,
                         remember: tuple[Any, ...] | None = None) -> Job:
        """Resolve a pending approval; returns False when it was not pending (or does not exist).
        ``remember``: an idempotency row, committed only if this call resolved it."""
        def job(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute("UPDATE approvals SET status=?, resolved_at=?, resolved_by=?, reason=?"
                                  " WHERE id=? AND status='pending'", (status, at, by, reason, approval_id))
            changed = cursor.rowcount == 1
            if changed and remember is not None:
                conn.execute("INSERT INTO idempotency VALUES (?,?,?,?,?,?)", remember)
            if changed:
                conn.notify(CHANNEL_APPROVALS, approval_id)
            return changed
        return job

    @staticmethod
    def put_model(name: str, version: str, source: str, document: bytes, by: str, *, current: bool) -> Job:
        def job(conn: sqlite3.Connection) -> None:
            now = time.time()
            conn.execute("INSERT INTO model_versions VALUES (?,?,?,?,?,?) ON CONFLICT (version) DO NOTHING",
                         (version, name, source, document, now, by))
            if current:
                conn.execute("INSERT INTO models VALUES (?,?,?) ON CONFLICT(name) DO UPDATE SET"
                             " version=excluded.version, updated_at=excluded.updated_at", (name, version, now))
                conn.notify(CHANNEL_MODELS, name)
        return job

    @staticmethod
    def forget_idempotency(before: float) -> Job:
        """Drop the answers to idempotent writes older than ``before`` (a retry comes within seconds)."""
        def job(conn: sqlite3.Connection) -> int:
            return int(conn.execute("DELETE FROM idempotency WHERE at < ?", (before,)).rowcount)
        return job

    @staticmethod
    def migrate_sessions(name: str, version: str, ids: Iterable[str]) -> Job:
        ids = list(ids)

        def job(conn: sqlite3.Connection) -> None:
            conn.executemany("UPDATE sessions SET model_version=? WHERE id=? AND model_name=?",
                             [(version, i, name) for i in ids])
            for i in ids:  # replicas holding them reload them on their new version
                conn.notify(CHANNEL_SESSIONS, i)
        return job

    # -- reading (event loop thread; SQL shared by both backends) -------------------------------------------------------

    def session_row(self, session_id: str) -> sqlite3.Row | None:
        return self._one("SELECT * FROM sessions WHERE id=?", (session_id,))

    def open_sessions(self, model_name: str | None = None) -> list[str]:
        if model_name is None:
            rows = self._all("SELECT id FROM sessions WHERE closed_at IS NULL", ())
        else:
            rows = self._all("SELECT id FROM sessions WHERE closed_at IS NULL AND model_name=?", (model_name,))
        return [r[0] for r in rows]

    def list_sessions(self, *, status: str | None, limit: int, offset: int,
                      tenants: Iterable[str] | None = None) -> list[sqlite3.Row]:
        clauses = [{"open": "closed_at IS NULL", "closed": "closed_at IS NOT NULL"}.get(status or "", "TRUE")]
        params: list[Any] = []
        if tenants is not None:
            scope = sorted(tenants)
            clauses.append(f"{_TENANT} IN ({','.join('?' * len(scope))})")
            params += scope
        return self._all(f"SELECT s.*, (SELECT count(*) FROM decisions d WHERE d.session_id=s.id) AS steps"
                                 f" FROM sessions s WHERE {' AND '.join(clauses)} ORDER BY created_at DESC"
                                 f" LIMIT ? OFFSET ?", (*params, limit, offset))

    def last_step(self, session_id: str) -> tuple[int, int, str | None] | None:
        """(step, abstract, monitors) of the last committed step: all a resume needs (an index look-up)."""
        row = self._one("SELECT step, abstract, monitors FROM decisions WHERE session_id=?"
                        " ORDER BY step DESC LIMIT 1", (session_id,))
        return None if row is None else (int(row[0]), int(row[1]), row[2])

    def idempotent(self, principal: str, key: str) -> sqlite3.Row | None:
        return self._one("SELECT * FROM idempotency WHERE principal=? AND key=?", (principal, key))

    def history(self, session_id: str) -> list[tuple[int, int, str | None, str | None, float | None]]:
        """(step, abstract, monitors, action_in, t) of every committed step, in order."""
        return self._all(  # type: ignore[return-value]
            "SELECT step, abstract, monitors, action_in, t FROM decisions WHERE session_id=? ORDER BY step",
            (session_id,))

    def steps(self, session_id: str, *, limit: int, offset: int) -> list[sqlite3.Row]:
        return self._all("SELECT * FROM decisions WHERE session_id=? ORDER BY step LIMIT ? OFFSET ?",
                    (session_id, limit, offset))

    def step_count(self, session_id: str) -> int:
        return self._count("SELECT count(*) FROM decisions WHERE session_id=?", (session_id,))

    def approval(self, approval_id: str) -> sqlite3.Row | None:
        return self._one(_APPROVAL_SELECT + " WHERE a.id=?", (approval_id,))

    def approvals(self, *, status: str | None, session_id: str | None, limit: int, offset: int,
                  tenants: Iterable[str] | None = None) -> list[sqlite3.Row]:
        clauses: list[str] = []
        params: list[Any] = []
        if tenants is not None:
            scope = sorted(tenants)
            clauses.append(f"a.session_id IN (SELECT s.id FROM sessions s WHERE {_TENANT} IN "
                           f"({','.join('?' * len(scope))}))")
            params += scope
        if status is not None:
            clauses.append("a.status=?")
            params.append(status)
        if session_id is not None:
            clauses.append("a.session_id=?")
            params.append(session_id)
        where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        return self._all(_APPROVAL_SELECT + where + " ORDER BY a.created_at, a.id LIMIT ? OFFSET ?",
                    (*params, limit, offset))

    # -- proposals (issue 13): jobs and queries both backends share -----------------------

    @staticmethod
    def insert_proposal(row: tuple[Any, ...]) -> Job:
        """``row``: (id, session_id, created_at, created_by, tool, arguments, tools, decision, status)."""
        def job(conn: Any) -> None:
            conn.execute("INSERT INTO proposals (id, session_id, created_at, created_by, tool, arguments, tools,"
                         " decision, status) VALUES (?,?,?,?,?,?,?,?,?)", row)
        return job

    @staticmethod
    def resolve_proposal(proposal_id: str, status: str, at: float, by: str, reason: str | None,
                         edited: str | None) -> Job:
        """Resolve a pending proposal; returns False when it was not pending."""
        def job(conn: Any) -> bool:
            cursor = conn.execute("UPDATE proposals SET status=?, resolved_at=?, resolved_by=?, reason=?, edited=?"
                                  " WHERE id=? AND status='pending'", (status, at, by, reason, edited, proposal_id))
            changed = cursor.rowcount == 1
            if changed:
                conn.notify(CHANNEL_APPROVALS, proposal_id)  # wakes its waiters on every replica
            return changed
        return job

    @staticmethod
    def execute_proposal(proposal_id: str, step: int) -> Job:
        """Mark a proposal as run by committed ``step`` (in the step's own transaction)."""
        def job(conn: Any) -> None:
            conn.execute("UPDATE proposals SET status='executed', step=? WHERE id=?", (step, proposal_id))
        return job

    @staticmethod
    def cancel_proposals(session_id: str, at: float, by: str) -> Job:
        """Cancel a closing session's pending proposals; returns their ids."""
        def job(conn: Any) -> list[str]:
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM proposals WHERE session_id=? AND status='pending'", (session_id,))]
            conn.execute("UPDATE proposals SET status='cancelled', resolved_at=?, resolved_by=?,"
                         " reason='session closed' WHERE session_id=? AND status='pending'", (at, by, session_id))
            if ids:
                conn.notify(CHANNEL_APPROVALS, ",".join(ids))
            return ids
        return job

    def proposal(self, proposal_id: str) -> Any:
        return self._one(f"{_PROPOSAL_SELECT} WHERE p.id=?", (proposal_id,))

    def proposals(self, *, status: str | None, session_id: str | None, limit: int, offset: int,
                  tenants: Iterable[str] | None = None) -> list[Any]:
        where: list[str] = []
        params: list[Any] = []
        if status is not None:
            where.append("p.status=?")
            params.append(status)
        if session_id is not None:
            where.append("p.session_id=?")
            params.append(session_id)
        if tenants is not None:
            scope = sorted(tenants)
            where.append(f"{_TENANT} IN ({','.join('?' * len(scope))})")
            params.extend(scope)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        return self._all(f"{_PROPOSAL_SELECT}{clause} ORDER BY p.created_at, p.id LIMIT ? OFFSET ?",
                         (*params, limit, offset))

    def session_risk(self, session_id: str) -> list[tuple[int, float, float | None]]:
        """(step, at, p_unsafe) of every committed step of a session: its risk over time."""
        return [(int(r[0]), float(r[1]), r[2]) for r in self._all(
            "SELECT step, at, p_unsafe FROM decisions WHERE session_id=? ORDER BY step", (session_id,))]

    def count_open_sessions(self) -> int:
        return self._count("SELECT count(*) FROM sessions WHERE closed_at IS NULL", ())

    def count_pending_approvals(self) -> int:
        return self._count("SELECT count(*) FROM approvals WHERE status='pending'", ())

    def current_models(self) -> dict[str, str]:
        return {row[0]: row[1] for row in self._all("SELECT name, version FROM models", ())}

    def model_version(self, version: str) -> sqlite3.Row | None:
        return self._one("SELECT * FROM model_versions WHERE version=?", (version,))


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

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Run ``fn`` in the writer's next transaction; the future resolves once it is committed."""
        if self.closed:
            raise StorageError("the database is closed")
        return self._writer.submit(fn)

    def write_sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Blocking :meth:`write`, for start-up and tools (never while the event loop serves)."""
        if self.closed:
            raise StorageError("the database is closed")
        return self._writer.run_sync(fn)  # type: ignore[no-any-return]

    def _all(self, sql: str, params: tuple[Any, ...]) -> list[sqlite3.Row]:
        return _all(self.reader, sql, params)


def _check_chain(conn: Any, versions: dict[str, str], prev: Sequence[tuple[str, int, int, str | None]]) -> None:
    """Raise :class:`Conflict` unless every session is open and each step extends the row its replica
    saw last. ``FOR SHARE`` waits for a close in flight (and makes a close wait for this step)."""
    sessions = sorted(versions)
    marks = ",".join("?" * len(sessions))
    # one round trip: lock the sessions' rows and count the rows the steps extend
    chain = "0"
    params: list[Any] = list(sessions)
    if prev:
        # typed, so that PostgreSQL need not guess the types of a VALUES list
        values = ",".join("(CAST(? AS TEXT),CAST(? AS BIGINT),CAST(? AS BIGINT),CAST(? AS TEXT))" for _ in prev)
        chain = (f"(WITH p(s, n, a, m) AS (VALUES {values}) SELECT count(*) FROM decisions d JOIN p"
                 " ON d.session_id = p.s AND d.step = p.n AND d.abstract = p.a"
                 " AND d.monitors IS NOT DISTINCT FROM p.m)")
        params = [x for item in prev for x in item] + params
    rows = conn.execute(f"SELECT id, closed_at, model_version, {chain} FROM sessions WHERE id IN ({marks})"
                        " FOR SHARE", tuple(params)).fetchall()
    if len(rows) != len(sessions) or any(row[1] is not None or row[2] != versions[row[0]] for row in rows):
        raise Conflict("a session was closed or migrated by another replica")
    if int(rows[0][3]) != len(prev):
        raise Conflict("a session was advanced by another replica")


_APPROVAL_SELECT = ("SELECT a.*, d.decision AS decision, d.principal AS requested_by,"
                    " (SELECT coalesce(s.tenant, s.created_by) FROM sessions s WHERE s.id=a.session_id) AS tenant"
                    " FROM approvals a LEFT JOIN decisions d ON d.session_id=a.session_id AND d.step=a.step")
_TENANT = "coalesce(s.tenant, s.created_by)"  # sessions from before tenants belong to the key that opened them
_PROPOSAL_SELECT = ("SELECT p.*, coalesce(s.tenant, s.created_by) AS tenant, s.closed_at AS session_closed_at"
                    " FROM proposals p JOIN sessions s ON s.id=p.session_id")


def is_postgres(db: str | Path) -> bool:
    return isinstance(db, str) and db.startswith(("postgresql://", "postgres://"))


def open_storage(db: str | Path, *, synchronous: str = "normal") -> StorageBase:
    """The database ``db`` names: a ``postgresql://`` URL (shared by replicas) or a SQLite file."""
    if is_postgres(db):
        from forewarn.server.storage_pg import PgStorage  # psycopg is an optional extra: imported only when used

        return PgStorage.open(str(db))
    return Storage.open(db, synchronous=synchronous)


def _one(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> sqlite3.Row | None:
    cursor = conn.execute(sql, params)
    cursor.row_factory = sqlite3.Row
    row: sqlite3.Row | None = cursor.fetchone()
    return row


def _all(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> list[sqlite3.Row]:
    cursor = conn.execute(sql, params)
    cursor.row_factory = sqlite3.Row
    return cursor.fetchall()


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # the client went away; the write is committed all the same
        return
    if exc is None:
        future.set_result(result)
    else:
        future.set_exception(exc)
