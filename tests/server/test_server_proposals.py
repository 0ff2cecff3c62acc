"""Proposals: approval before a call runs — one pending approval, approve / reject / edit over HTTP,
nothing committed until the step runs, idempotent, tenant-scoped; and the bad inputs around them."""
from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest

from _sidecar import KEYS, ServerThread, auth, egg_state
from forewarn.guard.client import AsyncClient, Client, ServerError

ASK_ALL = {"thresholds": {"ask_human": 1.0, "reflect": None, "stop": None}}  # every risky state asks
RISKY = egg_state(in_microwave=True, toggled=True, closed=True, holding=False)
MOVE: dict[str, Any] = {"tool": "toggle", "arguments": {"object": "Microwave"}, "state": RISKY, "tools": ["toggle", "open"]}


def _session(http: httpx.Client) -> str:
    response = http.post("/v1/sessions", json={"policy": ASK_ALL}, headers=auth("agent"))
    assert response.status_code == 201, response.text
    sid = str(response.json()["id"])
    assert http.post(f"/v1/sessions/{sid}/observe", json={"state": egg_state(), "ask": False},
                     headers=auth("agent")).is_success
    return sid


def _propose(http: httpx.Client, sid: str, **extra: Any) -> httpx.Response:
    return http.post(f"/v1/sessions/{sid}/proposals", json={**MOVE, **extra}, headers=auth("agent"))


def _steps(http: httpx.Client, sid: str) -> list[dict[str, Any]]:
    return list(http.get(f"/v1/sessions/{sid}", headers=auth("agent")).json()["steps"])


def test_a_risky_proposal_waits_for_one_approval_and_commits_nothing(http: httpx.Client) -> None:
    sid = _session(http)
    response = _propose(http, sid)
    assert response.status_code == 201, response.text
    proposal = response.json()
    assert proposal["status"] == "pending" and proposal["tool"] == "toggle"
    assert proposal["arguments"] == {"object": "Microwave"}
    assert proposal["decision"]["action"] == "ask_human" and proposal["state_words"]
    assert set(proposal["risk"]) == {"p_unsafe", "ci_low", "ci_high", "visits"}
    assert proposal["risk"]["p_unsafe"] == proposal["decision"]["p_unsafe"]
    assert [r["step"] for r in proposal["session_risk"]] == [0]  # the session's risk so far
    assert len(_steps(http, sid)) == 1  # nothing committed
    pending = http.get("/v1/proposals", headers=auth("approver")).json()["proposals"]
    assert [p["id"] for p in pending] == [proposal["id"]]  # one pending approval
    # the agent cannot run it yet
    early = http.post(f"/v1/sessions/{sid}/observe", json={"state": RISKY, "proposal": proposal["id"]},
                      headers=auth("agent"))
    assert early.status_code == 409 and early.json()["error"]["field"] == "body.proposal"


def test_approve_then_observe_commits_once_and_links(server: ServerThread, http: httpx.Client) -> None:
    sid = _session(http)
    pid = _propose(http, sid).json()["id"]
    with Client(server.url, api_key="test-agent-key-0123456789") as agent, \
            Client(server.url, api_key="test-approver-key-0123456789") as approver:
        waited: dict[str, Any] = {}
        waiter = threading.Thread(target=lambda: waited.update(agent.wait_for_proposal(pid, timeout=20)))
        waiter.start()
        approved = approver.resolve_proposal(pid, "approve", "checked the door is shut")
        waiter.join(20)
        assert approved["status"] == "approved" and waited["status"] == "approved"
        assert waited["reason"] == "checked the door is shut" and waited["resolved_by"] == "approver-bob"
        session = agent.attach(sid)
        decision = session.observe(RISKY, action={"tool": "toggle"}, proposal=pid)
    assert decision.action.value == "ask_human" and decision.approval_id is None  # no second approval
    assert http.get(f"/v1/proposals/{pid}", headers=auth("agent")).json()["step"] == decision.step
    assert http.get("/v1/approvals", headers=auth("approver")).json()["approvals"] == []
    again = http.post(f"/v1/sessions/{sid}/observe", json={"state": RISKY, "proposal": pid}, headers=auth("agent"))
    assert again.status_code == 409  # executed: a proposal runs once


def test_reject_and_edit_over_http(http: httpx.Client) -> None:
    sid = _session(http)
    rejected = _propose(http, sid).json()["id"]
    answer = http.post(f"/v1/proposals/{rejected}", json={"decision": "reject", "reason": "no"},
                       headers=auth("approver"))
    assert answer.status_code == 200 and answer.json()["status"] == "rejected"
    run = http.post(f"/v1/sessions/{sid}/observe", json={"state": RISKY, "proposal": rejected}, headers=auth("agent"))
    assert run.status_code == 409 and "rejected" in run.json()["error"]["message"]
    edited = _propose(http, sid).json()["id"]
    answer = http.post(f"/v1/proposals/{edited}", json={
        "decision": "edit", "tool": "open", "arguments": {"object": "Microwave"}, "state": egg_state(),
        "reason": "open it instead"}, headers=auth("approver"))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "edited" and body["edited"]["tool"] == "open"
    assert body["edited"]["decision"]["action"] in ("allow", "ask_human")  # the edit was re-checked
    ran = http.post(f"/v1/sessions/{sid}/observe", json={"state": egg_state(), "proposal": edited},
                    headers=auth("agent"))
    assert ran.status_code == 200 and ran.json()["approval_id"] is None


def test_retried_requests_answer_the_same_and_commit_once(http: httpx.Client) -> None:
    sid = _session(http)
    key = {"Idempotency-Key": "proposal-retry-1", **auth("agent")}
    first = http.post(f"/v1/sessions/{sid}/proposals", json=MOVE, headers=key)
    second = http.post(f"/v1/sessions/{sid}/proposals", json=MOVE, headers=key)
    assert first.status_code == second.status_code == 201 and first.content == second.content
    assert len(http.get("/v1/proposals", headers=auth("approver")).json()["proposals"]) == 1
    pid = first.json()["id"]
    decide = {"Idempotency-Key": "decide-1", **auth("approver")}
    a = http.post(f"/v1/proposals/{pid}", json={"decision": "approve"}, headers=decide)
    b = http.post(f"/v1/proposals/{pid}", json={"decision": "approve"}, headers=decide)
    assert a.status_code == b.status_code == 200 and a.content == b.content


# ---------------------------------------------------------------------------------- bad input


def test_approving_twice_or_after_the_session_closed(http: httpx.Client) -> None:
    sid = _session(http)
    pid = _propose(http, sid).json()["id"]
    assert http.post(f"/v1/proposals/{pid}", json={"decision": "approve"}, headers=auth("approver")).status_code == 200
    twice = http.post(f"/v1/proposals/{pid}", json={"decision": "reject"}, headers=auth("approver"))
    assert twice.status_code == 409 and twice.json()["error"]["code"] == "already_resolved"
    other = _propose(http, sid).json()["id"]
    assert http.post(f"/v1/sessions/{sid}/close", headers=auth("agent")).is_success
    assert http.get(f"/v1/proposals/{other}", headers=auth("approver")).json()["status"] == "cancelled"
    late = http.post(f"/v1/proposals/{other}", json={"decision": "approve"}, headers=auth("approver"))
    assert late.status_code == 409 and late.json()["error"]["code"] == "session_closed"
    closed = _propose(http, sid)
    assert closed.status_code == 409 and closed.json()["error"]["code"] == "session_closed"


def test_the_agent_withdraws_a_proposal_nobody_answered(server: ServerThread, http: httpx.Client) -> None:
    sid = _session(http)
    pid = _propose(http, sid).json()["id"]
    by_approver = http.post(f"/v1/proposals/{pid}/cancel", json={}, headers=auth("approver"))
    assert by_approver.status_code == 403  # withdrawing is the agent's; an approver rejects instead
    with Client(server.url, api_key=KEYS["agent"]) as agent:
        withdrawn = agent.cancel_proposal(pid, "stopped waiting")
        assert withdrawn["status"] == "cancelled" and withdrawn["reason"] == "stopped waiting"
        with pytest.raises(ServerError) as twice:
            agent.cancel_proposal(pid)
        assert twice.value.status == 409 and twice.value.code == "already_resolved"
    assert http.get("/v1/proposals", headers=auth("approver")).json()["proposals"] == []  # gone from the queue
    late = http.post(f"/v1/proposals/{pid}", json={"decision": "approve"}, headers=auth("approver"))
    assert late.status_code == 409 and late.json()["error"]["code"] == "already_resolved"
    assert len(_steps(http, sid)) == 1  # nothing committed
    decided = _propose(http, sid).json()["id"]
    assert http.post(f"/v1/proposals/{decided}", json={"decision": "approve"}, headers=auth("approver")).is_success
    beaten = http.post(f"/v1/proposals/{decided}/cancel", json={}, headers=auth("agent"))
    assert beaten.status_code == 409 and beaten.json()["error"]["code"] == "already_resolved"
    assert http.get(f"/v1/proposals/{decided}", headers=auth("agent")).json()["status"] == "approved"
    missing = http.post("/v1/proposals/p_nope/cancel", json={}, headers=auth("agent"))
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "path.proposal_id"


def test_editing_to_a_tool_the_agent_lacks(http: httpx.Client) -> None:
    sid = _session(http)
    pid = _propose(http, sid).json()["id"]
    bad = http.post(f"/v1/proposals/{pid}", json={"decision": "edit", "tool": "rm_rf", "arguments": {}},
                    headers=auth("approver"))
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "body.tool"
    assert "rm_rf" in bad.json()["error"]["message"] and "toggle, open" in bad.json()["error"]["message"]
    assert http.get(f"/v1/proposals/{pid}", headers=auth("approver")).json()["status"] == "pending"


@pytest.mark.parametrize("who", ["agent", None])
def test_only_an_approver_decides(http: httpx.Client, who: str | None) -> None:
    sid = _session(http)
    pid = _propose(http, sid).json()["id"]
    response = http.post(f"/v1/proposals/{pid}", json={"decision": "approve"},
                         headers=auth(who) if who else {})
    assert response.status_code == (403 if who else 401)
    assert http.get(f"/v1/proposals/{pid}", headers=auth("approver")).json()["status"] == "pending"


def test_a_client_error_names_the_proposal(server: ServerThread, http: httpx.Client) -> None:
    sid = _session(http)
    with Client(server.url, api_key="test-agent-key-0123456789") as agent, pytest.raises(ServerError) as caught:
        agent.attach(sid).observe(RISKY, proposal="p_nope")
    assert caught.value.status == 404 and caught.value.field == "body.proposal"


def test_the_async_client_has_the_same_proposals(server: ServerThread) -> None:
    """Propose, list, long-poll, approve and edit, then observe linked: the asyncio client against a real server."""
    async def run() -> None:
        async with AsyncClient(server.url, api_key=KEYS["agent"]) as agent, \
                AsyncClient(server.url, api_key=KEYS["approver"]) as approver:
            session = await agent.session(ASK_ALL)
            await session.observe(egg_state(), ask=False)
            proposal = await session.propose(MOVE["tool"], MOVE["arguments"], RISKY, tools=MOVE["tools"])
            assert proposal["status"] == "pending" and proposal["arguments"] == {"object": "Microwave"}
            assert [p["id"] for p in await approver.proposals(session_id=session.id)] == [proposal["id"]]
            waiting = asyncio.create_task(agent.wait_for_proposal(proposal["id"], timeout=20))
            await asyncio.sleep(0.1)
            approved = await approver.resolve_proposal(proposal["id"], "approve", "door checked")
            waited = await waiting
            assert approved["status"] == waited["status"] == "approved" and waited["reason"] == "door checked"
            decision = await session.observe(RISKY, action={"tool": "toggle"}, proposal=proposal["id"])
            assert decision.approval_id is None  # the proposal's approval covers it
            assert (await agent.proposal(proposal["id"]))["step"] == decision.step
            second = await session.propose("toggle", {"object": "Microwave"}, RISKY, tools=["toggle", "open"])
            edited = await approver.resolve_proposal(second["id"], "edit", "open it instead", tool="open",
                                                     arguments={"object": "Microwave"}, state=egg_state())
            assert edited["status"] == "edited" and edited["edited"]["tool"] == "open"  # re-checked
            with pytest.raises(ServerError) as caught:
                await approver.resolve_proposal(second["id"], "approve")
            assert caught.value.status == 409
            assert await approver.proposals(session_id=session.id) == []
            assert (await session.history())["steps_total"] == 2  # nothing committed but the runs

    asyncio.run(run())


@pytest.mark.backends
def test_one_racer_wins_a_resolution_the_others_get_409(server: ServerThread, http: httpx.Client) -> None:
    """Approve against reject, and cancel against approve, at once: exactly one caller gets 200, the
    other 409 naming the winner's answer, the database holds the winner's answer, and a retry of the
    loser with its Idempotency-Key is still a 409 — with keys (as the console sends) and without."""
    rounds = 200
    tally = {"first": 0, "second": 0}
    with httpx.Client(base_url=server.url, timeout=60) as one, httpx.Client(base_url=server.url, timeout=60) as two:
        for round_ in range(rounds):
            sid = _session(http)
            pid = _propose(http, sid).json()["id"]
            cancel_race, keyed = round_ % 2 == 1, round_ % 4 >= 2
            racers: list[tuple[httpx.Client, str, dict[str, Any], dict[str, str], str]] = [
                (one, f"/v1/proposals/{pid}", {"decision": "approve", "reason": "ok"}, auth("approver"), "approved"),
                (two, f"/v1/proposals/{pid}/cancel", {}, auth("agent"), "cancelled") if cancel_race else
                (two, f"/v1/proposals/{pid}", {"decision": "reject", "reason": "no"}, auth("admin"), "rejected")]
            barrier = threading.Barrier(2)
            answers: list[httpx.Response | None] = [None, None]

            def race(i: int, keys: dict[str, str], racers: list[Any], barrier: threading.Barrier,
                     answers: list[httpx.Response | None]) -> None:
                client, path, body, headers, _ = racers[i]
                barrier.wait()
                answers[i] = client.post(path, json=body, headers={**headers, **keys})

            keys = [{"Idempotency-Key": f"r{round_}-{i}"} if keyed else {} for i in range(2)]
            threads = [threading.Thread(target=race, args=(i, keys[i], racers, barrier, answers)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            done = [a for a in answers if a is not None]
            assert len(done) == 2, (round_, answers)
            codes = [a.status_code for a in done]
            assert sorted(codes) == [200, 409], (round_, codes, [a.text for a in done])
            winner = codes.index(200)
            loser = 1 - winner
            won_status = racers[winner][4]
            assert done[winner].json()["status"] == won_status
            message = done[loser].json()["error"]["message"]
            assert f"is already {won_status}" in message or f"is {won_status}, not pending" in message, message
            assert http.get(f"/v1/proposals/{pid}", headers=auth("admin")).json()["status"] == won_status
            if keyed:  # the loser's retry is answered as the loser, never as a success
                client, path, body, headers, _ = racers[loser]
                assert client.post(path, json=body, headers={**headers, **keys[loser]}).status_code == 409
            tally["first" if winner == 0 else "second"] += 1
    assert tally["first"] + tally["second"] == rounds
