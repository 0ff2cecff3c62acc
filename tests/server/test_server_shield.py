"""The shield over HTTP (guard.enforcement: shield, docs/shield.md): the sidecar's proposals judge a call by
its move from where the session stands — blocked at or over θ with the moves under θ listed, safest first,
let through under θ, the session stopped where no move is under θ — on a real uvicorn sidecar."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from _shield_files import files_state, learn_shield_model

from _sidecar import ServerThread, auth, settings


def test_the_sidecars_proposals_are_shielded(tmp_path: Path) -> None:
    model = learn_shield_model(tmp_path)
    path = model.save(tmp_path / "files.json")
    with ServerThread(settings(tmp_path / "forewarn.db", {"files": path})) as server, \
            httpx.Client(base_url=server.url) as http:
        sid = http.post("/v1/sessions", json={}, headers=auth("agent")).json()["id"]

        def observe(deleted: int, tool: str | None) -> None:
            body: dict[str, Any] = {"state": files_state(deleted), "ask": False}
            if tool is not None:
                body["action"] = {"tool": tool, "args": {"path": "x"}}
            answer = http.post(f"/v1/sessions/{sid}/observe", json=body, headers=auth("agent"))
            assert answer.is_success, answer.text

        def propose(tool: str, deleted: int) -> dict[str, Any]:
            answer = http.post(f"/v1/sessions/{sid}/proposals", json={
                "tool": tool, "arguments": {"path": "y"}, "state": files_state(deleted)}, headers=auth("agent"))
            assert answer.status_code in (200, 201), answer.text
            document: dict[str, Any] = answer.json()["decision"]  # the guard's decision, as the approver sees it
            return document

        observe(0, None)
        first = propose("delete_file", 1)
        assert (first["action"], first["why"]) == ("allow", "shield") and first["action_risk"] < 0.5
        observe(1, "delete_file")
        second = propose("delete_file", 2)
        assert (second["action"], second["why"]) == ("reflect", "shield")
        assert second["proposed"]["action_class"] == "delete_file" and second["action_risk"] >= 0.5
        risks = [a["risk"] for a in second["alternatives"]]
        assert [a["action_class"] for a in second["alternatives"]] == ["(end)", "read_file"]
        assert risks == sorted(risks) and all(r < 0.5 for r in risks)
        assert "`read_file` keeps it at" in second["message"]
        read = propose("read_file", 1)
        assert (read["action"], read["why"]) == ("allow", "shield")
        observe(2, "delete_file")  # (the agent went on regardless): from two deletions no move is under θ
        stopped = propose("read_file", 2)
        assert (stopped["action"], stopped["why"]) == ("stop", "shield") and stopped["p_min"] >= 0.5
        assert stopped["alternatives"] == []
