"""Idempotency-Key: a retried write is answered once and committed once, across a kill -9 too."""
from __future__ import annotations

import socket
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import orjson

from _sidecar import KEYS, ServerProcess, ServerThread, auth, egg_state, settings
from forewarn.guard.client import Client

RISKY = egg_state(in_microwave=True, closed=True)  # ask_human under a strict policy: an approval too


def _steps(db: Path | str, session_id: str) -> list[tuple[int, str]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT step, decision FROM decisions WHERE session_id=? ORDER BY step",
                            (session_id,)).fetchall()


def test_a_retry_returns_the_stored_answer_and_commits_nothing(http: httpx.Client, server: ServerThread) -> None:
    sid = http.post("/v1/sessions", json={"policy": {"thresholds": {"ask_human": 0.9}}}, headers=auth("agent")).json()["id"]
    key = {"Idempotency-Key": "retry-1"}
    first = http.post(f"/v1/sessions/{sid}/observe", json={"state": RISKY}, headers={**auth("agent"), **key})
    again = http.post(f"/v1/sessions/{sid}/observe", json={"state": RISKY}, headers={**auth("agent"), **key})
    assert first.status_code == again.status_code == 200
    assert first.content == again.content  # byte for byte
    assert len(_steps(server.settings.db, sid)) == 1
    assert len(http.get("/v1/approvals", headers=auth("approver")).json()["approvals"]) == 1  # one approval, not two
    other = http.post(f"/v1/sessions/{sid}/observe", json={"state": egg_state()}, headers={**auth("agent"), **key})
    assert other.status_code == 422 and other.json()["error"]["code"] == "idempotency_key_reused"
    # keys are per caller: the admin's "retry-1" is another write
    assert http.post(f"/v1/sessions/{sid}/observe", json={"state": RISKY},
                     headers={**auth("admin"), **key}).json()["step"] == 1
    bad = http.post(f"/v1/sessions/{sid}/observe", json={"state": RISKY},
                    headers={**auth("agent"), "Idempotency-Key": "x" * 201})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "header.idempotency-key"
    # batch and approvals honour keys the same way
    batch_key = {**auth("agent"), "Idempotency-Key": "batch-1"}
    body = {"steps": [{"session": sid, "state": egg_state()}, {"session": sid, "state": RISKY}]}
    b1, b2 = (http.post("/v1/batch", json=body, headers=batch_key) for _ in range(2))
    assert b1.status_code == 200 and b1.content == b2.content
    assert len(_steps(server.settings.db, sid)) == 4
    aid = first.json()["approval_id"]
    approve_key = {**auth("approver"), "Idempotency-Key": "approve-1"}
    a1, a2 = (http.post(f"/v1/approvals/{aid}", json={"decision": "approve"}, headers=approve_key) for _ in range(2))
    assert a1.status_code == a2.status_code == 200 and a1.content == a2.content  # not 409 the second time
    assert http.post(f"/v1/approvals/{aid}", json={"decision": "approve"},
                     headers={**auth("approver"), "Idempotency-Key": "approve-2"}).status_code == 409


def test_concurrent_retries_with_one_key_commit_once(server: ServerThread, http: httpx.Client) -> None:
    sid = http.post("/v1/sessions", json={}, headers=auth("agent")).json()["id"]
    answers: list[bytes] = []

    def send() -> None:
        with httpx.Client(base_url=server.url) as client:
            answers.append(client.post(f"/v1/sessions/{sid}/observe", json={"state": egg_state()},
                                       headers={**auth("agent"), "Idempotency-Key": "same"}).content)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(answers)) == 1 and len(_steps(server.settings.db, sid)) == 1


def _raw_observe(port: int, sid: str, key: str) -> socket.socket:
    body = orjson.dumps({"state": RISKY})
    request = (f"POST /v1/sessions/{sid}/observe HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEYS['agent']}"
               f"\r\nIdempotency-Key: {key}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(request.encode() + body)
    return sock  # the answer is never read: the client only ever sees the connection die


def test_kill_9_mid_request_then_retry(tmp_path: Path, builtin_path: Path) -> None:
    db = tmp_path / "forewarn.db"
    config = settings(db, {"builtin": builtin_path})
    server = ServerProcess(config).start()
    try:
        with Client(server.url, api_key=KEYS["agent"]) as client:
            sid = client.session({"thresholds": {"ask_human": 0.9}}).id
        # 1. committed, then killed before the client read a byte of the answer
        sock = _raw_observe(server.port, sid, "k-committed")
        deadline = time.monotonic() + 10
        while not _steps(db, sid) and time.monotonic() < deadline:
            time.sleep(0.001)
        server.kill()
        sock.close()
        stored = _steps(db, sid)
        assert len(stored) == 1
        server = ServerProcess(config).start()
        with httpx.Client(base_url=server.url) as http:
            retry = http.post(f"/v1/sessions/{sid}/observe", json={"state": RISKY},
                              headers={**auth("agent"), "Idempotency-Key": "k-committed"})
            assert retry.status_code == 200
            assert retry.content == stored[0][1].encode()  # the very answer that was committed
        assert len(_steps(db, sid)) == 1
        # 2. the client library retries by itself while the server is down and comes back on its port
        port = server.port
        server.kill()

        def restart() -> None:
            nonlocal server
            time.sleep(0.3)
            server = ServerProcess(config, port=port).start()

        thread = threading.Thread(target=restart)
        thread.start()
        with Client(f"http://127.0.0.1:{port}", api_key=KEYS["agent"], retries=8) as client:
            decision = client.attach(sid).observe(egg_state())
        thread.join()
        assert decision.step == 1 and len(_steps(db, sid)) == 2
    finally:
        server.stop()


def test_old_answers_are_forgotten_at_start(tmp_path: Path, builtin_path: Path) -> None:
    from forewarn.server.state import start

    db = tmp_path / "forewarn.db"
    state = start(settings(db, {"builtin": builtin_path}))
    now = time.time()
    for key, at in (("old", now - 2 * 3600), ("new", now)):
        def insert(conn: sqlite3.Connection, key: str = key, at: float = at) -> sqlite3.Cursor:
            return conn.execute("INSERT INTO idempotency VALUES ('agent-bob', ?, 'h', 200, x'7b7d', ?)", (key, at))

        state.storage.write_sync(insert)
    state.close()
    state = start(settings(db, {"builtin": builtin_path}, idempotency_hours=1.0))
    try:
        assert state.storage.idempotent("agent-bob", "old") is None
        assert state.storage.idempotent("agent-bob", "new") is not None
    finally:
        state.close()


def test_session_create_and_close_honour_the_key(http: httpx.Client, server: ServerThread) -> None:
    created = [http.post("/v1/sessions", json={"metadata": {"task": "t"}},
                         headers={**auth("agent"), "Idempotency-Key": "open-1"}) for _ in range(3)]
    assert {r.status_code for r in created} == {201}
    assert created[0].content == created[1].content == created[2].content  # one session, the same answer
    sid = created[0].json()["id"]
    with sqlite3.connect(f"file:{server.settings.db}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 1
    other = http.post("/v1/sessions", json={}, headers={**auth("agent"), "Idempotency-Key": "open-1"})
    assert other.status_code == 422 and other.json()["error"]["code"] == "idempotency_key_reused"
    closed = [http.post(f"/v1/sessions/{sid}/close", headers={**auth("agent"), "Idempotency-Key": "close-1"})
              for _ in range(2)]
    assert closed[0].status_code == closed[1].status_code == 200
    assert closed[0].content == closed[1].content and closed[0].json()["status"] == "closed"
    again = http.post(f"/v1/sessions/{sid}/close", headers={**auth("agent"), "Idempotency-Key": "close-2"})
    assert again.status_code == 200 and again.json()["closed_at"] == closed[0].json()["closed_at"]


def test_keys_of_the_same_name_in_two_tenants_share_nothing(tmp_path: Path, builtin_path: Path) -> None:
    """Idempotency records (and rate buckets) are keyed by tenant and key, not by the key's display name."""
    keys = "alpha-key-0123456789:agent:bob:t1,beta-key-0123456789:agent:bob:t2,admin-key-0123456789:admin"
    config = settings(tmp_path / "forewarn.db", {"builtin": builtin_path}, api_keys=keys)
    alpha, beta = {"Authorization": "Bearer alpha-key-0123456789"}, {"Authorization": "Bearer beta-key-0123456789"}
    with ServerThread(config) as server, httpx.Client(base_url=server.url) as http:
        key = {"Idempotency-Key": "open-1"}
        first = http.post("/v1/sessions", json={"metadata": {"iban": "DE89370400440532013000"}},
                          headers={**alpha, **key})
        assert first.status_code == 201, first.text
        second = http.post("/v1/sessions", json={"metadata": {"task": "other"}}, headers={**beta, **key})
        assert second.status_code == 201, second.text  # its own write, not t1's stored answer, nor a 422
        assert second.json()["id"] != first.json()["id"] and b"DE89" not in second.content
        retry = http.post("/v1/sessions", json={"metadata": {"task": "other"}}, headers={**beta, **key})
        assert retry.content == second.content
