"""The proxy's local audit store (``--audit FILE``, without a sidecar): every judged call and every
step that ran, in SQLite, in the tables of ``forewarn serve``'s database.

* ``sessions``: one row per MCP session (``created_by`` ``forewarn-mcp``, the client in ``metadata``),
  closed when the client disconnects or the proxy stops;
* ``proposals``: one row per judged ``tools/call`` — ``allowed``, ``held`` (reflect or stop, the
  reason saying which), or asked about (``approved``, ``rejected``, ``edited``; ``resolved_by`` says
  how: elicitation, console, nobody); a call that then ran is ``executed`` with its ``step``;
* ``decisions``: the audit log proper, one row per committed step — step 0 the state before any
  call, then each call that ran — with the decision as the sidecar would have answered it.

The tables are the server's, created by the same code (:mod:`forewarn.guard.store_schema`, which
``server/storage/schema.py`` uses too; a test opens a proxy's file with the server's storage and reads it
back), so ``forewarn serve --db FILE`` lists these sessions and their
steps. Several proxies may share one file (SQLite's locking; WAL). Writes go to a thread of their
own and are committed in groups: nothing waits for the disk on a call's path.

Shared with the server, not copied: the tables and their migration (:mod:`forewarn.guard.store_schema`)
and the group-commit writer (:class:`forewarn.guard.store_writer.GroupWriter`, the server's
``synchronous=FULL`` and PostgreSQL writer). Not the server's ``Storage`` itself: it takes an
exclusive lock on the file (one server per database, since it holds each live session's next step in
memory), so a second proxy opening the default file gets ``DatabaseLocked`` ("the database is in use
by another forewarn server", checked), where a host starts one proxy per configured server; and it
needs the server's extra (FastAPI). What stays here is the proxy's own: three tables (tool pins,
description findings, redactions), its marks in ``meta``, and the rows it writes.

The trade-off: a row is committed within ``_LINGER`` (50 ms) of the call that made it, not before its
answer, so a proxy killed outright (``kill -9``, a crash; not a stop, which commits what is queued)
loses the rows of its last 50 ms of calls. Not silently: each proxy marks the file when it starts (a
``meta`` row ``mcp-proxy:HOST:PID``, committed before it serves) and unmarks it when it closes; the
next proxy to open the file on that host finds the mark of one no longer running, closes that
proxy's open sessions with the reason (``closed_by``) and logs a warning.
"""
from __future__ import annotations

import hashlib
import logging
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from ...errors import ConfigError
from .. import store_schema
from ..runtime import Decision, StepRecord
from ..store_writer import GroupWriter

log = logging.getLogger("forewarn.mcp")

SCHEMA_VERSION = store_schema.SCHEMA_VERSION  # a file with another version is refused
PRINCIPAL = "forewarn-mcp"

# The proxy's own tables, beside the server's (guard/store_schema.py): tool pins, description findings,
# redactions.
_PROXY_TABLES = """
CREATE TABLE IF NOT EXISTS tool_pins (
    server TEXT NOT NULL, tool TEXT NOT NULL, hash TEXT NOT NULL, description TEXT, pinned_at REAL NOT NULL,
    PRIMARY KEY (server, tool)
);
CREATE TABLE IF NOT EXISTS tool_findings (
    id INTEGER PRIMARY KEY, at REAL NOT NULL, server TEXT NOT NULL, tool TEXT NOT NULL, kind TEXT NOT NULL,
    location TEXT NOT NULL, detail TEXT NOT NULL, action TEXT NOT NULL, proxy TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS redactions (
    id INTEGER PRIMARY KEY, at REAL NOT NULL, session_id TEXT NOT NULL, tool TEXT NOT NULL, kind TEXT NOT NULL,
    location TEXT NOT NULL, start INTEGER NOT NULL, length INTEGER NOT NULL
);
"""

_Job = Callable[[sqlite3.Connection], object]
_LINGER = 0.05  # seconds a write waits for others to commit with
_MARK = "mcp-proxy:"  # meta rows of the proxies writing the file: "mcp-proxy:HOST:PID" → when it started


class AuditStore:
    """Sessions, judged calls and committed steps of one proxy, appended to the SQLite file ``path``.

    Args:
        path: the database file (created with its folder if missing).
        model_name: the name the rows carry (the model file's stem, for ``forewarn mcp``).
        model_version: the model's version (the server's: the first 16 hex digits of the sha256 of
            the model file).

    Raises:
        ConfigError: the file cannot be created or is not a Forewarn database of this schema.
    """

    def __init__(self, path: str | Path, *, model_name: str, model_version: str) -> None:
        self.path = Path(path)
        self.model_name, self.model_version = model_name, model_version
        self.host, self.proxy = socket.gethostname(), f"{socket.gethostname()}:{os.getpid()}"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = _connect(self.path)
            try:
                store_schema.migrate(conn, self.path, ConfigError, "the proxy")
                conn.executescript(_PROXY_TABLES)
                self._close_orphans(conn)
                # committed before any call is served: a proxy killed later is known to have been here
                conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (_MARK + self.proxy, str(time.time())))
            except BaseException:
                conn.close()
                raise
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"--audit {self.path}: cannot use it as the audit store: {exc}") from exc
        self._steps: dict[str, int] = {}
        # the connection goes on to the writer, the server's (group commit): whatever queues within _LINGER
        # goes in the same transaction (a commit costs more than the rows it writes; a call's two rows come a
        # round trip to the upstream apart)
        self._writer = GroupWriter(conn, name="forewarn-mcp-audit", linger=_LINGER)
        self._writer.start()

    # -- what the proxy tells it (each returns at once; the writer thread commits) ------------

    def session(self, session_id: str, metadata: Mapping[str, Any], initial: Mapping[str, Any],
                record: StepRecord) -> None:
        """A new session and its step 0: the state before any call, and the guard's decision there."""
        now = time.time()
        meta = _json({**metadata, "proxy": self.proxy})
        # (the memory bound the server keeps per open session: as it fills it in for rows it did not write)
        held = store_schema.LEGACY_HELD_PER_BYTE * len(meta.encode())
        row = (session_id, self.model_name, self.model_version, None, meta, now, PRINCIPAL, PRINCIPAL, held)
        self._put(lambda c: c.execute("INSERT INTO sessions (id, model_name, model_version, policy, metadata,"
                                      " created_at, created_by, tenant, metadata_held) VALUES (?,?,?,?,?,?,?,?,?)",
                                      row))
        self.step(session_id, initial, None, record)

    def judged(self, session_id: str, tool: str, args: Any, decision: Decision, status: str,
               reason: str = "") -> str:
        """A judged call (status allowed, held or pending); returns its proposal id."""
        proposal = "p_" + uuid.uuid4().hex[:20]
        now = time.time()

        def job(c: sqlite3.Connection) -> None:  # (encoded here, in the writer: off the call's path)
            c.execute("INSERT INTO proposals (id, session_id, created_at, created_by, tool, arguments, decision,"
                      " status, reason) VALUES (?,?,?,?,?,?,?,?,?)",
                      (proposal, session_id, now, PRINCIPAL, tool, _json(args), _json(decision.to_dict()), status,
                       reason or None))
        self._put(job)
        return proposal

    def resolved(self, proposal: str, status: str, by: str, reason: str = "",
                 edited: tuple[str, Any] | None = None) -> None:
        """The answer to a call that was asked about (approved, rejected, edited)."""
        edit = None if edited is None else _json({"tool": edited[0], "arguments": edited[1]})
        row = (status, time.time(), by, reason or None, edit, proposal)
        self._put(lambda c: c.execute("UPDATE proposals SET status=?, resolved_at=?, resolved_by=?, reason=?,"
                                      " edited=? WHERE id=?", row))

    def step(self, session_id: str, state: Mapping[str, Any], action: Any, record: StepRecord,
             proposal: str | None = None) -> None:
        """A committed step: the state a call that ran led to (``action``: ``{"tool", "args"}``)."""
        number = self._steps.get(session_id, 0)
        self._steps[session_id] = number + 1
        now = time.time()
        self._put(lambda c: self._step_row(c, session_id, number, now, state, action, record, proposal))

    def _step_row(self, c: sqlite3.Connection, session_id: str, number: int, now: float, state: Mapping[str, Any],
                  action: Any, record: StepRecord, proposal: str | None) -> None:
        """(In the writer thread: the encoding is off the call's path.)"""
        decision = record.decision
        body = {**decision.to_dict(), "approval_id": None, "session_id": session_id, "step": number,
                "committed": True, "model": {"name": self.model_name, "version": self.model_version}, "at": now}
        canonical = orjson.dumps({"state": state, "action": action, "t": None}, option=orjson.OPT_SORT_KEYS,
                                 default=str)
        c.execute("INSERT INTO decisions (session_id, step, at, principal, model_version, input_hash, abstract,"
                  " monitors, action_in, t, state, action, p_unsafe, decision, approval_id)"
                  " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                  (session_id, number, now, PRINCIPAL, self.model_version, hashlib.sha256(canonical).hexdigest(),
                   record.abstract, _json(list(record.monitors)) if record.monitors else None,
                   None if action is None else _json(action), None, _json(state), decision.action.value,
                   decision.p_unsafe, _json(body), None))
        if proposal is not None:
            c.execute("UPDATE proposals SET status='executed', step=? WHERE id=?", (number, proposal))

    # -- the gateway's records (gate.py): pins, description findings, redactions --------------

    def pins(self, server: str) -> dict[str, str]:
        """The tools pinned for ``server``: name → hash (read now, off the writer: once per server)."""
        conn = _connect(self.path)
        try:
            return dict(conn.execute("SELECT tool, hash FROM tool_pins WHERE server=?", (server,)).fetchall())
        finally:
            conn.close()

    def pin(self, server: str, tool: str, digest: str, description: str) -> None:
        row = (server, tool, digest, description, time.time())
        self._put(lambda c: c.execute("INSERT OR REPLACE INTO tool_pins VALUES (?,?,?,?,?)", row))

    def finding(self, server: str, finding: Mapping[str, str], action: str) -> None:
        row = (time.time(), server, finding["tool"], finding["kind"], finding["where"], finding["detail"], action,
               self.proxy)
        self._put(lambda c: c.execute("INSERT INTO tool_findings (at, server, tool, kind, location, detail,"
                                      " action, proxy) VALUES (?,?,?,?,?,?,?,?)", row))

    def redacted(self, session_id: str, tool: str, records: list[Mapping[str, Any]]) -> None:
        """What was redacted from a call's result: kind, where, offset and length, never the value."""
        now = time.time()
        rows = [(now, session_id, tool, r["kind"], r["where"], r["offset"], r["length"]) for r in records]
        self._put(lambda c: c.executemany("INSERT INTO redactions (at, session_id, tool, kind, location, start,"
                                          " length) VALUES (?,?,?,?,?,?,?)", rows))

    def close_session(self, session_id: str, why: str) -> None:
        self._steps.pop(session_id, None)
        row = (time.time(), f"{PRINCIPAL}: {why}", session_id)
        self._put(lambda c: c.execute("UPDATE sessions SET closed_at=?, closed_by=? WHERE id=?"
                                      " AND closed_at IS NULL", row))

    def close(self) -> None:
        """Commit what is queued and stop the writer (the proxy's mark goes with the last rows)."""
        if self._writer.is_alive():
            mark = _MARK + self.proxy
            self._put(lambda c: c.execute("DELETE FROM meta WHERE key=?", (mark,)))
            self._writer.close(timeout=None)

    def _put(self, job: _Job) -> None:
        self._writer.put(job, self._lost)

    def _lost(self, _result: object, exc: BaseException | None) -> None:
        # (in the writer thread) SQLite, or a row that cannot be encoded: the audit must not stop the proxy
        if exc is not None:
            log.error("audit store %s: a write lost: %s", self.path, exc)

    def _close_orphans(self, conn: sqlite3.Connection) -> None:
        """The proxies of this host that wrote here and ended without closing the store (killed: ``kill -9``,
        a crash) lost the rows still queued, those of their last ``_LINGER`` seconds of calls. That is said,
        not silent: their open sessions are closed with the reason, and a warning names them."""
        prefix = f"{_MARK}{self.host}:"
        for key, started in conn.execute("SELECT key, value FROM meta WHERE key > ? AND key < ?",
                                         (prefix, prefix + "\uffff")).fetchall():
            pid = key[len(prefix):]
            if not pid.isdigit() or _running(int(pid)):
                continue
            why = (f"{PRINCIPAL}: its proxy (pid {pid}) ended without closing the audit store (killed?); the rows "
                   f"of its last calls, up to {_LINGER * 1e3:g} ms of them, may be missing")
            closed = conn.execute("UPDATE sessions SET closed_at=?, closed_by=? WHERE closed_at IS NULL AND "
                                  "created_by=? AND json_extract(metadata, '$.proxy')=?",
                                  (time.time(), why, PRINCIPAL, f"{self.host}:{pid}")).rowcount
            conn.execute("DELETE FROM meta WHERE key=?", (key,))
            log.warning("audit store %s: the proxy of pid %s (started %s) ended without closing it; its %d open "
                        "session(s) are closed as such, and the rows of its last calls (up to %g ms) may be missing",
                        self.path, pid, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(started))), closed,
                        _LINGER * 1e3)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # (another user's)
    return pid != 0


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()
