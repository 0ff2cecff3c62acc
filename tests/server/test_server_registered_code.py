"""No path from data to code on the server: an admin's upload, a restart and a second replica
accept only Python predicates the server's process registered by name (real uvicorn)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import forewarn
from _sidecar import ServerThread, auth, refused_uploads, settings
from forewarn.guard.model import GuardModel, _checksum
from forewarn.guard.runtime import Guard
from forewarn.server.models_registry import with_sidecar_trigger
from forewarn.server.storage import Storage, open_storage

EXPLOITS = ["mypkg.predicates:logging.config.dictConfig", "subprocess:check_output", "logging.config.dictConfig",
            "builtins.__import__", "toy.a.__globals__"]


def crafted(model_path: Path, predicate: str) -> dict[str, Any]:
    """The toy model with predicate ``a`` turned into Python ``predicate``, its checksum recomputed:
    what someone who can write a model file hands the server."""
    document: dict[str, Any] = orjson.loads(model_path.read_bytes())
    assert "  a: 'state.a'\n" in document["spec"]
    document["spec"] = document["spec"].replace("  a: 'state.a'\n", f"  a: {{python: '{predicate}'}}\n")
    document["checksum"] = _checksum(document)
    return document


@pytest.fixture
def toy_a() -> None:
    """The operator's process registers ``toy.a`` (the toy model's predicate ``a``, in Python)."""

    @forewarn.predicate("toy.a")
    def a(state: dict[str, Any]) -> bool:
        return bool(state["a"])


def test_uploads_naming_code_are_refused(http: httpx.Client, toy_path: Path, tmp_path: Path, toy_a: None) -> None:
    marker = tmp_path / "pwned"
    for reference in EXPLOITS:
        document = crafted(toy_path, reference)
        path = tmp_path / "crafted.json"
        path.write_bytes(orjson.dumps(document))
        for body in ({"name": "evil", "path": str(path)}, {"name": "evil", "document": document}):
            response = http.post("/v1/models", json=body, headers=auth("admin"))
            assert response.status_code == 422, response.text
            message = response.json()["error"]["message"]
            assert "\n" not in message and reference in message
            assert "is an import path" in message or "is not registered (registered: toy.a)" in message
        sid = http.post("/v1/sessions", json={}, headers=auth("agent")).json()["id"]
        state = {"version": 1, "handlers": {"h": {"()": "subprocess.getoutput", "cmd": f"touch {marker}"}}}
        http.post(f"/v1/sessions/{sid}/preview", json={"state": state}, headers=auth("agent"))
    assert "evil" not in [m["name"] for m in http.get("/v1/models", headers=auth("admin")).json()["models"]]
    assert not marker.exists()


def test_a_registered_predicate_serves(http: httpx.Client, toy_path: Path, toy_a: None) -> None:
    document = crafted(toy_path, "toy.a")
    loaded = http.post("/v1/models", json={"name": "py", "document": document}, headers=auth("admin"))
    assert loaded.status_code == 200, loaded.text
    local = with_sidecar_trigger(Guard(GuardModel.from_document(document))).session()  # as the sidecar: increase
    sid = http.post("/v1/sessions", json={"model": "py"}, headers=auth("agent")).json()["id"]
    for state in ({"a": False, "b": 0}, {"a": True, "b": 0}, {"a": True, "b": 5}):
        got = http.post(f"/v1/sessions/{sid}/observe", json={"state": state}, headers=auth("agent")).json()
        expected = local.observe(state)
        assert got["action"] == expected.action.value and got["abstract_state"] == expected.abstract_state


def _plant(db: Path | str, name: str, document: dict[str, Any]) -> None:
    """A model row made current behind the server's back (or by an older server that allowed it)."""
    storage = open_storage(db)
    raw = orjson.dumps(document)
    storage.write_sync(Storage.put_model(name, raw[-16:].hex()[:16], "planted", raw, "old", current=True))
    storage.close()


def test_at_restart_a_model_naming_unregistered_code_is_reported(tmp_path: Path, builtin_path: Path,
                                                                 toy_path: Path, toy_a: None) -> None:
    db = tmp_path / "forewarn.db"
    _plant(db, "evil", crafted(toy_path, "mypkg.predicates:logging.config.dictConfig"))
    _plant(db, "gone", crafted(toy_path, "unregistered.name"))
    _plant(db, "fine", crafted(toy_path, "toy.a"))
    with ServerThread(settings(db, {"builtin": builtin_path})) as server, httpx.Client(base_url=server.url) as http:
        listed = http.get("/v1/models", headers=auth("admin")).json()
        assert [m["name"] for m in listed["models"]] == ["builtin", "fine"]
        refused = {r["name"]: r["reason"] for r in listed["refused"]}
        assert set(refused) == {"evil", "gone"}
        assert "is an import path" in refused["evil"] and "'unregistered.name' is not registered" in refused["gone"]
        assert http.get("/v1/models", headers=auth("agent")).json()["refused"] == []  # an admin's business


def test_serve_and_settings_refuse_the_retired_allow_list(tmp_path: Path, builtin_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="an allow-list of modules is no longer accepted"):
        settings(tmp_path / "x.db", {"builtin": builtin_path}, python_predicates=("mypkg",))
    monkeypatch.setenv("FOREWARN_PYTHON_PREDICATES", "mypkg")
    with pytest.raises(ValidationError, match="an allow-list of modules is no longer accepted"):
        settings(tmp_path / "x.db", {"builtin": builtin_path})


@pytest.mark.postgres
def test_replicas_refuse_and_serve_the_same(postgres_db: str, builtin_path: Path, toy_path: Path,
                                            toy_a: None) -> None:
    """Two replicas on one PostgreSQL: an upload refused on one never reaches the other; a model made
    current in the database naming unregistered code is reported on both; a registered one serves on both."""
    config = settings(postgres_db, {"builtin": builtin_path})
    with ServerThread(config) as a, ServerThread(config) as b, httpx.Client(timeout=30) as http:
        evil = crafted(toy_path, "mypkg.predicates:logging.config.dictConfig")
        response = http.post(f"{a.url}/v1/models", json={"name": "evil", "document": evil}, headers=auth("admin"))
        assert response.status_code == 422 and "is an import path" in response.text
        _plant(postgres_db, "evil", evil)  # NOTIFY: both replicas look, both refuse
        loaded = http.post(f"{a.url}/v1/models", json={"name": "py", "document": crafted(toy_path, "toy.a")},
                           headers=auth("admin"))
        assert loaded.status_code == 200, loaded.text
        for replica in (a, b):
            deadline = time.monotonic() + 20
            while True:
                listed = http.get(f"{replica.url}/v1/models", headers=auth("admin")).json()
                names, refused = [m["name"] for m in listed["models"]], [r["name"] for r in listed["refused"]]
                if "py" in names and refused == ["evil"]:
                    break
                assert time.monotonic() < deadline, (replica.url, names, refused)
                time.sleep(0.05)
            assert "evil" not in names
            sid = http.post(f"{replica.url}/v1/sessions", json={"model": "py"}, headers=auth("agent")).json()["id"]
            step = http.post(f"{replica.url}/v1/sessions/{sid}/observe", json={"state": {"a": True, "b": 0}},
                             headers=auth("agent"))
            assert step.status_code == 200 and step.json()["abstract_state"] == {"a": True, "b": False}


def test_an_upload_naming_a_name_nobody_registered_is_a_422(http: httpx.Client, toy_path: Path,
                                                             tmp_path: Path) -> None:
    """Issue 36 / docs/security.md ("What an admin upload can and cannot do"): a plain name no operator code
    registered, uploaded or loaded by path, is a one-line 422 saying which name and how to register it;
    nothing is stored, and the served models stay as they were."""
    document = crafted(toy_path, "app.nobody")
    for message in refused_uploads(http, "named", document, tmp_path / "unregistered.json"):
        assert ("predicate 'a': python predicate 'app.nobody' is not registered (registered: none); operator code "
                "registers functions with @forewarn.predicate(NAME) or entry points in group "
                "'forewarn.predicates'") in message, message
    models = http.get("/v1/models", headers=auth("admin")).json()
    assert [m["name"] for m in models["models"]] == ["builtin", "toy"] and models["refused"] == []
