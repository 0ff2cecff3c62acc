"""The proxy's local audit store (no sidecar): sessions, judged calls and committed steps in SQLite, in the
tables of `forewarn serve`'s database — read back here with the server's own storage."""
from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from _mcp_support import GIT_SERVER, connected, git_upstream, proxy_for, text_of
from mcp import ClientSession, StdioServerParameters, stdio_client

from forewarn.domains.mcp import PROXY_CONFIG
from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp.audit import AuditStore

pytestmark = pytest.mark.mcp


@pytest.mark.server
def test_judged_calls_and_steps_land_in_the_servers_tables(mcp_model: GuardModel, repo: Path,
                                                          tmp_path: Path) -> None:
    from forewarn.server.storage import Storage

    path = tmp_path / "audit.sqlite"
    store = AuditStore(path, model_name="mcp", model_version="0123456789abcdef")

    async def scenario() -> tuple[Any, Any]:
        # the level trigger with the domain's thresholds: staging is held back (reflect), the log runs
        proxy = proxy_for(Guard(mcp_model), git_upstream(repo), trigger="level")
        proxy.audit = store
        async with proxy.running() as server, connected(server) as client:
            held = await client.call_tool("git_add", {"repo_path": str(repo), "files": ["notes.txt"]})
            ran = await client.call_tool("git_log", {"repo_path": str(repo), "max_count": 1})
        return held, ran

    held, ran = anyio.run(scenario)
    store.close()
    assert held.is_error and not ran.is_error and "init" in text_of(ran)

    server = Storage.open(path)  # the server opens the proxy's file: its schema, its version
    try:
        sessions = server.list_sessions(status=None, limit=10, offset=0)
        assert len(sessions) == 1 and sessions[0]["steps"] == 2 and sessions[0]["closed_at"] is not None
        assert sessions[0]["created_by"] == "forewarn-mcp" and sessions[0]["model_name"] == "mcp"
        steps = server.steps(sessions[0]["id"], limit=10, offset=0)
    finally:
        server.close()
    first, second = steps
    assert first["step"] == 0 and first["action_in"] is None  # the state before any call
    assert orjson.loads(second["action_in"])["tool"] == "git_log" and second["action"] == "allow"
    assert orjson.loads(second["decision"])["session_id"] == sessions[0]["id"]
    with sqlite3.connect(path) as db:
        proposals = db.execute("SELECT tool, status, step, reason FROM proposals ORDER BY created_at").fetchall()
    assert [(tool, status, step) for tool, status, step, _ in proposals] == [("git_add", "held", None),
                                                                            ("git_log", "executed", 1)]
    assert proposals[0][3].startswith("reflect: ")


def test_the_command_writes_its_audit_store(model_file: Path, repo: Path, tmp_path: Path) -> None:
    """`forewarn mcp --audit FILE` as a host launches it; `--audit off` writes nothing anywhere."""
    audit = tmp_path / "audit.sqlite"
    state_home = tmp_path / "state"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "XDG_STATE_HOME": str(state_home)}

    async def one_call(*options: str) -> Any:
        params = StdioServerParameters(command=sys.executable, env=env, args=[
            "-m", "forewarn", "mcp", "--model", str(model_file), "--config", str(PROXY_CONFIG), *options,
            "--", GIT_SERVER, "--repository", str(repo)])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await session.call_tool("git_status", {"repo_path": str(repo)})

    assert not anyio.run(one_call, "--audit", str(audit)).is_error
    assert not anyio.run(one_call, "--audit", "off").is_error
    with sqlite3.connect(audit) as db:
        assert db.execute("SELECT count(*), count(closed_at) FROM sessions").fetchone() == (1, 1)
        assert db.execute("SELECT step, json_extract(action_in, '$.tool') FROM decisions ORDER BY step"
                          ).fetchall() == [(0, None), (1, "git_status")]
    assert not state_home.exists()  # neither run wrote the default store
