"""The sessions view's API: ``GET /v1/sessions`` searched by a part of the id, a tool, a decision or an
answer, and a time range; ``GET /v1/sessions/{id}/trail``, everything that happened in a session in
order, with who did it. On SQLite and PostgreSQL (the search's SQL is the two dialects')."""
from __future__ import annotations

from typing import Any

import httpx
import pytest

from _sidecar import ServerThread, auth, egg_state
from forewarn.guard.client import Client

pytestmark = pytest.mark.backends
ASK_ALL = {"thresholds": {"ask_human": 1.0, "reflect": None, "stop": None}, "trigger": "level"}
RISKY = egg_state(in_microwave=True, toggled=True, closed=True)


def _ids(http: httpx.Client, **search: Any) -> list[str]:
    answer = http.get("/v1/sessions", params=search, headers=auth("approver"))
    assert answer.status_code == 200, answer.text
    return [s["id"] for s in answer.json()["sessions"]]


def _reviewed_session(server: ServerThread) -> str:
    """Proposes `toggle`, which is rejected; proposes it again, approved, runs it; closes."""
    with Client(server.url, api_key=KEYS_AGENT) as agent, Client(server.url, api_key=KEYS_APPROVER) as approver:
        session = agent.session(policy=ASK_ALL, metadata={"thread_id": "reviewed"})
        session.observe(egg_state(), action={"tool": "look"}, ask=False)
        first = session.propose("toggle", {"object": "Microwave"}, RISKY, tools=["toggle"], timeout=120)
        approver.resolve_proposal(first["id"], "reject", "not while the egg is inside")
        second = session.propose("toggle", {"object": "Microwave"}, RISKY, tools=["toggle"])
        approver.resolve_proposal(second["id"], "approve", "egg taken out meanwhile")
        session.observe(RISKY, action={"tool": "toggle", "args": {"object": "Microwave"}}, proposal=second["id"])
        session.close()
        return str(session.id)


KEYS_AGENT = "test-agent-key-0123456789"
KEYS_APPROVER = "test-approver-key-0123456789"


def test_sessions_are_searched_by_id_tool_decision_and_time(server: ServerThread, http: httpx.Client) -> None:
    reviewed = _reviewed_session(server)
    quiet = http.post("/v1/sessions", json={}, headers=auth("agent")).json()["id"]
    assert http.post(f"/v1/sessions/{quiet}/observe", json={"state": egg_state(), "action": "open"},
                     headers=auth("agent")).status_code == 200
    everything = _ids(http)
    assert everything[:2] == [quiet, reviewed]  # newest first
    assert _ids(http, session_id=reviewed[3:10]) == [reviewed]
    assert _ids(http, session_id="no-such-part") == []
    # a tool: proposed or called (an object action's tool, or a string action itself)
    assert _ids(http, tool="toggle") == [reviewed]
    assert _ids(http, tool="look") == [reviewed]
    assert _ids(http, tool="open") == [quiet]
    assert _ids(http, tool="Toggle") == []  # exactly the tool's name, on both databases
    # a guard action (a step's or a proposal's), or an answer
    assert _ids(http, decision="ask_human") == [reviewed]
    assert _ids(http, decision="allow") == [quiet]  # every step of the reviewed one asked a human
    assert _ids(http, decision="rejected") == [reviewed]
    assert _ids(http, decision="approved") == [reviewed]  # approved, and then ran
    assert _ids(http, decision="edited") == [] and _ids(http, decision="stop") == []
    assert _ids(http, decision="ask_human", tool="open") == []  # all conditions hold at once
    # open at some moment of [since, until]
    rows = {s["id"]: s for s in http.get("/v1/sessions", headers=auth("approver")).json()["sessions"]}
    closed_at = rows[reviewed]["closed_at"]
    assert closed_at is not None and rows[quiet]["closed_at"] is None
    assert _ids(http, since=closed_at + 1e-3) == [quiet]  # the reviewed one had closed by then
    assert _ids(http, until=rows[quiet]["created_at"] - 1e-3) == [reviewed]  # the quiet one was not open yet
    assert set(_ids(http, since=closed_at, until=rows[quiet]["created_at"])) == {reviewed, quiet}
    assert _ids(http, status="closed", tool="toggle") == [reviewed]
    # what does not parse says which field
    for params, field in (({"decision": "maybe"}, "query.decision"), ({"since": 5, "until": 4}, "query.since"),
                          ({"session_id": "a b"}, "query.session_id")):
        refused = http.get("/v1/sessions", params=params, headers=auth("approver"))
        assert refused.status_code == 422 and refused.json()["error"]["field"] == field, refused.text


def test_the_trail_lists_requests_answers_and_steps_in_order(server: ServerThread, http: httpx.Client) -> None:
    reviewed = _reviewed_session(server)
    trail = http.get(f"/v1/sessions/{reviewed}/trail", headers=auth("approver")).json()
    events = trail["events"]
    assert [(e["kind"], e.get("tool"), e.get("by")) for e in events] == [
        ("opened", None, "agent-bob"),
        ("step", "look", "agent-bob"),
        ("proposed", "toggle", "agent-bob"),
        ("rejected", "toggle", "approver-bob"),
        ("proposed", "toggle", "agent-bob"),
        ("approved", "toggle", "approver-bob"),
        ("step", "toggle", "agent-bob"),
        ("closed", None, "agent-bob"),
    ]
    assert [e["at"] for e in events] == sorted(e["at"] for e in events)
    assert trail["events_total"] == len(events) and trail["session"]["id"] == reviewed
    assert trail["session"]["steps_total"] == 2
    rejected, approved = events[3], events[5]
    assert rejected["reason"] == "not while the egg is inside" and approved["reason"] == "egg taken out meanwhile"
    assert events[2]["waited"] and events[2]["action"] == "ask_human" and events[2]["arguments"] == {
        "object": "Microwave"}
    assert events[4]["step"] == 1 and events[6]["proposal"] == events[4]["proposal"] == approved["proposal"]
    assert events[6]["action"] == "ask_human" and events[6]["p_unsafe"] is not None
    # paged: a page is the same slice of the whole, whatever its size
    for offset, limit in ((0, 3), (3, 3), (6, 3), (2, 5)):
        page = http.get(f"/v1/sessions/{reviewed}/trail", params={"offset": offset, "limit": limit},
                        headers=auth("approver")).json()
        assert page["events"] == events[offset:offset + limit] and page["events_total"] == len(events)


def test_a_step_approval_and_its_answer_are_in_the_trail(server: ServerThread, http: httpx.Client) -> None:
    sid = http.post("/v1/sessions", json={"policy": ASK_ALL}, headers=auth("agent")).json()["id"]
    asked = http.post(f"/v1/sessions/{sid}/observe", json={"state": RISKY}, headers=auth("agent")).json()
    assert asked["approval_id"]
    assert http.post(f"/v1/approvals/{asked['approval_id']}", json={"decision": "reject", "reason": "no"},
                     headers=auth("approver")).status_code == 200
    events = http.get(f"/v1/sessions/{sid}/trail", headers=auth("agent")).json()["events"]
    assert [(e["kind"], e.get("step"), e.get("approval")) for e in events] == [
        ("opened", None, None), ("step", 0, asked["approval_id"]), ("approval_requested", 0, asked["approval_id"]),
        ("rejected", 0, asked["approval_id"])]
    assert events[-1]["by"] == "approver-bob" and events[-1]["reason"] == "no"
    assert http.get("/v1/sessions/s_nothing/trail", headers=auth("agent")).status_code == 404
