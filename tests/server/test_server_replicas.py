"""Three ``forewarn serve`` replicas (real processes on 127.0.0.1) sharing one real PostgreSQL.

A client spreads each session's steps over the replicas at random; replicas are killed with
SIGKILL under load and restarted; approvals and model replacements travel between them."""
from __future__ import annotations

import math
import os
import random
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from _sidecar import ServerProcess, auth, egg_state, settings
from forewarn.guard import Guard
from forewarn.server.models_registry import with_sidecar_trigger

ASK = {"thresholds": {"ask_human": 0.9}, "trigger": "level"}  # every risky state asks, not only a rise
KILLS = int(os.environ.get("FOREWARN_TEST_REPLICA_KILLS", "20"))
STATES = [egg_state(in_microwave=m, closed=c, toggled=t, holding=h)
          for m in (False, True) for c in (False, True) for t in (False, True) for h in (False, True)]


@pytest.fixture
def replicas(postgres_db: str, builtin_path: Path) -> Iterator[list[ServerProcess]]:
    servers = [ServerProcess(settings(postgres_db, {"builtin": builtin_path})) for _ in range(3)]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


def _db_rows(url: str, sql: str, *params: object) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(sql, params).fetchall()


def _check_against_guard(guard: Guard, states: list[dict[str, object]], answers: list[dict[str, Any]]) -> None:
    local = with_sidecar_trigger(guard).session()  # the sidecar's default trigger: increase
    for step, (state, got) in enumerate(zip(states, answers)):
        expected = local.observe(state)
        assert got["step"] == step and got["action"] == expected.action.value
        assert got["abstract_state"] == expected.abstract_state
        if expected.p_unsafe is None:  # a state the model never saw
            assert got["p_unsafe"] is None
        else:
            assert math.isclose(got["p_unsafe"], expected.p_unsafe)


def test_steps_spread_over_replicas_match_the_guard(replicas: list[ServerProcess], postgres_db: str,
                                                    builtin_path: Path) -> None:
    rng = random.Random(7)
    guard = Guard.load(builtin_path)
    clients = [httpx.Client(base_url=r.url, headers=auth("agent"), timeout=30) for r in replicas]
    try:
        for _ in range(6):
            sid = rng.choice(clients).post("/v1/sessions", json={}).json()["id"]
            states = [rng.choice(STATES) for _ in range(12)]
            answers = []
            for state in states:
                response = rng.choice(clients).post(f"/v1/sessions/{sid}/observe", json={"state": state})
                assert response.status_code == 200, response.text
                answers.append(response.json())
            _check_against_guard(guard, states, answers)
            # every replica sees the whole session, whoever committed which step
            for client in clients:
                assert client.get(f"/v1/sessions/{sid}").json()["steps_total"] == len(states)
        # a session closed on one replica is closed on all, even where it is cached
        rng.choice(clients).post(f"/v1/sessions/{sid}/close")
        for client in clients:
            refused = client.post(f"/v1/sessions/{sid}/observe", json={"state": STATES[0]})
            assert refused.status_code == 409 and refused.json()["error"]["code"] == "session_closed"
    finally:
        for client in clients:
            client.close()


def test_the_same_idempotency_key_on_two_replicas_is_answered_once(replicas: list[ServerProcess],
                                                                    postgres_db: str) -> None:
    first, second, _ = replicas
    with httpx.Client(headers=auth("agent"), timeout=30) as http:
        sid = http.post(f"{first.url}/v1/sessions", json={}).json()["id"]
        for i in range(10):
            key = {"Idempotency-Key": f"k-{i}"}
            body = {"state": STATES[i % len(STATES)]}
            answers: list[bytes] = []
            threads = [threading.Thread(target=lambda url=url: answers.append(http.post(  # noqa: B023 - joined in this iteration
                f"{url}/v1/sessions/{sid}/observe", json=body, headers=key).content)) for url in (first.url, second.url)]  # noqa: B023
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert len(answers) == 2 and answers[0] == answers[1] and orjson.loads(answers[0])["step"] == i
    rows = _db_rows(postgres_db, "SELECT step FROM decisions WHERE session_id=%s ORDER BY step", sid)
    assert [r[0] for r in rows] == list(range(10))


def test_an_approval_resolved_on_one_replica_wakes_a_waiter_on_another(replicas: list[ServerProcess]) -> None:
    a, b, c = replicas
    with httpx.Client(timeout=30) as http:
        sid = http.post(f"{a.url}/v1/sessions", json={"policy": ASK}, headers=auth("agent")).json()["id"]
        asked = http.post(f"{a.url}/v1/sessions/{sid}/observe", json={"state": STATES[-1]},
                          headers=auth("agent")).json()
        approval = asked["approval_id"]
        assert asked["action"] == "ask_human" and approval
        woke: dict[str, Any] = {}

        def wait() -> None:
            started = time.monotonic()
            woke["answer"] = http.get(f"{b.url}/v1/approvals/{approval}", params={"wait": 30},
                                      headers=auth("agent")).json()
            woke["seconds"] = time.monotonic() - started

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.5)  # the waiter is parked on replica b
        resolved = http.post(f"{c.url}/v1/approvals/{approval}", json={"decision": "approve"},
                             headers=auth("approver"))
        assert resolved.status_code == 200
        waiter.join(30)
        assert woke["answer"]["status"] == "approved"
        assert woke["seconds"] < 5  # woken by the notification, not by the 30 s timeout


def test_a_model_replaced_through_one_replica_is_used_by_all(replicas: list[ServerProcess],
                                                             builtin_v2_path: Path) -> None:
    a, b, c = replicas
    with httpx.Client(timeout=60) as http:
        old = http.get(f"{b.url}/v1/models/builtin", headers=auth("agent")).json()["version"]
        sid = http.post(f"{b.url}/v1/sessions", json={}, headers=auth("agent")).json()["id"]
        http.post(f"{b.url}/v1/sessions/{sid}/observe", json={"state": STATES[0]}, headers=auth("agent"))
        loaded = http.post(f"{a.url}/v1/models", json={"name": "builtin", "document": orjson.loads(
            builtin_v2_path.read_bytes())}, headers=auth("admin"))
        assert loaded.status_code == 200, loaded.text
        new = loaded.json()["version"]
        assert new != old
        for replica in (b, c):
            deadline = time.monotonic() + 20
            while http.get(f"{replica.url}/v1/models/builtin", headers=auth("agent")).json()["version"] != new:
                assert time.monotonic() < deadline, f"{replica.url} still serves {old}"
                time.sleep(0.05)
            fresh = http.post(f"{replica.url}/v1/sessions", json={}, headers=auth("agent")).json()
            assert fresh["model"]["version"] == new
        # the open session keeps its version (the same in-flight rule as one server), on every replica
        for replica in replicas:
            step = http.post(f"{replica.url}/v1/sessions/{sid}/observe", json={"state": STATES[1]},
                             headers=auth("agent")).json()
            assert step["model"]["version"] == old


def test_kill_9_of_replicas_loses_no_answered_decision(replicas: list[ServerProcess], postgres_db: str,
                                                       builtin_path: Path) -> None:
    """Kill a random replica with SIGKILL under concurrent load, many times, restarting it each time.
    Clients retry a failed step on another replica with the same Idempotency-Key. Afterwards every
    answered decision is in the database byte for byte, every session's steps are contiguous, and
    each one matches the in-process guard."""
    rng = random.Random(15)
    guard = Guard.load(builtin_path)
    stop = threading.Event()
    lock = threading.Lock()
    sessions: dict[str, tuple[list[dict[str, object]], list[bytes]]] = {}
    failures: list[str] = []

    def client(seed: int) -> None:
        local = random.Random(seed)
        with httpx.Client(headers=auth("agent"), timeout=10) as http:
            while not stop.is_set():
                sid = _retrying(http, replicas, local, "/v1/sessions", {}, str(uuid.uuid4()))
                if sid is None:
                    continue
                sid = orjson.loads(sid)["id"]
                states: list[dict[str, object]] = []
                answers: list[bytes] = []
                with lock:
                    sessions[sid] = (states, answers)
                for _ in range(local.randint(3, 12)):
                    state = local.choice(STATES)
                    answer = _retrying(http, replicas, local, f"/v1/sessions/{sid}/observe", {"state": state},
                                       str(uuid.uuid4()))
                    if answer is None:  # the test is over while it retried: the step may or may not be in
                        return
                    if orjson.loads(answer).get("step") != len(states):
                        failures.append(f"{sid}: answered step {orjson.loads(answer).get('step')}, "
                                        f"expected {len(states)}")
                    states.append(state)
                    answers.append(answer)

    def _retrying(http: httpx.Client, servers: list[ServerProcess], local: random.Random, path: str,
                  body: dict[str, object], key: str) -> bytes | None:
        while not stop.is_set() or path.endswith("observe"):
            server = local.choice(servers)
            try:
                response = http.post(server.url + path, json=body, headers={"Idempotency-Key": key})
            except httpx.HTTPError:
                time.sleep(0.01)
                continue
            if response.status_code in (200, 201):
                return response.content
            if response.status_code != 503:
                failures.append(f"{path}: {response.status_code} {response.text}")
                return None
            time.sleep(0.01)
        return None

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.2, 0.5))
            victim = rng.randrange(len(replicas))
            replicas[victim].kill()
            time.sleep(rng.uniform(0.0, 0.2))
            replicas[victim] = ServerProcess(replicas[victim].settings, port=replicas[victim].port).start()
        time.sleep(0.3)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not failures, failures[:5]
    answered = sum(len(answers) for _, answers in sessions.values())
    assert answered > 50  # the load was real
    stored = {(row[0], int(row[1])): row[2].encode() for row in _db_rows(
        postgres_db, "SELECT session_id, step, decision FROM decisions")}
    for sid, (states, answers) in sessions.items():
        for step, answer in enumerate(answers):
            assert stored[(sid, step)] == answer  # answered, hence committed, byte for byte
        # a step past the answered ones can only be the last, unanswered, attempt of a stopped client
        committed = sorted(step for s, step in stored if s == sid)
        assert committed == list(range(len(committed))) and len(committed) in (len(answers), len(answers) + 1)
        _check_against_guard(guard, states, [orjson.loads(a) for a in answers])


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_forewarn_serve_workers_share_the_database(postgres_db: str, builtin_path: Path) -> None:
    """``forewarn serve --workers 2``: two processes on one port; one killed with SIGKILL is replaced,
    and its sessions go on in the other."""
    import signal
    import subprocess
    import sys

    from _sidecar import API_KEYS, free_port, wait_ready

    port = free_port()
    env = {**os.environ, "FOREWARN_DB": postgres_db, "FOREWARN_API_KEYS": API_KEYS, "FOREWARN_LOG_LEVEL": "warning"}
    process = subprocess.Popen([sys.executable, "-m", "forewarn", "serve", "--port", str(port), "--workers", "2",
                                "--model", f"builtin={builtin_path}"], env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, 60)
        deadline = time.monotonic() + 30
        while len(_children(process.pid)) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        workers = _children(process.pid)
        states: list[dict[str, object]] = []
        answers: list[dict[str, object]] = []
        with httpx.Client(base_url=url, headers=auth("agent"), timeout=10) as http:
            sid = http.post("/v1/sessions", json={}).json()["id"]
            for i in range(30):
                if i == 10:
                    os.kill(workers[0], signal.SIGKILL)
                state = STATES[i % len(STATES)]
                key = {"Idempotency-Key": f"w-{i}"}
                while True:
                    try:  # a new connection each time: the kernel spreads them over the workers
                        response = httpx.post(f"{url}/v1/sessions/{sid}/observe", json={"state": state},
                                              headers={**auth("agent"), **key}, timeout=10)
                    except httpx.HTTPError:
                        time.sleep(0.05)
                        continue
                    if response.status_code == 200:
                        break
                    assert response.status_code == 503, response.text
                    time.sleep(0.05)
                states.append(state)
                answers.append(response.json())
        _check_against_guard(Guard.load(builtin_path), states, answers)
        deadline = time.monotonic() + 30
        while len(_children(process.pid)) < 2:  # the killed worker was replaced
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert workers[0] not in _children(process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert process.returncode == 0


def test_workers_need_a_shared_database(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "FOREWARN_API_KEYS": "test-agent-key-0123456789:agent"}
    result = subprocess.run([sys.executable, "-m", "forewarn", "serve", "--workers", "2", "--db",
                             str(tmp_path / "x.db")], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == ["error: --workers: more than one process needs a shared database "
                                                  "(FOREWARN_DB=postgresql://...); SQLite is owned by one process"]
    result = subprocess.run([sys.executable, "-m", "forewarn", "serve", "--db", "postgresql://nobody:secret@127.0.0.1:1/x"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "cannot open the database" in result.stderr and "secret" not in result.stderr
