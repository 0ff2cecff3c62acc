"""Sessions and their steps (the audit log): the write jobs and read queries both backends share.

A step is committed with its approvals in one job. On a shared (PostgreSQL) database a step
commits only if it extends the row its replica saw last, on an open session of the model
version that replica holds (:func:`_check_chain`); otherwise :class:`Conflict`.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from .backend import Backend, Job, _SqliteConn
from .rows import ApprovalRow, PrevStep, SessionRow, StepRow
from .schema import CHANNEL_APPROVALS, CHANNEL_SESSIONS, Conflict, OverBudget

_TENANT = "coalesce(s.tenant, s.created_by)"  # sessions from before tenants belong to the key that opened them


class SessionRecords(Backend):
    """Sessions and steps: jobs (run by the writer) and queries (event loop thread)."""

    @staticmethod
    def insert_steps(rows: Sequence[StepRow], approvals: Sequence[ApprovalRow], prev: Sequence[PrevStep] = ()) -> Job:
        """Insert step rows (and their approvals). ``prev``: for each step after the first, the row it
        extends as the replica that computed it saw it. On a shared database
        the step is committed only if that is still the session's last row and the session is open;
        otherwise :class:`Conflict` (the unique (session, step) key catches two replicas at once)."""
        def job(conn: Any) -> None:
            if conn.shared:
                _check_chain(conn, {row.session_id: row.model_version for row in rows}, prev)
            conn.executemany(
                "INSERT INTO decisions (session_id, step, at, principal, model_version, input_hash, abstract,"
                " monitors, action_in, t, state, action, p_unsafe, decision, approval_id)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            if approvals:
                conn.executemany("INSERT INTO approvals (id, session_id, step, created_at, status)"
                                 " VALUES (?,?,?,?,'pending')", approvals)
        return job

    @staticmethod
    def insert_session(row: SessionRow, tenant_metadata_bytes: int | None = None) -> Job:
        """Insert a session row; with ``tenant_metadata_bytes``, only if the memory the metadata of its tenant's
        open sessions holds (``metadata_held``), this one's included, stays within that many bytes, else
        :class:`OverBudget`."""
        def job(conn: _SqliteConn) -> None:
            if tenant_metadata_bytes is not None and row.metadata:
                _check_metadata_budget(conn, row, tenant_metadata_bytes)
            conn.execute("INSERT INTO sessions (id, model_name, model_version, policy, metadata, created_at,"
                         " created_by, tenant, metadata_held) VALUES (?,?,?,?,?,?,?,?,?)", row)
        return job

    @staticmethod
    def close_session(session_id: str, at: float, by: str) -> Job:
        """Close an open session and cancel its pending approvals; returns their ids."""
        def job(conn: _SqliteConn) -> list[str]:
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
    def migrate_sessions(name: str, version: str, ids: Iterable[str]) -> Job:
        ids = list(ids)

        def job(conn: _SqliteConn) -> None:
            conn.executemany("UPDATE sessions SET model_version=? WHERE id=? AND model_name=?",
                             [(version, i, name) for i in ids])
            for i in ids:  # replicas holding them reload them on their new version
                conn.notify(CHANNEL_SESSIONS, i)
        return job


    def session_row(self, session_id: str) -> sqlite3.Row | None:
        return self._one("SELECT * FROM sessions WHERE id=?", (session_id,))

    def open_sessions(self, model_name: str | None = None) -> list[str]:
        if model_name is None:
            rows = self._all("SELECT id FROM sessions WHERE closed_at IS NULL", ())
        else:
            rows = self._all("SELECT id FROM sessions WHERE closed_at IS NULL AND model_name=?", (model_name,))
        return [r[0] for r in rows]

    def list_sessions(self, *, status: str | None, limit: int, offset: int,
                      tenants: Iterable[str] | None = None, search: SessionSearch | None = None) -> list[sqlite3.Row]:
        """Sessions newest first, of ``tenants`` (None: all), open or closed, matching ``search``."""
        clauses = [{"open": "closed_at IS NULL", "closed": "closed_at IS NOT NULL"}.get(status or "", "TRUE")]
        params: list[Any] = []
        if tenants is not None:
            scope = sorted(tenants)
            clauses.append(f"{_TENANT} IN ({','.join('?' * len(scope))})")
            params += scope
        if search is not None:
            found = search.where(self.POSITION)
            clauses += found[0]
            params += found[1]
        return self._all(f"SELECT s.*, (SELECT count(*) FROM decisions d WHERE d.session_id=s.id) AS steps"
                                 f" FROM sessions s WHERE {' AND '.join(clauses)} ORDER BY created_at DESC"
                                 f" LIMIT ? OFFSET ?", (*params, limit, offset))

    def last_step(self, session_id: str) -> tuple[int, int, str | None] | None:
        """(step, abstract, monitors) of the last committed step: all a resume needs (an index look-up)."""
        row = self._one("SELECT step, abstract, monitors FROM decisions WHERE session_id=?"
                        " ORDER BY step DESC LIMIT 1", (session_id,))
        return None if row is None else (int(row[0]), int(row[1]), row[2])

    def last_known_risk(self, session_id: str) -> tuple[float, ...] | None:
        """The risk per property of the last committed step whose risk is known (the increase trigger's
        baseline when the last step was in a state the model never saw), or None: no such step."""
        row = self._one("SELECT decision FROM decisions WHERE session_id=? AND p_unsafe IS NOT NULL"
                        " ORDER BY step DESC LIMIT 1", (session_id,))
        if row is None:
            return None
        properties = orjson.loads(row[0]).get("properties") or []
        risks = tuple(p.get("p_unsafe") for p in properties)
        return None if not risks or any(r is None for r in risks) else risks

    def history(self, session_id: str) -> list[tuple[int, int, str | None, str | None, float | None]]:
        """(step, abstract, monitors, action_in, t) of every committed step, in order."""
        return self._all(
            "SELECT step, abstract, monitors, action_in, t FROM decisions WHERE session_id=? ORDER BY step",
            (session_id,))

    def steps(self, session_id: str, *, limit: int, offset: int) -> list[sqlite3.Row]:
        return self._all("SELECT * FROM decisions WHERE session_id=? ORDER BY step LIMIT ? OFFSET ?",
                    (session_id, limit, offset))

    def trail_steps(self, session_id: str, limit: int) -> list[sqlite3.Row]:
        """What a session's trail shows of its steps (not the stored decisions: a trail may be long)."""
        return self._all("SELECT step, at, principal, action_in, action, p_unsafe, approval_id FROM decisions"
                         " WHERE session_id=? ORDER BY step LIMIT ?", (session_id, limit))

    def trail_size(self, session_id: str) -> int:
        """How many events a session's trail has (:func:`server.trail.trail_events`): its steps, its
        proposals and approvals and their answers, its opening and closing."""
        return self._count(
            "SELECT (SELECT count(*) FROM decisions WHERE session_id=?)"
            " + (SELECT count(*) + count(resolved_at) FROM proposals WHERE session_id=?)"
            " + (SELECT count(*) + count(resolved_at) FROM approvals WHERE session_id=?)"
            " + (SELECT 1 + count(closed_at) FROM sessions WHERE id=?)", (session_id,) * 4)

    def step_count(self, session_id: str) -> int:
        return self._count("SELECT count(*) FROM decisions WHERE session_id=?", (session_id,))

    def session_risk(self, session_id: str) -> list[tuple[int, float, float | None]]:
        """(step, at, p_unsafe) of every committed step of a session: its risk over time."""
        return [(int(r[0]), float(r[1]), r[2]) for r in self._all(
            "SELECT step, at, p_unsafe FROM decisions WHERE session_id=? ORDER BY step", (session_id,))]

    def idle_sessions(self, before: float) -> list[str]:
        """Open sessions with no step since ``before`` (nor created since)."""
        rows = self._all("SELECT s.id FROM sessions s WHERE s.closed_at IS NULL AND coalesce("
                         "(SELECT max(d.at) FROM decisions d WHERE d.session_id=s.id), s.created_at) < ?",
                         (before,))
        return [r[0] for r in rows]

    def count_open_sessions(self) -> int:
        return self._count("SELECT count(*) FROM sessions WHERE closed_at IS NULL", ())


_ACTIONS = ("allow", "reflect", "ask_human", "stop")  # the guard's
ANSWERS = ("approved", "rejected", "edited", "cancelled")  # a person's (or, cancelled, the agent's)


@dataclass(frozen=True)
class SessionSearch:
    """What the sessions view searches by; each field None matches everything.

    Args:
        session_id: a part of the session's id (case-sensitive).
        tool: a tool the session proposed or called (a step's action, as the agent gave it:
            ``{"tool": name, ...}`` or the name itself).
        decision: a guard action one of its steps or proposals got (allow, reflect, ask_human,
            stop), or an answer one of its proposals or approvals got (approved — an approved
            proposal that then ran included —, rejected, edited, cancelled).
        since, until: the session was open at some moment in [since, until] (epoch seconds).
    """

    session_id: str | None = None
    tool: str | None = None
    decision: str | None = None
    since: float | None = None
    until: float | None = None

    def where(self, position: str) -> tuple[list[str], list[Any]]:
        """SQL conditions on ``sessions s`` and their parameters; ``position``: the dialect's
        :attr:`Backend.POSITION`."""
        clauses: list[str] = []
        params: list[Any] = []
        if self.session_id is not None:
            clauses.append(position.format("s.id") + " > 0")
            params.append(self.session_id)
        if self.tool is not None:
            named = orjson.dumps(self.tool).decode()  # as the step's action was stored (orjson, compact)
            clauses.append("(EXISTS (SELECT 1 FROM proposals p WHERE p.session_id=s.id AND p.tool=?)"
                           " OR EXISTS (SELECT 1 FROM decisions d WHERE d.session_id=s.id AND (d.action_in=?"
                           f" OR {position.format('d.action_in')} > 0)))")
            params += [self.tool, named, f'"tool":{named}']
        if self.decision in _ACTIONS:
            # a proposal's decision is stored as the core's to_dict(), whose first key is the action
            clauses.append("(EXISTS (SELECT 1 FROM decisions d WHERE d.session_id=s.id AND d.action=?)"
                           " OR EXISTS (SELECT 1 FROM proposals p WHERE p.session_id=s.id"
                           f" AND {position.format('p.decision')} = 1))")
            params += [self.decision, f'{{"action":"{self.decision}"']
        elif self.decision in ANSWERS:
            ran = " OR (p.status='executed' AND p.resolved_by IS NOT NULL)" if self.decision == "approved" else ""
            clauses.append(f"(EXISTS (SELECT 1 FROM proposals p WHERE p.session_id=s.id AND (p.status=?{ran}))"
                           " OR EXISTS (SELECT 1 FROM approvals a WHERE a.session_id=s.id AND a.status=?))")
            params += [self.decision, self.decision]
        elif self.decision is not None:
            raise ValueError(f"decision {self.decision!r}: expected one of {', '.join(_ACTIONS + ANSWERS)}")
        if self.until is not None:
            clauses.append("s.created_at <= ?")
            params.append(self.until)
        if self.since is not None:
            clauses.append("(s.closed_at IS NULL OR s.closed_at >= ?)")
            params.append(self.since)
        return clauses, params


def _check_metadata_budget(conn: Any, row: SessionRow, bound: int) -> None:
    """Raise :class:`OverBudget` if ``row``'s metadata would take the memory its tenant's open sessions'
    metadata holds past ``bound`` bytes. In the writer's transaction: on SQLite the one writer orders the
    creates; on PostgreSQL a lock per tenant makes replicas creating sessions of one tenant wait for each
    other's commit. The sum reads a covering index (sessions_open_held), not the metadata itself."""
    tenant = row.tenant or row.created_by
    if conn.shared:
        conn.execute("SELECT pg_advisory_xact_lock(7461637, hashtext(?))", (tenant,))
    held = int(conn.execute("SELECT coalesce(sum(metadata_held), 0) FROM sessions WHERE coalesce(tenant, created_by)=?"
                            " AND closed_at IS NULL", (tenant,)).fetchone()[0])
    adding = row.metadata_held
    if held + adding > bound:
        raise OverBudget(f"the open sessions of this tenant hold {held} bytes of metadata in memory; {adding} more "
                         f"would exceed limits.max_tenant_metadata_bytes ({bound}): close sessions first",
                         "max_tenant_metadata_bytes")


def _check_chain(conn: Any, versions: dict[str, str], prev: Sequence[PrevStep]) -> None:
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
