"""Fixtures for the MCP proxy's tests: a throwaway git repository and the MCP domain's model (the
helpers they share are in _mcp_support.py)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from _mcp_support import git, http_server

from forewarn.domains.mcp import SPEC_PATH, synthetic_runs
from forewarn.guard import GuardModel, learn_model, load_spec


@pytest.fixture(autouse=True)
def _audit_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Proxies started without --audit write their default store under $XDG_STATE_HOME: keep it in the
    test's folder, never the user's home."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one commit (README.md, .env) and uncommitted work in notes.txt."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "T")
    (path / "README.md").write_text("# demo\n")
    (path / ".env").write_text("API_KEY=sk-live-0123456789abcdef\n")
    (path / "notes.txt").write_text("first\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "init")
    (path / "notes.txt").write_text("first\nuncommitted work\n")
    return path


@pytest.fixture(scope="session")
def mcp_model(tmp_path_factory: pytest.TempPathFactory) -> GuardModel:
    """The MCP domain's spec learned from 600 planned sessions (states from the proxy's extractor)."""
    traces = tmp_path_factory.mktemp("mcp-traces") / "runs.jsonl"
    with open(traces, "wb") as out:
        for run in synthetic_runs(600, seed=1):
            out.write(orjson.dumps(run) + b"\n")
    return learn_model([traces], load_spec(SPEC_PATH))


@pytest.fixture(scope="session")
def model_file(mcp_model: GuardModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcp-model") / "model.json"
    mcp_model.save(path)
    return path


@pytest.fixture
def git_over_http(repo: Path) -> Iterator[str]:
    """mcp-server-git's server (PyPI) served over streamable HTTP, in a process of its own."""
    with http_server("git-http", str(repo)) as url:
        yield url
