"""What waits for a human: approvals (of a committed step) and proposals (of a tool call before it
runs, issue 13). The write jobs and read queries both backends share.

Resolving either one notifies ``CHANNEL_APPROVALS``: the waiters of every replica wake.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from .backend import Backend, Job, _SqliteConn
from .rows import ProposalRow
from .schema import CHANNEL_APPROVALS
from .sessions import _TENANT

_APPROVAL_SELECT = ("SELECT a.*, d.decision AS decision, d.principal AS requested_by,"
                    " (SELECT coalesce(s.tenant, s.created_by) FROM sessions s WHERE s.id=a.session_id) AS tenant"
                    " FROM approvals a LEFT JOIN decisions d ON d.session_id=a.session_id AND d.step=a.step")
_PROPOSAL_SELECT = ("SELECT p.*, coalesce(s.tenant, s.created_by) AS tenant, s.closed_at AS session_closed_at"
                    " FROM proposals p JOIN sessions s ON s.id=p.session_id")


class ApprovalRecords(Backend):
    """Approvals and proposals: jobs (run by the writer) and queries (event loop thread)."""

    @staticmethod
    def resolve_approval(approval_id: str, status: str, at: float, by: str, reason: str | None,
                         remember: tuple[Any, ...] | None = None) -> Job:
        """Resolve a pending approval; returns False when it was not pending (or does not exist).
        ``remember``: an idempotency row, committed only if this call resolved it."""
        def job(conn: _SqliteConn) -> bool:
            cursor = conn.execute("UPDATE approvals SET status=?, resolved_at=?, resolved_by=?, reason=?"
                                  " WHERE id=? AND status='pending'", (status, at, by, reason, approval_id))
            changed = cursor.rowcount == 1
            if changed and remember is not None:
                conn.execute("INSERT INTO idempotency VALUES (?,?,?,?,?,?)", remember)
            if changed:
                conn.notify(CHANNEL_APPROVALS, approval_id)
            return changed
        return job

    def approval(self, approval_id: str) -> sqlite3.Row | None:
        return self._one(_APPROVAL_SELECT + " WHERE a.id=?", (approval_id,))

    def approvals(self, *, status: str | None, session_id: str | None, limit: int, offset: int,
                  tenants: Iterable[str] | None = None, since: float | None = None,
                  until: float | None = None) -> list[sqlite3.Row]:
        clauses, params = _window("a.created_at", since, until)
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

    def count_pending_approvals(self) -> int:
        return self._count("SELECT count(*) FROM approvals WHERE status='pending'", ())

    # -- proposals (issue 13): jobs and queries both backends share -----------------------

    @staticmethod
    def insert_proposal(row: ProposalRow) -> Job:
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
            changed: bool = cursor.rowcount == 1
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
                  tenants: Iterable[str] | None = None, tool: str | None = None, since: float | None = None,
                  until: float | None = None) -> list[Any]:
        where, params = _window("p.created_at", since, until)
        if tool is not None:
            where.append("p.tool=?")
            params.append(tool)
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


def _window(column: str, since: float | None, until: float | None) -> tuple[list[str], list[Any]]:
    """The conditions of a list's time window on ``column`` (created at, epoch seconds), and their parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    if since is not None:
        clauses.append(f"{column} >= ?")
        params.append(since)
    if until is not None:
        clauses.append(f"{column} <= ?")
        params.append(until)
    return clauses, params
