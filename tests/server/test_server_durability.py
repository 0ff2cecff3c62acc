"""Restarts: graceful ones resume everything; kill -9 at random moments loses no answered decision."""
from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from pathlib import Path

import httpx

from _sidecar import ServerProcess, auth, egg_state, settings

ASK = {"thresholds": {"ask_human": 0.9}, "trigger": "level"}
KILLS = int(os.environ.get("FOREWARN_TEST_KILLS", "20"))


def test_restart_resumes_sessions_and_approvals(tmp_path: Path, builtin_path: Path, builtin_v2_path: Path) -> None:
    db = tmp_path / "restart.db"
    with ServerProcess(settings(db, {"builtin": builtin_path})) as first, httpx.Client(base_url=first.url) as http:
        sid = http.post("/v1/sessions", json={"policy": ASK, "metadata": {"run": 1}}, headers=auth("agent")).json()["id"]
        asked_before = [http.post(f"/v1/sessions/{sid}/observe", json={"state": state},
                                  headers=auth("agent")).json()["approval_id"]
                        for state in (egg_state(), egg_state(holding=True))]
        asked = http.post(f"/v1/sessions/{sid}/observe", json={"state": egg_state(in_microwave=True, closed=True)},
                          headers=auth("agent")).json()
        version_1 = asked["model"]["version"]
    # the model file of the name changes between the runs: new sessions get it, the old one keeps its own
    with ServerProcess(settings(db, {"builtin": builtin_v2_path})) as second, \
            httpx.Client(base_url=second.url) as http:
        pending = http.get("/v1/approvals", headers=auth("approver")).json()["approvals"]
        expected = [a for a in asked_before if a] + [asked["approval_id"]]
        assert [a["id"] for a in pending] == expected
        step = http.post(f"/v1/sessions/{sid}/observe", json={"state": egg_state(in_microwave=True, closed=True)},
                         headers=auth("agent")).json()
        assert step["step"] == 3 and step["model"]["version"] == version_1
        assert step["p_unsafe"] == asked["p_unsafe"] and step["action"] == "ask_human"
        fresh = http.post("/v1/sessions", json={}, headers=auth("agent")).json()
        assert fresh["model"]["version"] != version_1
        assert http.post(f"/v1/approvals/{asked['approval_id']}", json={"decision": "approve"},
                         headers=auth("approver")).json()["status"] == "approved"
        session = http.get(f"/v1/sessions/{sid}", headers=auth("agent")).json()
        assert session["steps_total"] == 4 and session["metadata"] == {"run": 1}
        metrics = http.get("/metrics", headers=auth("admin")).text
        assert "forewarn_sessions_open 2.0" in metrics
        assert f"forewarn_approvals_pending {float(len(expected))}" in metrics  # one resolved, one added


def test_kill_9_loses_no_answered_decision(tmp_path: Path, builtin_path: Path) -> None:
    """Kill the server with SIGKILL at random moments under load, many times; every decision a client
    received must be in the database, byte for byte, and sessions must continue where they were."""
    db = tmp_path / "kill.db"
    config = settings(db, {"builtin": builtin_path})
    rng = random.Random(20260611)
    answered: dict[tuple[str, int], bytes] = {}
    created: list[str] = []
    approvals: list[str] = []
    lock = threading.Lock()
    states = [egg_state(in_microwave=m, closed=c, toggled=t, holding=h)
              for m in (False, True) for c in (False, True) for t in (False, True) for h in (False, True)]
    sessions: list[str] = []
    last_step: dict[str, int] = {}

    # clients are made once: building one (its TLS context) can take longer than a round lasts
    clients = [httpx.Client(timeout=5.0, headers=auth("agent")) for _ in range(4)]

    def worker(http: httpx.Client, url: str, sid: str, stop: threading.Event, started: threading.Barrier,
               seed: int) -> None:
        local = random.Random(seed)
        first = True
        while not stop.is_set():
            try:
                if not first and local.random() < 0.05:
                    response = http.post(f"{url}/v1/sessions", json={"policy": ASK})
                    if response.status_code == 201:
                        with lock:
                            created.append(response.json()["id"])
                    continue
                response = http.post(f"{url}/v1/sessions/{sid}/observe", json={"state": local.choice(states)})
            except httpx.TransportError:
                return  # the server is gone
            finally:
                if first:
                    first = False
                    started.wait(10)
            assert response.status_code == 200, response.text
            body = response.json()
            with lock:
                answered[(sid, body["step"])] = response.content
                if body["approval_id"]:
                    approvals.append(body["approval_id"])
                assert body["step"] > last_step.get(sid, -1), "a step number was handed out twice"
                last_step[sid] = body["step"]

    total_rounds = 0
    for _ in range(KILLS):
        server = ServerProcess(config).start()
        with httpx.Client(base_url=server.url, headers=auth("agent")) as http:
            while len(sessions) < 4 or rng.random() < 0.3:
                sessions.append(http.post("/v1/sessions", json={"policy": ASK}).json()["id"])
        stop = threading.Event()
        started = threading.Barrier(len(clients) + 1)
        chosen = rng.sample(sessions, len(clients))
        workers = [threading.Thread(target=worker, args=(client, server.url, sid, stop, started, rng.random()))
                   for client, sid in zip(clients, chosen)]
        for thread in workers:
            thread.start()
        started.wait(10)  # every worker has had its first answer: the load is on
        time.sleep(rng.uniform(0.0, 0.3))
        server.kill()
        stop.set()
        for thread in workers:
            thread.join(10)
        total_rounds += 1
    for client in clients:
        client.close()
    assert total_rounds == KILLS and len(answered) > KILLS * 5

    with sqlite3.connect(db) as conn:
        stored = {(sid, step): decision.encode()
                  for sid, step, decision in conn.execute("SELECT session_id, step, decision FROM decisions")}
        known_sessions = {row[0] for row in conn.execute("SELECT id FROM sessions")}
        known_approvals = {row[0] for row in conn.execute("SELECT id FROM approvals")}
        steps_by_session: dict[str, list[int]] = {}
        for sid, step in conn.execute("SELECT session_id, step FROM decisions ORDER BY session_id, step"):
            steps_by_session.setdefault(sid, []).append(step)
    missing = [key for key in answered if key not in stored]
    assert not missing, f"{len(missing)} answered decisions are not in the database, e.g. {missing[:3]}"
    assert all(stored[key] == body for key, body in answered.items()), "a stored decision differs from the answer"
    assert set(created) <= known_sessions and set(approvals) <= known_approvals
    for sid, steps in steps_by_session.items():
        assert steps == list(range(len(steps))), f"session {sid} has gaps or repeats: {steps}"
