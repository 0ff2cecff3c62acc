"""Fixtures for the MCP proxy's tests: a throwaway git repository, the MCP domain's model, and
clients (the SDK's ``ClientSession``) connected to a proxy in this process or to ``forewarn mcp``
launched as a real process."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from forewarn.domains.mcp import PROXY_CONFIG, SPEC_PATH, synthetic_runs
from forewarn.guard import GuardModel, learn_model, load_spec
from forewarn.guard.mcp import GuardedProxy, UpstreamSpec, in_process, load_config

BIN = Path(sys.executable).parent
GIT_SERVER = str(BIN / "mcp-server-git")
TIME_SERVER = str(BIN / "mcp-server-time")
SERVERS = Path(__file__).with_name("_servers.py")

FILES_SERVER = shutil.which("mcp-server-filesystem")
needs_node = pytest.mark.skipif(FILES_SERVER is None or shutil.which("node") is None,
                                reason="Node or the npm package @modelcontextprotocol/server-filesystem is not "
                                       "installed (.ci/run installs it where npm is present)")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


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


def git_upstream(repo: Path, name: str = "git") -> UpstreamSpec:
    return UpstreamSpec(name, command=GIT_SERVER, args=("--repository", str(repo)))


def proxy_for(guard: Any, *upstreams: UpstreamSpec, **settings: Any) -> GuardedProxy:
    record = settings.pop("record", None)
    sidecar = settings.pop("sidecar", None)
    on_decision = settings.pop("on_decision", None)
    trigger = settings.pop("trigger", None)
    config = load_config(PROXY_CONFIG, upstreams=list(upstreams), **settings)
    return GuardedProxy(guard, config, record=record, sidecar=sidecar, on_decision=on_decision, trigger=trigger)


connected = in_process  # a ClientSession on the proxy's server, over memory streams


def text_of(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def files_upstream(root: Path) -> UpstreamSpec:
    assert FILES_SERVER is not None
    return UpstreamSpec("files", command=FILES_SERVER, args=(str(root),))


def flaky_upstream(**settings: Any) -> UpstreamSpec:
    return UpstreamSpec("flaky", command=sys.executable, args=(str(SERVERS), "flaky"), **settings)
