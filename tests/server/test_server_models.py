"""Loading and replacing models while agents are stepping."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest

from _sidecar import KEYS, ServerThread, auth, egg_state, refused_uploads
from forewarn.guard.client import Client, ServerError


def test_hot_reload_under_load(server: ServerThread, builtin_path: Path, builtin_v2_path: Path) -> None:
    """Replace the model again and again while threads observe: no step fails, every answer names a
    version that was current at some point, old sessions keep theirs, new sessions get the new one."""
    with Client(server.url, api_key=KEYS["agent"]) as agent, Client(server.url, api_key=KEYS["admin"]) as admin:
        v1 = agent.models()[0]["version"]
        old = [agent.session() for _ in range(3)]
        stop = threading.Event()
        failures: list[str] = []
        seen: dict[str, set[str]] = {s.id: set() for s in old}

        def worker(session_id: str) -> None:
            with Client(server.url, api_key=KEYS["agent"]) as own:
                remote = own.attach(session_id)
                i = 0
                while not stop.is_set():
                    try:
                        seen[session_id].add(remote.observe(egg_state(holding=i % 2 == 0)).model["version"])
                    except Exception as exc:  # any failure is the finding
                        failures.append(repr(exc))
                        return
                    i += 1

        threads = [threading.Thread(target=worker, args=(s.id,)) for s in old]
        for thread in threads:
            thread.start()
        versions = set()
        for i in range(6):
            path = builtin_v2_path if i % 2 == 0 else builtin_path
            loaded = admin.load_model("builtin", str(path))
            versions.add(loaded["version"])
            fresh = agent.session()
            assert fresh.info["model"]["version"] == loaded["version"]
            assert fresh.observe(egg_state()).model["version"] == loaded["version"]
        stop.set()
        for thread in threads:
            thread.join(10)
        assert not failures, failures[:3]
        assert len(versions) == 2 and v1 in versions and loaded["version"] == v1
        assert all(s == {v1} for s in seen.values()), seen  # existing sessions keep theirs


def test_migrate_sessions(server: ServerThread, admin: Client, agent: Client, builtin_v2_path: Path,
                          toy_path: Path) -> None:
    session = agent.session()
    before = session.observe(egg_state(in_microwave=True, closed=True))
    loaded = admin.load_model("builtin", str(builtin_v2_path), migrate_sessions=True)
    assert loaded["migrated_sessions"] == 1 and loaded["replaced"] == before.model["version"]
    after = session.observe(egg_state(in_microwave=True, closed=True))
    assert after.model["version"] == loaded["version"] != before.model["version"]
    assert after.step == 1
    with pytest.raises(ServerError) as incompatible:
        admin.load_model("builtin", str(toy_path), migrate_sessions=True)
    assert incompatible.value.status == 409 and incompatible.value.code == "incompatible_model"
    assert session.observe(egg_state()).model["version"] == loaded["version"]  # nothing changed


def test_load_a_new_name_and_bad_files(server: ServerThread, admin: Client, agent: Client, toy_path: Path,
                                       tmp_path: Path, http: httpx.Client) -> None:
    loaded = admin.load_model("toy-2", str(toy_path))
    assert loaded["replaced"] is None and loaded["predicates"] == ["a", "b"]
    assert agent.session(model="toy-2").observe({"a": True, "b": 5}).unsafe_now
    broken = tmp_path / "broken.json"
    broken.write_text(toy_path.read_text()[:-40])
    for path in (broken, tmp_path / "missing.json", tmp_path):
        response = http.post("/v1/models", json={"name": "x", "path": str(path)}, headers=auth("admin"))
        assert response.status_code == 422 and response.json()["error"]["field"] == "body.path", response.text
    response = http.post("/v1/models", json={"name": "bad name!", "path": str(toy_path)}, headers=auth("admin"))
    assert response.status_code == 422 and response.json()["error"]["field"] == "body.name"
    assert {m["name"] for m in agent.models()} == {"builtin", "toy", "toy-2"}


@pytest.mark.parametrize("path", ["bad\x00path.json", "/dev/zero", "/"])
def test_model_paths_that_are_not_files(http: httpx.Client, path: str) -> None:
    response = http.post("/v1/models", json={"name": "x", "path": path}, headers=auth("admin"))
    assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_model"


def test_an_integer_past_int64_is_a_422_naming_its_field(http: httpx.Client, toy_path: Path, tmp_path: Path) -> None:
    """Issue 36: 2⁶³ in transitions.indices was a 500 (an OverflowError reading it into an int64 array),
    uploaded or loaded by path; now a one-line 422 naming the field, and nothing is stored or served."""
    import orjson

    from forewarn.guard.model import _checksum

    document = orjson.loads(toy_path.read_bytes())
    document["transitions"]["indices"][0] = 2**63
    document["checksum"] = _checksum(document)
    for message in refused_uploads(http, "big", document, tmp_path / "past-int64.json"):
        assert message.endswith("field transitions.indices.0: Input should be less than or equal to "
                                "9223372036854775807"), message
    assert "big" not in [m["name"] for m in http.get("/v1/models", headers=auth("admin")).json()["models"]]


# -- racing replacements (issue 36) --------------------------------------------------------------

RACE_ROUNDS = 100
RACE_OFFSETS = (4000, 2000, 3000)  # signed at these seconds past the round's base, uploaded at once


def _signed_versions(toy_path: Path, private: Path, rounds: int) -> list[list[tuple[int, dict[str, object]]]]:
    from forewarn.guard.signing import load_private_key, sign_document

    key = load_private_key(private)
    body = orjson.loads(toy_path.read_bytes())
    return [[(at, sign_document(body, key, signed_at=at)) for at in (1_700_000_000 + 10_000 * r + o
                                                                     for o in RACE_OFFSETS)]
            for r in range(rounds)]


def _race(urls: list[str], rounds: list[list[tuple[int, dict[str, object]]]],
          served: Callable[[int], list[int]]) -> list[str]:
    """Upload each round's documents at once from threads (document i through ``urls[i % len]``); after
    the round, every served ``signed_at`` (``served(max accepted)``) must be the latest accepted."""
    rollbacks: list[str] = []
    accepted_max = 0
    clients = [httpx.Client(base_url=u, timeout=60, headers=auth("admin")) for u in urls]
    # FastAPI builds a route's context on its first request, and two servers in one process share the router
    # modules: a first request to each, one at a time, so that the race is the uploads', not FastAPI's
    for client in clients:
        assert client.get("/v1/models").status_code == 200
        assert client.post("/v1/models", json={"name": "toy"}).status_code == 422  # neither path nor document
    try:
        for number, documents in enumerate(rounds):
            barrier = threading.Barrier(len(documents))
            codes: dict[int, int] = {}

            def upload(i: int, at: int, document: dict[str, object], barrier: threading.Barrier = barrier,
                       codes: dict[int, int] = codes) -> None:
                barrier.wait(10)
                answer = clients[i % len(clients)].post("/v1/models", json={"name": "toy", "document": document})
                codes[at] = answer.status_code

            threads = [threading.Thread(target=upload, args=(i, at, d)) for i, (at, d) in enumerate(documents)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            assert set(codes.values()) <= {200, 409}, codes
            accepted_max = max([accepted_max, *(at for at, code in codes.items() if code == 200)])
            now = served(accepted_max)
            if any(at != accepted_max for at in now):
                rollbacks.append(f"round {number}: served {now}, latest accepted {accepted_max} ({codes})")
    finally:
        for client in clients:
            client.close()
    return rollbacks


def _served(http: httpx.Client) -> int:
    return int(http.get("/v1/models/toy", headers=auth("admin")).json()["signed_at"])


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_racing_signed_uploads_never_roll_back(tmp_path: Path, toy_path: Path, backend: str,
                                               request: pytest.FixtureRequest) -> None:
    """Issue 36: models signed at 4000, 2000 and 3000 uploaded at once, 100 rounds: the version check and the
    install are one step per name, so the one served is always the latest accepted, never an older one
    that was checked before the newer one was installed."""
    from _sidecar import settings
    from forewarn.guard.signing import generate_keypair

    private, public = tmp_path / "signing.pem", tmp_path / "signing.pub"
    generate_keypair(private, public)
    rounds = _signed_versions(toy_path, private, RACE_ROUNDS)
    first = tmp_path / "first.json"
    first.write_bytes(orjson.dumps(rounds[0][0][1]))  # the first round's latest, configured at start
    db = tmp_path / "forewarn.db" if backend == "sqlite" else request.getfixturevalue("postgres_db")
    config = settings(db, {"toy": first}, trusted_keys=(public,))
    with ServerThread(config) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        rollbacks = _race([server.url], rounds[1:], lambda _: [_served(http)])
    assert not rollbacks, rollbacks[:5]


def test_racing_uploads_through_two_replicas_never_roll_back(tmp_path: Path, toy_path: Path, postgres_db: str) -> None:
    """The same race through two replicas sharing one PostgreSQL: each checks against what it serves, and the
    database makes a version current only if it was signed no earlier than the current one (compare-and-set),
    so a replica that has not yet heard of the newer model cannot make an older one current."""
    from _sidecar import settings
    from forewarn.guard.signing import generate_keypair

    private, public = tmp_path / "signing.pem", tmp_path / "signing.pub"
    generate_keypair(private, public)
    rounds = _signed_versions(toy_path, private, RACE_ROUNDS // 2)
    first = tmp_path / "first.json"
    first.write_bytes(orjson.dumps(rounds[0][0][1]))
    config = settings(postgres_db, {"toy": first}, trusted_keys=(public,))
    with ServerThread(config) as one, ServerThread(config) as two, \
            httpx.Client(base_url=one.url, timeout=30) as a, httpx.Client(base_url=two.url, timeout=30) as b:

        def served(latest: int) -> list[int]:  # replicas follow the database on a notification: wait for it
            deadline = time.monotonic() + 10
            while True:
                now = [_served(a), _served(b)]
                if all(at == latest for at in now) or time.monotonic() > deadline:
                    return now
                time.sleep(0.02)

        rollbacks = _race([one.url, two.url], rounds[1:], served)
    assert not rollbacks, rollbacks[:5]
