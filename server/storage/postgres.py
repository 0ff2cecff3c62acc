"""PostgreSQL storage: the same tables, jobs and queries as SQLite, shared by any number of replicas.

``FOREWARN_DB=postgresql://…`` selects it. What changes against SQLite is only what
sharing needs:

* No file lock: every ``forewarn serve`` process (replica) may write. A step is committed
  only if it extends the row its replica saw last, on an open session of the same model
  version (:func:`server.storage.sessions._check_chain`); the unique (session, step) key settles two
  replicas at once. The loser gets :class:`~server.storage.Conflict`, drops its cached
  session, reloads it from the last row and computes the step again.
* Writes that others must hear about ``NOTIFY`` in their transaction (delivered on commit):
  approvals resolved, current models changed, sessions closed or migrated. A listener
  thread per replica hands them to the event loop (:mod:`server.replicas`).
* Commits are durable (``synchronous_commit`` as the server has it, ``on`` by default):
  group commit in writer threads (two, sharing one queue), as SQLite's ``synchronous=full``;
  a killed replica loses nothing it answered.

Reads are short indexed queries on a pooled connection, from the event loop thread.
psycopg is the ``postgres`` extra and is imported only here.
"""
from __future__ import annotations

import asyncio
import logging
import re
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .base import StorageBase
from .schema import (
    BACKFILL_HELD,
    CHANNEL_APPROVALS,
    CHANNEL_MODELS,
    CHANNEL_SESSIONS,
    LEGACY_HELD_PER_BYTE,
    SCHEMA_VERSION,
    StorageError,
)
from .writer import _STOP, _ThreadWriter

T = TypeVar("T")
log = logging.getLogger("forewarn.server")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS model_versions (
    version TEXT PRIMARY KEY, name TEXT NOT NULL, source TEXT NOT NULL, document BYTEA NOT NULL,
    loaded_at DOUBLE PRECISION NOT NULL, loaded_by TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS models (
    name TEXT PRIMARY KEY, version TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL, signed_at DOUBLE PRECISION);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, model_name TEXT NOT NULL, model_version TEXT NOT NULL, policy TEXT, metadata TEXT,
    created_at DOUBLE PRECISION NOT NULL, created_by TEXT NOT NULL, closed_at DOUBLE PRECISION, closed_by TEXT,
    tenant TEXT, metadata_held BIGINT);
CREATE INDEX IF NOT EXISTS sessions_open ON sessions (model_name) WHERE closed_at IS NULL;
CREATE INDEX IF NOT EXISTS sessions_open_held ON sessions ((coalesce(tenant, created_by)), metadata_held)
    WHERE closed_at IS NULL;
CREATE TABLE IF NOT EXISTS decisions (
    id BIGSERIAL PRIMARY KEY, session_id TEXT NOT NULL, step BIGINT NOT NULL, at DOUBLE PRECISION NOT NULL,
    principal TEXT NOT NULL, model_version TEXT NOT NULL, input_hash TEXT NOT NULL, abstract BIGINT NOT NULL,
    monitors TEXT, action_in TEXT, t DOUBLE PRECISION, state TEXT, action TEXT NOT NULL,
    p_unsafe DOUBLE PRECISION, decision TEXT NOT NULL, approval_id TEXT, UNIQUE (session_id, step));
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY, session_id TEXT NOT NULL, step BIGINT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
    status TEXT NOT NULL, resolved_at DOUBLE PRECISION, resolved_by TEXT, reason TEXT);
CREATE INDEX IF NOT EXISTS approvals_status ON approvals (status, created_at);
CREATE INDEX IF NOT EXISTS approvals_session ON approvals (session_id);
CREATE TABLE IF NOT EXISTS idempotency (
    principal TEXT NOT NULL, key TEXT NOT NULL, request_hash TEXT NOT NULL, status INTEGER NOT NULL,
    response BYTEA NOT NULL, at DOUBLE PRECISION NOT NULL, PRIMARY KEY (principal, key));
CREATE TABLE IF NOT EXISTS proposals (
    id TEXT PRIMARY KEY, session_id TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, created_by TEXT NOT NULL,
    tool TEXT NOT NULL, arguments TEXT NOT NULL, tools TEXT, decision TEXT NOT NULL, status TEXT NOT NULL,
    resolved_at DOUBLE PRECISION, resolved_by TEXT, reason TEXT, edited TEXT, step BIGINT);
CREATE INDEX IF NOT EXISTS proposals_status ON proposals (status, created_at);
CREATE INDEX IF NOT EXISTS proposals_session ON proposals (session_id);
"""
# Columns added after schema version 1 shipped (also in the CREATE above): added to older databases
_ADDED_COLUMNS = [("models", "signed_at", "DOUBLE PRECISION"), ("sessions", "metadata_held", "BIGINT")]
_SWITCH_INTERVAL = 0.0005
# Writer connections per replica, taking groups from one queue: a step that arrives while a group
# commits starts its own transaction at once instead of waiting a whole fsync for its turn
# (PostgreSQL flushes concurrent commits together). Steps of one session that land in two groups
# committing out of order are caught by the chain check and computed again.
_WRITERS = 2
_CHANNELS = (CHANNEL_APPROVALS, CHANNEL_MODELS, CHANNEL_SESSIONS)
_MARK = re.compile(r"\?")
_SQL: dict[str, str] = {}


def _sql(sql: str) -> str:
    """``?`` placeholders as psycopg's ``%s`` (our SQL has no other ``?`` or ``%``), cached."""
    out = _SQL.get(sql)
    if out is None:
        out = _SQL[sql] = _MARK.sub("%s", sql)
    return out


class Row(tuple):  # type: ignore[type-arg]
    """A row readable by position and by column name, like ``sqlite3.Row`` (and ``dict(row)`` works)."""

    __slots__ = ()
    names: tuple[str, ...] = ()

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self.names.index(key))
        return tuple.__getitem__(self, key)

    def keys(self) -> tuple[str, ...]:
        return self.names


def _row_factory(cursor: Any) -> Callable[[Any], Row]:
    names = tuple(column.name for column in cursor.description or ())
    kind = type("Row", (Row,), {"__slots__": (), "names": names})
    return lambda values: kind(bytes(v) if isinstance(v, memoryview) else v for v in values)


class _Conn:
    """A psycopg connection as write jobs see it: SQLite's ``?`` SQL, ``shared`` and ``notify``."""

    shared = True

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.conn.execute(_sql(sql), params or None)

    def executemany(self, sql: str, rows: Any) -> Any:
        cursor = self.conn.cursor()
        cursor.executemany(_sql(sql), rows)
        return cursor

    def notify(self, channel: str, payload: str) -> None:
        self.conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        return bool(self.conn.info.transaction_status != TransactionStatus.IDLE)

    def close(self) -> None:
        self.conn.close()


class _Listener(threading.Thread):
    """LISTENs on the replica channels and hands each notification to ``deliver(channel, payload)``."""

    def __init__(self, url: str) -> None:
        super().__init__(name="forewarn-pg-listen", daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.deliver: Callable[[str, str], None] = lambda channel, payload: None
        self.ready = threading.Event()

    def run(self) -> None:
        import psycopg

        while not self.stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    for channel in _CHANNELS:
                        conn.execute(f"LISTEN {channel}")
                    self.ready.set()
                    while not self.stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            self.deliver(note.channel, note.payload)
            except Exception as exc:  # the database restarted: listen again (waiters time out meanwhile)
                if not self.stop.is_set():
                    log.warning("PostgreSQL listener reconnecting: %s", exc)
                    self.stop.wait(1.0)

    def close(self) -> None:
        self.stop.set()
        self.join(timeout=5)


class PgStorage(StorageBase):
    """The database of any number of replicas. Open with :meth:`open`, close with :meth:`close`."""

    shared = True
    POSITION = "strpos({}, ?)"

    def __init__(self, url: str, pool: Any, writers: list[_ThreadWriter], listener: _Listener) -> None:
        self.path = url
        self._pool = pool
        self._writers = writers
        self._writer = writers[0]
        self.listener = listener
        self.closed = False

    @classmethod
    def open(cls, url: str) -> PgStorage:
        """Connect, create the tables if needed, start the writer and the listener.

        Raises:
            StorageError: psycopg is not installed, the server cannot be reached, or the schema differs.
        """
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError as exc:
            raise StorageError(f"FOREWARN_DB is a PostgreSQL URL but psycopg is not installed ({exc.name}): "
                               "pip install 'forewarn[postgres]'") from None
        where = _redact(url)
        try:
            with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
                # replicas starting together: one creates the tables, the others wait for it; and no DDL
                # once they exist (CREATE INDEX IF NOT EXISTS still locks its table: it would stall, even
                # deadlock, the steps of running replicas)
                if conn.execute("SELECT to_regclass('meta') IS NULL").fetchone() == (True,):
                    conn.execute("SELECT pg_advisory_xact_lock(7461636)")
                    conn.execute(_SCHEMA)
                row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                if row is None:
                    conn.execute("INSERT INTO meta VALUES ('schema_version', %s) ON CONFLICT DO NOTHING",
                                 (str(SCHEMA_VERSION),))
                elif row[0] != str(SCHEMA_VERSION):
                    raise StorageError(f"{where}: database schema version {row[0]} is not supported "
                                       f"(this server uses version {SCHEMA_VERSION})")
                for table, column, kind in _ADDED_COLUMNS:  # added after version 1 shipped; DDL only if missing
                    if conn.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
                                    " AND table_name=%s AND column_name=%s", (table, column)).fetchone() is None:
                        conn.execute("SELECT pg_advisory_xact_lock(7461636)")
                        conn.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")
                        if column == "metadata_held":
                            conn.execute(BACKFILL_HELD.format(per_byte=LEGACY_HELD_PER_BYTE,
                                                              length="octet_length(metadata)"))
                            conn.execute("CREATE INDEX IF NOT EXISTS sessions_open_held ON sessions"
                                         " ((coalesce(tenant, created_by)), metadata_held) WHERE closed_at IS NULL")
            pool = ConnectionPool(url, min_size=2, max_size=4, open=True, timeout=30,
                                  kwargs={"autocommit": True, "row_factory": _row_factory})
            pool.wait(timeout=30)
            writers = [_ThreadWriter(_Conn(pool.getconn())) for _ in range(_WRITERS)]
        except StorageError:
            raise
        except Exception as exc:
            raise StorageError(f"{where}: cannot open the database: {' '.join(str(exc).split())}") from exc
        for i, writer in enumerate(writers):
            writer.name, writer.begin = f"forewarn-pg-writer-{i}", "BEGIN"
            writer.jobs = writers[0].jobs  # one queue: a writer takes the next group while another commits
            writer.start()
        # Each round trip of the writer thread ends with winning the GIL back from the busy event loop,
        # which Python hands over every switch interval (5 ms): a commit of a few round trips would
        # wait that long several times. 0.5 ms bounds it; the loop thread loses little by it.
        sys.setswitchinterval(min(sys.getswitchinterval(), _SWITCH_INTERVAL))
        listener = _Listener(url)
        listener.start()
        listener.ready.wait(10)
        return cls(url, pool, writers, listener)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for _ in self._writers:  # one stop each, after everything queued; each writer takes one
            self._writer.jobs.put(_STOP)
        for writer in self._writers:
            writer.join(timeout=30)  # it committed what it took, then closed its connection
        self.listener.close()
        self._pool.close()

    @property
    def writer_alive(self) -> bool:
        return all(writer.alive for writer in self._writers) and not self.closed

    @property
    def commits(self) -> int:
        return sum(writer.commits for writer in self._writers)

    def write(self, fn: Callable[[Any], T]) -> asyncio.Future[T]:
        if self.closed:
            raise StorageError("the database is closed")
        return self._writer.submit(fn)

    def write_sync(self, fn: Callable[[Any], T]) -> T:
        if self.closed:
            raise StorageError("the database is closed")
        return self._writer.run_sync(fn)  # type: ignore[no-any-return]

    def _all(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        with self._pool.connection() as conn:
            return conn.execute(_sql(sql), params or None).fetchall()  # type: ignore[no-any-return]


def _redact(url: str) -> str:
    """The URL without its password, for messages."""
    return re.sub(r"://([^:/@]+):[^@/]*@", r"://\1:***@", url)
