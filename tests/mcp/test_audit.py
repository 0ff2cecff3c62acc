"""The proxy's local audit store (no sidecar): sessions, judged calls and committed steps in SQLite, in the
tables of `forewarn serve`'s database — read back here with the server's own storage."""
from __future__ import annotations

import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
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


def test_a_proxy_killed_outright_is_not_a_silent_gap(model_file: Path, repo: Path, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Rows are committed in groups, after the answers: a proxy killed with SIGKILL may lose its last ones. The
    file says so: the proxy's mark (committed before it served) outlives it, and the next store opened on the
    file closes the killed proxy's session with the reason and warns."""
    audit = tmp_path / "audit.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "forewarn", "mcp", "--model", str(model_file), "--config",
                             str(PROXY_CONFIG), "--audit", str(audit), "--relay", "lean", "--", GIT_SERVER,
                             "--repository", str(repo)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for message in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                            "protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "raw", "version": "0"}}},
                        {"jsonrpc": "2.0", "method": "notifications/initialized"},
                        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": {"name": "git_status", "arguments": {"repo_path": str(repo)}}}):
            proc.stdin.write(orjson.dumps(message) + b"\n")
            proc.stdin.flush()
            if "id" in message:
                assert orjson.loads(proc.stdout.readline())["id"] == message["id"]
        deadline = time.monotonic() + 60
        while True:  # the session's rows committed (within 50 ms of the call)
            with sqlite3.connect(audit) as db:
                if db.execute("SELECT count(*) FROM decisions").fetchone() == (2,):
                    marks = [k for (k,) in db.execute("SELECT key FROM meta WHERE key LIKE 'mcp-proxy:%'")]
                    break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=60)
    finally:
        proc.stdin.close()
        proc.stdout.close()
    assert marks == [f"mcp-proxy:{socket.gethostname()}:{proc.pid}"]

    with caplog.at_level(logging.WARNING, logger="forewarn.mcp"):
        AuditStore(audit, model_name="mcp", model_version="0123456789abcdef").close()
    with sqlite3.connect(audit) as db:
        [(closed_at, closed_by)] = db.execute("SELECT closed_at, closed_by FROM sessions").fetchall()
        left = db.execute("SELECT count(*) FROM meta WHERE key LIKE 'mcp-proxy:%'").fetchone()
    assert closed_at is not None and f"its proxy (pid {proc.pid}) ended without closing the audit store" in closed_by
    assert "up to 50 ms of them, may be missing" in closed_by
    assert left == (0,)  # the killed proxy's mark is gone, and the store just opened and closed removed its own
    assert f"the proxy of pid {proc.pid}" in caplog.text and "1 open session(s) are closed" in caplog.text


def _started(model_file: Path, repo: Path, audit: Path) -> subprocess.Popen[bytes]:
    """A real ``forewarn mcp`` (lean stdio relay) that answered ``initialize`` (so its store is open) and one call."""
    proc = subprocess.Popen([sys.executable, "-m", "forewarn", "mcp", "--model", str(model_file), "--config",
                             str(PROXY_CONFIG), "--audit", str(audit), "--", GIT_SERVER, "--repository", str(repo)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    for message in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
                    {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "git_status", "arguments": {"repo_path": str(repo)}}}):
        proc.stdin.write(orjson.dumps(message) + b"\n")
        proc.stdin.flush()
        if "id" in message:
            assert orjson.loads(proc.stdout.readline())["id"] == message["id"]
    return proc


def test_a_proxy_ended_by_sigterm_closes_its_store_and_the_next_start_does_not_warn(model_file: Path, repo: Path,
                                                                                     tmp_path: Path) -> None:
    """SIGTERM (a host closing its servers) ends the proxy as the client's EOF does: its session closed and
    recorded, its mark removed, so the next proxy started on the file has nothing to warn about."""
    audit = tmp_path / "audit.sqlite"
    first = _started(model_file, repo, audit)
    first.send_signal(signal.SIGTERM)
    _, first_err = first.communicate(timeout=60)
    assert first.returncode == 0, first_err.decode(errors="replace")
    with sqlite3.connect(audit) as db:
        [(closed_by,)] = db.execute("SELECT closed_by FROM sessions").fetchall()
        assert db.execute("SELECT count(*) FROM decisions").fetchone() == (2,)  # step 0 and the call that ran
        assert db.execute("SELECT count(*) FROM meta WHERE key LIKE 'mcp-proxy:%'").fetchone() == (0,)
    assert closed_by == "forewarn-mcp: client disconnected", first_err.decode(errors="replace")

    second = _started(model_file, repo, audit)
    _, second_err = second.communicate(timeout=60)  # (its stdin closed: the client's EOF)
    assert second.returncode == 0, second_err.decode(errors="replace")
    assert b"ended without closing" not in second_err, second_err.decode(errors="replace")
    with sqlite3.connect(audit) as db:
        closed = [c for (c,) in db.execute("SELECT closed_by FROM sessions ORDER BY created_at")]
        assert db.execute("SELECT count(*) FROM meta WHERE key LIKE 'mcp-proxy:%'").fetchone() == (0,)
    assert closed == ["forewarn-mcp: client disconnected"] * 2
