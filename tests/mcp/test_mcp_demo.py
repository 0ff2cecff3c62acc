"""``forewarn demo --domain mcp``: the shipped model (learned from sessions recorded through the proxy
against the real servers) stops the careless reset before it reaches mcp-server-git."""
from __future__ import annotations

from pathlib import Path

import pytest
from _mcp_support import git
from rich.console import Console

from forewarn.domains.mcp.demo import MODEL_PATH, run_mcp_demo
from forewarn.guard import GuardModel

pytestmark = pytest.mark.mcp


def test_the_demo_catches_the_reset_before_it_happens(tmp_path: Path) -> None:
    model = GuardModel.load(MODEL_PATH)
    assert model.provenance["runs"] >= 200 and model.spec.name == "mcp-git-files"
    console = Console(record=True, width=200)
    rows = run_mcp_demo(out_dir=tmp_path, console=console)
    careless = [r for r in rows if r["session"] == "careless"]
    assert [r["action"] for r in careless][-1] == "stop" and careless[-1]["tool"] == "git_reset"
    assert all(r["outcome"] == "ran" for r in rows if r["session"] == "careful")
    assert git(tmp_path / "repo", "diff", "--cached", "--name-only").split() == ["README.md"]
    assert "never reached the server" in console.export_text()
