"""What the MCP proxy's tests share (their fixtures are in conftest.py): the upstream servers' commands,
git, proxies in this process and clients (the SDK's ``ClientSession``) connected to them."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from forewarn.domains.mcp import PROXY_CONFIG
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
