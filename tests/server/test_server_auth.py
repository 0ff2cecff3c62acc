"""Every endpoint against every role (and no key, and a wrong key); settings that refuse to start."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from _sidecar import API_KEYS, KEYS, ServerThread, auth, egg_state, settings
from forewarn.errors import ForewarnError
from forewarn.server.app import start
from forewarn.server.auth import Authenticator
from forewarn.server.settings import ConfigError, ServerSettings, load_settings

AGENT, APPROVER, ADMIN = "agent", "approver", "admin"
EVERYONE = {AGENT, APPROVER, ADMIN}

# (method, path template, body, roles allowed); {sid} and {aid} are filled in per test.
MATRIX = [
    ("POST", "/v1/sessions", {}, {AGENT, ADMIN}),
    ("GET", "/v1/sessions", None, EVERYONE),
    ("GET", "/v1/sessions/{sid}", None, EVERYONE),
    ("GET", "/v1/sessions/{sid}/trail", None, EVERYONE),
    ("POST", "/v1/sessions/{sid}/observe", {"state": egg_state()}, {AGENT, ADMIN}),
    ("POST", "/v1/sessions/{sid}/preview", {"state": egg_state()}, {AGENT, ADMIN}),
    ("POST", "/v1/sessions/{sid}/proposals", {"tool": "t", "state": egg_state()}, {AGENT, ADMIN}),
    ("GET", "/v1/proposals", None, {APPROVER, ADMIN}),
    ("GET", "/v1/proposals/{pid}", None, EVERYONE),
    ("POST", "/v1/proposals/{pid}", {"decision": "approve"}, {APPROVER, ADMIN}),
    ("POST", "/v1/proposals/{pid}/cancel", {}, {AGENT, ADMIN}),
    ("POST", "/v1/sessions/{sid}/close", None, {AGENT, ADMIN}),
    ("POST", "/v1/batch", {"steps": [{"session": "{sid}", "state": egg_state()}]}, {AGENT, ADMIN}),
    ("GET", "/v1/approvals", None, {APPROVER, ADMIN}),
    ("GET", "/v1/changes", None, {APPROVER, ADMIN}),
    ("GET", "/v1/approvals/{aid}", None, EVERYONE),
    ("POST", "/v1/approvals/{aid}", {"decision": "approve"}, {APPROVER, ADMIN}),
    ("GET", "/v1/models", None, EVERYONE),
    ("GET", "/v1/models/{name}", None, EVERYONE),
    ("GET", "/v1/models/{name}/document", None, EVERYONE),
    ("POST", "/v1/models", {"name": "builtin", "path": "{model}"}, {ADMIN}),
    ("GET", "/metrics", None, {ADMIN}),  # every tenant's totals and timings: not a tenant's to read
]
PUBLIC = [("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/docs"), ("GET", "/openapi.json"), ("GET", "/console"),
          ("GET", "/console/app.js"), ("GET", "/docs-assets/swagger-ui-bundle.js")]


def test_matrix_covers_every_route(server: ServerThread) -> None:
    routes = {(method.upper(), path) for path, item in server.app.openapi()["paths"].items() for method in item}
    listed = {(m, p.replace("{sid}", "{session_id}").replace("{aid}", "{approval_id}")
               .replace("{pid}", "{proposal_id}")) for m, p, _, _ in MATRIX}
    listed |= {(m, p) for m, p in PUBLIC if p in {"/healthz", "/readyz"}}
    assert routes == listed


def _fill(value: Any, names: dict[str, str]) -> Any:  # JSON: a path, a body, a value in it
    if isinstance(value, str):
        for key, replacement in names.items():
            value = value.replace("{" + key + "}", replacement)
        return value
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    return value


@pytest.mark.parametrize("role", [None, "wrong", AGENT, APPROVER, ADMIN])
def test_every_endpoint_and_role(server: ServerThread, http: httpx.Client, builtin_path: Path, role: str | None) -> None:
    sid = http.post("/v1/sessions", json={"policy": {"thresholds": {"ask_human": 0.9}}},
                    headers=auth(AGENT)).json()["id"]
    decision = http.post(f"/v1/sessions/{sid}/observe", json={"state": egg_state(in_microwave=True, closed=True)},
                         headers=auth(AGENT)).json()
    proposal = http.post(f"/v1/sessions/{sid}/proposals", json={"tool": "t", "state": egg_state()},
                         headers=auth(AGENT)).json()
    names = {"sid": sid, "aid": decision["approval_id"], "pid": proposal["id"], "name": "builtin",
             "model": str(builtin_path)}
    if role is None:
        headers: dict[str, str] = {}
    elif role == "wrong":
        headers = {"Authorization": "Bearer not-a-key"}
    else:
        headers = auth(role)
    for method, path, body, allowed in MATRIX:
        url = _fill(path, names)
        payload = _fill(body, names) if body is not None else None
        response = http.request(method, url, json=payload, headers=headers)
        where = f"{method} {path} as {role}"
        assert response.headers["content-type"].startswith(("application/json", "text/plain")), where
        if role in (None, "wrong"):
            assert response.status_code == 401, where
            assert response.headers["www-authenticate"] == "Bearer", where
            assert response.json()["error"]["code"] == "unauthorized", where
        elif role in allowed:
            assert response.status_code in (200, 201, 409), (where, response.status_code, response.text)
        else:
            assert response.status_code == 403, (where, response.status_code, response.text)
            assert response.json()["error"]["code"] == "forbidden", where
    for method, path in PUBLIC:
        assert http.request(method, path, headers=headers).status_code == 200, path


def test_bearer_parsing() -> None:
    keys = load_settings(api_keys="k1:agent,k2:admin:root").api_keys
    checker = Authenticator(keys)
    agent, root = checker.principal("Bearer k1"), checker.principal("bearer k2")
    assert agent is not None and root is not None
    assert agent.role.value == "agent"
    assert root.name == "root"
    assert checker.principal("Bearer k1x") is None
    assert checker.principal("k1") is None
    assert checker.principal("Basic k1") is None
    assert checker.principal("Bearer ") is None
    assert checker.principal(None) is None
    assert agent.name.startswith("key-")  # a fingerprint, never the key


def test_keys_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FOREWARN_API_KEYS", "a1:agent, p1:approver:carol ,d1:admin")
    monkeypatch.setenv("FOREWARN_DB", str(tmp_path / "env.db"))
    loaded = load_settings()
    assert [(k.role.value, k.name) for k in loaded.api_keys] == [("agent", None), ("approver", "carol"),
                                                                   ("admin", None)]
    assert loaded.db == tmp_path / "env.db"
    config = tmp_path / "server.yaml"
    config.write_text("port: 9000\napi_keys:\n  - {key: file-key, role: admin}\nlimits: {max_batch: 5}\n")
    from_file = load_settings(config)
    assert from_file.port == 9000 and from_file.limits.max_batch == 5
    assert [k.key.get_secret_value() for k in from_file.api_keys] == ["a1", "p1", "d1"]  # environment wins
    assert load_settings(config, port=9100).port == 9100  # the command line wins


@pytest.mark.parametrize("text, field", [
    ("api_keys: 'k1'", "api_keys"),
    ("api_keys: 'k1:root'", "api_keys"),
    ("prot: 80", "prot"),
    ("limits: {max_batch: 0}", "limits.max_batch"),
    ("models: {'bad name': x.json}", "models"),
    ("default_model: nope", "default_model"),
    ("host: 0.0.0.0\ninsecure_no_auth: true", "insecure_no_auth"),
    ("[1, 2]", "mapping"),
])
def test_bad_config_is_refused_with_its_key(tmp_path: Path, text: str, field: str) -> None:
    config = tmp_path / "server.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert field in str(caught.value) and str(config) in str(caught.value)


def test_no_keys_refuses_to_start(tmp_path: Path, builtin_path: Path) -> None:
    with pytest.raises(ConfigError, match="no API keys"):
        start(ServerSettings(db=tmp_path / "x.db", models={"builtin": builtin_path}))
    assert not (tmp_path / "x.db").exists()


def test_insecure_no_auth_on_loopback(tmp_path: Path, builtin_path: Path) -> None:
    plain = ServerSettings(db=tmp_path / "x.db", models={"builtin": builtin_path}, insecure_no_auth=True,
                           log_level="warning")
    with ServerThread(plain) as running, httpx.Client(base_url=running.url) as http:
        sid = http.post("/v1/sessions", json={}).json()["id"]
        assert http.post(f"/v1/sessions/{sid}/observe", json={"state": egg_state()}).status_code == 200
        assert http.get(f"/v1/sessions/{sid}").json()["steps"][0]["principal"] == "anonymous"


def test_second_server_on_one_database_is_refused(tmp_path: Path, builtin_path: Path) -> None:
    config = settings(tmp_path / "one.db", {"builtin": builtin_path})
    with ServerThread(config), pytest.raises(ForewarnError, match="in use by another"):
        start(config)


def test_api_keys_constant(monkeypatch: pytest.MonkeyPatch) -> None:
    assert API_KEYS.count(":") == 6 and set(KEYS) == EVERYONE
