"""Full flows against a real uvicorn on loopback: sessions, steps, approvals, models, limits."""
from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from _sidecar import KEYS, ServerThread, auth, egg_state
from forewarn.errors import PredicateError
from forewarn.guard import Guard, Policy
from forewarn.guard.client import AsyncClient, Client, RemoteDecision, RemoteSession, ServerError
from forewarn.guard.model import GuardModel
from forewarn.guard.spec import Action, Thresholds, parse_spec
from forewarn.server.models_registry import with_sidecar_trigger

# every flow here runs on SQLite and on PostgreSQL (a throw-away cluster; see conftest.py)
pytestmark = pytest.mark.backends

ASK_EVERYTHING_RISKY = {"thresholds": {"ask_human": 0.9}, "trigger": "level"}  # every risky state asks, not only a rise


def test_observe_matches_the_library(server: ServerThread, agent: Client, builtin_path: Path) -> None:
    local = with_sidecar_trigger(Guard.load(builtin_path)).session()  # the sidecar's default: increase
    remote = agent.session()
    states = [egg_state(), egg_state(holding=True), egg_state(in_microwave=True),
              egg_state(in_microwave=True, closed=True), egg_state(in_microwave=True, closed=True, toggled=True)]
    for i, state in enumerate(states):
        expected = local.observe(state)
        got = remote.observe(state, action=f"step {i}", t=float(i))
        assert isinstance(got, RemoteDecision)
        assert got.action is expected.action
        assert got.abstract_state == expected.abstract_state
        assert got.message == expected.message
        assert got.p_unsafe is not None and expected.p_unsafe is not None
        assert got.p_safe is not None and expected.p_safe is not None
        assert math.isclose(got.p_unsafe, expected.p_unsafe) and math.isclose(got.p_safe, expected.p_safe)
        assert got.step == i and got.committed and got.session_id == remote.id
        assert got.properties and got.properties[0].name and got.monitors == dict(expected.monitors)
    history = remote.history()
    assert history["steps_total"] == len(states) and history["status"] == "open"
    assert [s["step"] for s in history["steps"]] == list(range(len(states)))
    assert history["steps"][2]["action"] == "step 2" and history["steps"][2]["t"] == 2.0
    assert history["steps"][0]["principal"] == "agent-bob"
    assert len(history["steps"][0]["input_hash"]) == 64


def test_preview_commits_nothing(agent: Client) -> None:
    session = agent.session()
    session.observe(egg_state())
    preview = session.preview(egg_state(in_microwave=True, closed=True))
    assert preview.step is None and not preview.committed and preview.approval_id is None
    assert session.history()["steps_total"] == 1
    assert session.observe(egg_state(holding=True)).step == 1


def test_policy_overrides_and_metadata(agent: Client) -> None:
    strict = agent.session(Policy(Thresholds(stop=0.99)), metadata={"task": "t1", "user": {"id": 7}})
    assert strict.info["policy"]["thresholds"]["stop"] == 0.99
    assert strict.observe(egg_state(in_microwave=True, closed=True)).action is Action.STOP
    lax = agent.session({"thresholds": {"reflect": None}})
    assert lax.observe(egg_state(in_microwave=True, closed=True)).action is Action.ALLOW
    assert strict.history()["metadata"] == {"task": "t1", "user": {"id": 7}}


def test_errors_name_the_field(http: httpx.Client, agent: Client) -> None:
    session = agent.session()
    url = f"/v1/sessions/{session.id}/observe"
    cases = [
        ({"state": {"objects": {"Egg": {}}}}, 422, "body.state"),
        ({"state": [1, 2]}, 422, "body.state"),
        ({"state": {}, "surprise": 1}, 422, "body.surprise"),
        ({"state": egg_state(), "t": "soon"}, 422, "body.t"),
        ({}, 422, "body.state"),
    ]
    for body, status, field in cases:
        response = http.post(url, json=body, headers=auth("agent"))
        assert response.status_code == status, (body, response.text)
        assert response.json()["error"]["field"] == field, response.text
    predicate = http.post(url, json={"state": {"objects": {"Egg": {}}}}, headers=auth("agent")).json()["error"]
    assert predicate["code"] == "predicate_error" and predicate["predicate"] == "egg_in_microwave"
    with pytest.raises(PredicateError) as caught:
        session.observe({"objects": {}})
    assert caught.value.predicate is not None
    assert session.history()["steps_total"] == 0  # nothing half-written


def test_malformed_bodies_are_4xx_with_json(http: httpx.Client, agent: Client, server: ServerThread) -> None:
    session = agent.session()
    url = f"/v1/sessions/{session.id}/observe"
    headers = {**auth("agent"), "content-type": "application/json"}
    deep = {"state": egg_state(extra=_nest(server.settings.limits.max_state_depth + 5))}
    bodies = [b"{", b'{"state": NaN}', b"\xff\xfe", b"[" * 5000 + b"]" * 5000, orjson.dumps(deep),
              b'{"state": {"a": 1e999}}']
    for body in bodies:
        response = http.post(url, content=body, headers=headers)
        assert 400 <= response.status_code < 500, (body[:40], response.status_code, response.text)
        assert "error" in response.json()
    depth = http.post(url, content=orjson.dumps(deep), headers=headers).json()["error"]
    assert depth["field"].startswith("body.state.extra")
    big = b'{"state": {"x": "' + b"a" * (server.settings.limits.max_body_bytes + 1) + b'"}}'
    response = http.post(url, content=big, headers=headers)
    assert response.status_code == 413 and response.json()["error"]["code"] == "body_too_large"

    def chunks() -> Iterator[bytes]:
        yield b'{"state": {"x": "'
        for _ in range(20):
            yield b"a" * 100_000
        yield b'"}}'

    response = http.post(url, content=chunks(), headers=headers)
    assert response.status_code == 413
    assert session.history()["steps_total"] == 0


def _nest(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for _ in range(depth):
        node = {"n": node}
    return node


def test_closed_and_unknown_sessions(http: httpx.Client, agent: Client) -> None:
    session = agent.session()
    session.observe(egg_state())
    assert session.close()["status"] == "closed"
    assert session.close()["status"] == "closed"  # idempotent
    with pytest.raises(ServerError) as closed:
        session.observe(egg_state())
    assert closed.value.status == 409 and closed.value.code == "session_closed"
    response = http.post("/v1/sessions/s_nope/observe", json={"state": {}}, headers=auth("agent"))
    assert response.status_code == 404 and response.json()["error"]["field"] == "path.session_id"
    response = http.post("/v1/sessions", json={"model": "nope"}, headers=auth("agent"))
    assert response.status_code == 404 and response.json()["error"]["field"] == "body.model"


def test_batch_is_all_or_nothing(agent: Client) -> None:
    a, b = agent.session(), agent.session(model="toy")
    results = agent.batch([
        {"session": a.id, "state": egg_state()},
        {"session": b.id, "state": {"a": True, "b": 0}},
        {"session": a.id, "state": egg_state(in_microwave=True), "op": "preview"},
        {"session": a.id, "state": egg_state(holding=True), "action": "pick"},
    ])
    assert [r.step for r in results] == [0, 0, None, 1]
    assert results[1].model["name"] == "toy"
    with pytest.raises(PredicateError) as caught:
        agent.batch([{"session": a.id, "state": egg_state()}, {"session": b.id, "state": {"a": 1}}])
    field = vars(caught.value)["field"]  # set by the client on the library's error
    assert field == "body.steps[1].state" and caught.value.predicate == "b"
    with pytest.raises(ServerError) as unknown:
        agent.batch([{"session": a.id, "state": egg_state()}, {"session": "s_missing", "state": {}}])
    assert unknown.value.status == 404 and unknown.value.field == "body.steps[1].session"
    assert a.history()["steps_total"] == 2 and b.history()["steps_total"] == 1


def test_approvals_flow(agent: Client, approver: Client) -> None:
    session = agent.session(ASK_EVERYTHING_RISKY)
    decision = session.observe(egg_state(in_microwave=True, closed=True))
    assert decision.action is Action.ASK_HUMAN and decision.approval_id
    pending = approver.approvals()
    assert [p["id"] for p in pending] == [decision.approval_id]
    assert pending[0]["decision"]["action"] == "ask_human" and pending[0]["requested_by"] == "agent-bob"
    assert agent.approval(decision.approval_id)["status"] == "pending"

    waited: dict[str, Any] = {}

    def wait() -> None:
        started = time.monotonic()
        waited["result"] = session.wait_for_approval(decision, timeout=20)
        waited["seconds"] = time.monotonic() - started

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    resolved = approver.approve(decision.approval_id, reason="fine, the door is open really")
    waiter.join(10)
    assert resolved["status"] == "approved" and resolved["resolved_by"] == "approver-bob"
    assert waited["result"]["status"] == "approved" and waited["seconds"] < 5
    assert waited["result"]["reason"] == "fine, the door is open really"
    with pytest.raises(ServerError) as twice:
        approver.reject(decision.approval_id)
    assert twice.value.status == 409
    assert approver.approvals() == []
    assert [a["status"] for a in approver.approvals("approved")] == ["approved"]

    second = session.observe(egg_state(in_microwave=True, closed=True, toggled=True))
    assert second.approval_id is not None
    assert approver.reject(second.approval_id, reason="no")["status"] == "rejected"
    third = session.observe(egg_state(in_microwave=True, closed=True))
    assert third.approval_id is not None
    assert agent.approval(third.approval_id, wait=0.2)["status"] == "pending"  # times out, still pending
    session.close()
    assert agent.approval(third.approval_id)["status"] == "cancelled"
    with pytest.raises(ServerError) as missing:
        approver.approve("a_missing")
    assert missing.value.status == 404


def test_models_listing(agent: Client, admin: Client, http: httpx.Client) -> None:
    models = {m["name"]: m for m in agent.models()}
    assert set(models) == {"builtin", "toy"}
    builtin = models["builtin"]
    assert builtin["default"] and builtin["provenance"]["runs"] == 300 and len(builtin["version"]) == 16
    assert builtin["pac"]["states_total"] >= 1 and builtin["pac"]["states"] is None
    full = http.get("/v1/models/builtin", headers=auth("agent")).json()
    assert len(full["pac"]["states"]) == full["pac"]["states_total"]
    with pytest.raises(ServerError) as bad:
        admin.load_model("other", "/nonexistent/model.json")
    assert bad.value.status == 422 and bad.value.field == "body.path"


def test_health_and_metrics(http: httpx.Client, agent: Client, server: ServerThread) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").json()["status"] == "ready"
    assert http.get("/docs").status_code == 200 and "openapi" in http.get("/openapi.json").json()
    session = agent.session(ASK_EVERYTHING_RISKY)
    session.observe(egg_state())
    session.observe(egg_state(in_microwave=True, closed=True))
    session.preview(egg_state())
    assert http.get("/metrics", headers=auth("approver")).status_code == 403  # every tenant's figures: admins only
    text = http.get("/metrics", headers=auth("admin")).text
    assert 'forewarn_decisions_total{action="allow",op="observe"} 1.0' in text
    assert 'forewarn_decisions_total{action="ask_human",op="observe"} 1.0' in text
    assert 'forewarn_decisions_total{action="allow",op="preview"} 1.0' in text
    assert 'forewarn_step_seconds_count{op="observe"} 2.0' in text
    assert "forewarn_sessions_open 1.0" in text and "forewarn_approvals_pending 1.0" in text
    assert http.get("/metrics").status_code == 401


def test_async_client(server: ServerThread) -> None:
    async def run() -> None:
        async with AsyncClient(server.url, api_key=KEYS["agent"]) as client:
            session = await client.session(ASK_EVERYTHING_RISKY)
            decisions = await asyncio.gather(*(session.preview(egg_state(holding=i % 2 == 0)) for i in range(10)))
            assert all(not d.committed for d in decisions)
            first = await session.observe(egg_state(in_microwave=True, closed=True))
            assert first.action is Action.ASK_HUMAN
            async with AsyncClient(server.url, api_key=KEYS["approver"]) as approver:
                waiting = asyncio.create_task(session.wait_for_approval(first, timeout=10))
                await asyncio.sleep(0.1)
                assert first.approval_id is not None
                await approver.reject(first.approval_id, reason="unsafe")
                assert (await waiting)["status"] == "rejected"
            assert (await session.history())["steps_total"] == 1
            await session.close()

    asyncio.run(run())


def test_concurrent_steps_keep_order(server: ServerThread) -> None:
    """Many threads on one session: every step number is answered once, and all are stored."""
    with Client(server.url, api_key=KEYS["agent"]) as client:
        session = client.session()
    steps: list[int] = []

    def worker() -> None:
        with Client(server.url, api_key=KEYS["agent"]) as own:
            remote = own.attach(session.id)
            for i in range(25):
                step = remote.observe(egg_state(holding=i % 2 == 0)).step
                assert step is not None  # observe commits a step
                steps.append(step)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(steps) == list(range(200))
    with Client(server.url, api_key=KEYS["agent"]) as client:
        history = client.get_session(session.id, limit=1000)
    assert history["steps_total"] == 200 and [s["step"] for s in history["steps"]] == list(range(200))


def test_fast_path_and_routed_path_agree(http: httpx.Client, agent: Client) -> None:
    """observe/preview are answered before routing for JSON bodies; other requests reach the documented
    routes, which must behave the same."""
    session = agent.session()
    url = f"/v1/sessions/{session.id}"
    body = orjson.dumps({"state": egg_state()})
    fast = http.post(f"{url}/preview", content=body, headers={**auth("agent"), "content-type": "application/json"})
    routed = http.post(f"{url}/preview", content=body, headers={**auth("agent"), "content-type": "text/plain"})
    assert fast.status_code == routed.status_code == 200
    assert {k: v for k, v in fast.json().items() if k != "at"} == {k: v for k, v in routed.json().items() if k != "at"}
    for path in ("observe", "preview"):
        response = http.post(f"{url}/{path}?limt=5", content=body, headers=auth("agent"))
        assert response.status_code == 422 and response.json()["error"]["field"] == "query.limt"
        assert http.post(f"{url}/{path}", content=body).status_code == 401
        assert http.post(f"{url}/{path}", content=body, headers=auth("approver")).status_code == 403
        bad_id = http.post(f"/v1/sessions/bad%20id/{path}", content=body, headers=auth("agent"))
        assert bad_id.status_code == 422 and bad_id.json()["error"]["field"] == "path.session_id"
    assert http.get(f"{url}/observe", headers=auth("agent")).status_code == 405
    assert session.history()["steps_total"] == 0


def test_list_sessions(agent: Client, http: httpx.Client) -> None:
    first, second = agent.session(metadata={"n": 1}), agent.session(metadata={"n": 2})
    second.observe(egg_state())
    first.close()
    listed = http.get("/v1/sessions", headers=auth("approver")).json()["sessions"]
    assert [s["id"] for s in listed] == [second.id, first.id]
    assert listed[0]["steps_total"] == 1 and listed[1]["status"] == "closed"
    open_only = http.get("/v1/sessions?status=open", headers=auth("admin")).json()["sessions"]
    assert [s["id"] for s in open_only] == [second.id]


def test_synchronous_full(tmp_path: Path, builtin_path: Path) -> None:
    """With synchronous=full the writer is a thread of its own; steps still commit, in order."""
    from _sidecar import settings as make_settings

    config = make_settings(tmp_path / "full.db", {"builtin": builtin_path}, synchronous="full")
    with ServerThread(config) as running, Client(running.url, api_key=KEYS["agent"]) as client:
        sessions = [client.session() for _ in range(3)]

        def steps(remote: RemoteSession) -> None:
            for i in range(10):
                remote.observe(egg_state(holding=i % 2 == 0))

        threads = [threading.Thread(target=steps, args=(s,)) for s in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [s.history()["steps_total"] for s in sessions] == [10, 10, 10]


def test_evicted_sessions_resume_from_the_database(tmp_path: Path, builtin_path: Path) -> None:
    """With room for two sessions in memory, the others are rebuilt from their rows on use, and
    go on where they were (step numbers, decisions); store_states keeps each concrete state."""
    from _sidecar import settings as make_settings

    config = make_settings(tmp_path / "small.db", {"builtin": builtin_path}, session_cache=2, store_states=True)
    with ServerThread(config) as running, Client(running.url, api_key=KEYS["agent"]) as client:
        sessions = [client.session(ASK_EVERYTHING_RISKY) for _ in range(4)]
        first = [s.observe(egg_state(in_microwave=True, closed=True)) for s in sessions]
        again = [s.observe(egg_state(in_microwave=True, closed=True, toggled=True)) for s in sessions]
        assert [d.step for d in again] == [1, 1, 1, 1]
        assert len({(d.action, d.p_unsafe) for d in first}) == 1 and len({(d.action, d.p_unsafe) for d in again}) == 1
        assert running.app is not None
        history = sessions[0].history()
        assert history["steps"][1]["state"] == egg_state(in_microwave=True, closed=True, toggled=True)
        text = httpx.get(f"{running.url}/metrics", headers=auth("admin")).text
        assert "forewarn_sessions_in_memory 2.0" in text and "forewarn_sessions_open 4.0" in text


def test_a_session_can_act_on_the_increase_only(agent: Client, builtin_path: Path) -> None:
    overrides = {"trigger": "increase", "min_increase": 0.01, "thresholds": {"reflect": 0.999}}
    guard = Guard.load(builtin_path)
    local = guard.session(guard.policy.with_overrides(overrides))
    remote = agent.session(overrides)
    states = [egg_state(), egg_state(holding=True), egg_state(), egg_state(in_microwave=True, closed=True)]
    actions = []
    for state in states:
        expected, got = local.observe(state), remote.observe(state)
        assert got.action is expected.action and got.message == expected.message
        assert got.baseline_p_unsafe == pytest.approx(expected.baseline_p_unsafe)
        assert got.increase == pytest.approx(expected.increase)
        actions.append(got.action)
    assert actions[0] is Action.ALLOW and actions[-1] is not Action.ALLOW and local.baseline is not None
    level = agent.session({"thresholds": {"reflect": 0.999}, "trigger": "level"}).observe(egg_state())
    assert level.action is Action.REFLECT and level.baseline_p_unsafe is None
    # with neither the spec nor the session setting one, the sidecar's trigger is increase (issue 36): the
    # first step, which raises nothing, is allowed, and the audit log records no ask_human nobody was asked
    default = agent.session({"thresholds": {"reflect": 0.999, "ask_human": 0.999}})
    assert default.info["policy"]["trigger"] == "increase"
    first = default.observe(egg_state())
    assert first.action is Action.ALLOW and first.baseline_p_unsafe is not None and first.approval_id is None
    with pytest.raises(ServerError):
        agent.session({"trigger": "rising"})


def test_the_increase_baseline_survives_eviction(tmp_path: Path, builtin_path: Path, backend: str,
                                                 request: pytest.FixtureRequest) -> None:
    """Under the sidecar's default trigger (increase) a step is compared with the risk of the last step whose
    risk was known. A session evicted after a step the model never saw resumes with that baseline, not
    with the start's: every decision is the library's, whatever the cache drops in between."""
    from _sidecar import settings
    from forewarn.server.settings import ServerSettings

    states = [egg_state(in_microwave=m, closed=c, toggled=t, holding=h)
              for m in (False, True) for c in (False, True) for t in (False, True) for h in (False, True)]
    order = [states[(7 * i + 3) % len(states)] for i in range(40)]
    # every state of the 16 is one predicate from a seen one: judged from it (guard.near_states, default 1);
    # the same model with near_states 0 meets the states it never saw as unseen, the case this test is about
    model = GuardModel.load(builtin_path)
    assert model.spec.text is not None and "\nguard:\n" in model.spec.text
    model.spec = parse_spec(model.spec.text.replace("\nguard:\n", "\nguard:\n  near_states: 0\n"))
    far = model.save(tmp_path / "far.json")
    local = with_sidecar_trigger(Guard.load(far)).session()
    db = tmp_path / "forewarn.db" if backend == "sqlite" else request.getfixturevalue("postgres_db")
    config: ServerSettings = settings(db, {"builtin": far}, session_cache=1)
    unseen = 0
    with ServerThread(config) as server, Client(server.url, api_key=KEYS["agent"]) as agent:
        remote = agent.session()
        for i, state in enumerate(order):
            expected, got = local.observe(state), remote.observe(state)
            assert (got.action, got.baseline_p_unsafe) == (expected.action, expected.baseline_p_unsafe), i
            unseen += expected.p_unsafe is None
            agent.session()  # evicts `remote` (a cache of one): its next step resumes it from the database
    assert unseen > 0  # the case that matters happened
