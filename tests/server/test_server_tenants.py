"""Tenants: every session belongs to the tenant of the key that opened it; role × endpoint × tenant."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from _sidecar import ServerThread, egg_state, settings

KEYS = {
    "agent_acme": "k-agent-acme-0123456789", "agent_acme2": "k-agent-acme2-0123456789",
    "agent_globex": "k-agent-globex-0123456789", "approver_acme": "k-approver-acme-0123456789",
    "approver_globex": "k-approver-globex-0123456789", "approver_all": "k-approver-all-0123456789",
    "admin": "k-admin-0123456789",
}
API_KEYS = ",".join([
    f"{KEYS['agent_acme']}:agent:alice:acme", f"{KEYS['agent_acme2']}:agent:amos:acme",
    f"{KEYS['agent_globex']}:agent:gus:globex", f"{KEYS['approver_acme']}:approver:ann:acme",
    f"{KEYS['approver_globex']}:approver:gil:globex|initech", f"{KEYS['approver_all']}:approver:root-approver",
    f"{KEYS['admin']}:admin:root",
])
# who may see (and act on, as their role allows) a session of tenant acme
SEES_ACME = {"agent_acme", "agent_acme2", "approver_acme", "approver_all", "admin"}


def h(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


@pytest.fixture
def http(tmp_path: Path, builtin_path: Path) -> Iterator[httpx.Client]:
    with ServerThread(settings(tmp_path / "forewarn.db", {"builtin": builtin_path}, api_keys=API_KEYS)) as server, \
            httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def _acme_session(http: httpx.Client) -> tuple[str, str]:
    sid = http.post("/v1/sessions", json={"policy": {"thresholds": {"ask_human": 0.9}}}, headers=h("agent_acme")).json()["id"]
    decision = http.post(f"/v1/sessions/{sid}/observe", json={"state": egg_state(in_microwave=True, closed=True)},
                         headers=h("agent_acme")).json()
    assert decision["approval_id"], decision
    return sid, decision["approval_id"]


@pytest.mark.parametrize("who", sorted(KEYS))
def test_role_endpoint_tenant_matrix(http: httpx.Client, who: str) -> None:
    sid, aid = _acme_session(http)
    role = who.split("_")[0]
    sees = who in SEES_ACME
    cells = [
        ("GET", f"/v1/sessions/{sid}", None, {"agent", "approver", "admin"}),
        ("GET", f"/v1/sessions/{sid}/trail", None, {"agent", "approver", "admin"}),
        ("POST", f"/v1/sessions/{sid}/preview", {"state": egg_state()}, {"agent", "admin"}),
        ("POST", f"/v1/sessions/{sid}/observe", {"state": egg_state()}, {"agent", "admin"}),
        ("POST", "/v1/batch", {"steps": [{"session": sid, "state": egg_state()}]}, {"agent", "admin"}),
        ("GET", f"/v1/approvals/{aid}", None, {"agent", "approver", "admin"}),
        ("POST", f"/v1/approvals/{aid}", {"decision": "reject"}, {"approver", "admin"}),
        ("POST", f"/v1/sessions/{sid}/close", None, {"agent", "admin"}),
    ]
    for method, path, body, roles in cells:
        response = http.request(method, path, json=body, headers=h(who))
        where = f"{method} {path} as {who}"
        if role not in roles:
            assert response.status_code == 403, (where, response.text)
        elif sees:
            assert response.status_code == 200, (where, response.text)
        else:  # another tenant's session: as if it did not exist, and nothing changed
            assert response.status_code == 404, (where, response.text)
            assert response.json()["error"]["code"] == "not_found", where
    # the lists show the caller's tenants only
    listed = http.get("/v1/sessions", headers=h(who)).json()["sessions"]
    assert (sid in [s["id"] for s in listed]) == sees, who
    searched = http.get("/v1/sessions", params={"session_id": sid[2:12], "decision": "ask_human"},
                        headers=h(who)).json()["sessions"]  # a search stays within them too
    assert [s["id"] for s in searched] == ([sid] if sees else []), who
    if role in ("approver", "admin"):
        approvals = http.get("/v1/approvals", params={"status": "all"}, headers=h(who)).json()["approvals"]
        assert (aid in [a["id"] for a in approvals]) == sees, who
    # whatever another tenant tried, the session's history is its own
    steps = http.get(f"/v1/sessions/{sid}", headers=h("admin")).json()["steps"]
    assert len(steps) == (3 if who in {"agent_acme", "agent_acme2", "admin"} else 1), who


def test_an_agent_of_another_tenant_cannot_cancel_approvals(http: httpx.Client) -> None:
    sid, aid = _acme_session(http)
    assert http.post(f"/v1/sessions/{sid}/close", headers=h("agent_globex")).status_code == 404
    assert http.get(f"/v1/approvals/{aid}", headers=h("admin")).json()["status"] == "pending"
    assert http.get(f"/v1/approvals/{aid}", params={"wait": 0.1}, headers=h("agent_globex")).status_code == 404
    globex = http.post("/v1/sessions", json={}, headers=h("agent_globex")).json()["id"]
    assert [s["id"] for s in http.get("/v1/sessions", headers=h("agent_globex")).json()["sessions"]] == [globex]
    assert http.get(f"/v1/sessions/{globex}", headers=h("approver_globex")).status_code == 200
    assert http.get(f"/v1/sessions/{globex}", headers=h("approver_acme")).status_code == 404


def test_changes_metrics_and_model_sources_stay_within_a_tenant(http: httpx.Client) -> None:
    """Another tenant's approvals neither move nor wake the console's /v1/changes; /metrics (every
    tenant's totals) is an admin's; a model's source path and loader are an admin's."""
    acme, globex, everyone = (http.get("/v1/changes", headers=h(who)).json()["generation"]
                              for who in ("approver_acme", "approver_globex", "admin"))
    _acme_session(http)  # acme's agent asks: one approval of tenant acme
    assert http.get("/v1/changes", headers=h("approver_globex")).json()["generation"] == globex
    waited = http.get("/v1/changes", params={"since": globex, "wait": 0.2}, headers=h("approver_globex")).json()
    assert waited["generation"] == globex  # woken by acme's change, it went on waiting and answers unchanged
    assert http.get("/v1/changes", headers=h("approver_acme")).json()["generation"] == acme + 1
    assert http.get("/v1/changes", headers=h("admin")).json()["generation"] == everyone + 1
    assert http.get("/v1/changes", headers=h("approver_all")).json()["generation"] == everyone + 1
    for who in ("agent_acme", "approver_acme", "approver_all"):
        assert http.get("/metrics", headers=h(who)).status_code == 403
    assert "forewarn_decisions_total" in http.get("/metrics", headers=h("admin")).text
    for who in ("agent_globex", "approver_acme"):
        for model in [*http.get("/v1/models", headers=h(who)).json()["models"],
                      http.get("/v1/models/builtin", headers=h(who)).json()]:
            assert model["source"] is None and model["loaded_by"] is None
    shown = http.get("/v1/models/builtin", headers=h("admin")).json()
    assert shown["source"].endswith(".json") and shown["loaded_by"] == "config"
