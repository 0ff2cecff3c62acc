"""A session's trail: everything that happened in it, in order, with who did it.

The audit log (``decisions``) holds committed steps only; a person reviewing a session also needs
what the agent asked before acting (proposals), what was asked of people (approvals), and their
answers. :func:`trail_events` merges the four records — the session, its steps, its proposals and
its approvals — into one list of :class:`server.schemas.TrailEvent`-shaped dicts, oldest first.
Served by ``GET /v1/sessions/{id}/trail`` (:mod:`server.routers.sessions`) and shown by the console.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

# at one instant, what caused what comes first: the session opens, a proposal is made, the step it led
# to is committed, that step asks for an approval, an answer is given, the session closes
_RANK = {"opened": 0, "proposed": 1, "step": 2, "approval_requested": 3, "approved": 4, "rejected": 4,
         "edited": 4, "cancelled": 4, "closed": 5}
_WAITED = ("pending", "approved", "rejected", "edited", "cancelled")  # statuses only a pending proposal reaches


def _tool_of(action: Any) -> str | None:
    if isinstance(action, dict):
        tool = action.get("tool")
        return tool if isinstance(tool, str) else None
    return action if isinstance(action, str) else None


def trail_events(session: Any, steps: Iterable[Any], proposals: Iterable[Any],
                 approvals: Iterable[Any]) -> list[dict[str, Any]]:
    """The session's events, oldest first (ties: cause before effect).

    Args:
        session: its ``sessions`` row.
        steps: its ``decisions`` rows (``step``, ``at``, ``principal``, ``action_in``, ``action``,
            ``p_unsafe``, ``approval_id``).
        proposals: its ``proposals`` rows.
        approvals: its ``approvals`` rows.
    """
    events: list[dict[str, Any]] = [{"at": session["created_at"], "kind": "opened", "by": session["created_by"]}]
    ran: dict[int, str] = {}  # step → the proposal it ran
    for p in proposals:
        decision = orjson.loads(p["decision"])
        executed_by_human = p["status"] == "executed" and p["resolved_by"] is not None
        events.append({"at": p["created_at"], "kind": "proposed", "by": p["created_by"], "tool": p["tool"],
                       "arguments": orjson.loads(p["arguments"]), "action": decision.get("action"),
                       "p_unsafe": decision.get("p_unsafe"), "proposal": p["id"], "step": p["step"],
                       "waited": p["status"] in _WAITED or executed_by_human})
        if p["step"] is not None:
            ran[int(p["step"])] = p["id"]
        if p["resolved_at"] is not None:
            kind = "approved" if p["status"] == "executed" else p["status"]
            edited = orjson.loads(p["edited"]) if p["edited"] else None
            events.append({"at": p["resolved_at"], "kind": kind, "by": p["resolved_by"], "proposal": p["id"],
                           "reason": p["reason"], "tool": (edited or {}).get("tool", p["tool"]),
                           "arguments": None if edited is None else edited.get("arguments")})
    for s in steps:
        action = orjson.loads(s["action_in"]) if s["action_in"] else None
        events.append({"at": s["at"], "kind": "step", "by": s["principal"], "step": s["step"],
                       "tool": _tool_of(action), "action": s["action"], "p_unsafe": s["p_unsafe"],
                       "approval": s["approval_id"], "proposal": ran.get(int(s["step"]))})
    for a in approvals:
        events.append({"at": a["created_at"], "kind": "approval_requested", "step": a["step"], "approval": a["id"]})
        if a["resolved_at"] is not None:
            events.append({"at": a["resolved_at"], "kind": a["status"], "by": a["resolved_by"], "step": a["step"],
                           "approval": a["id"], "reason": a["reason"]})
    if session["closed_at"] is not None:
        events.append({"at": session["closed_at"], "kind": "closed", "by": session["closed_by"]})
    order = sorted(range(len(events)), key=lambda i: (events[i]["at"], _RANK[events[i]["kind"]], i))
    return [events[i] for i in order]
