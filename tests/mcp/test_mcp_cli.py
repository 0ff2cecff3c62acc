"""``forewarn mcp`` as a real process, launched the way a desktop or IDE host launches it (stdio),
with the SDK's stdio client as the agent: record, learn, guard; malformed JSON-RPC on its stdin."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from _mcp_support import GIT_SERVER, git, text_of
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from forewarn.domains.mcp import PROXY_CONFIG, SPEC_PATH
from forewarn.guard.mcp import SESSION_STOPPED

pytestmark = pytest.mark.mcp
Calls = list[tuple[str, dict[str, Any]]]


def forewarn_mcp(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "forewarn", "mcp", *args])


async def play(params: StdioServerParameters, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Each call's result, or the MCPError it raised."""
    out: list[Any] = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for name, args in calls:
            try:
                out.append(await session.call_tool(name, args))
            except MCPError as exc:
                out.append(exc)
    return out


def test_record_then_learn_then_guard(repo: Path, tmp_path: Path) -> None:
    """Recording alone (no model), `forewarn learn` on the recording, then guarding with what was learned."""
    record = tmp_path / "runs.jsonl"
    r = str(repo)
    upstream = ["--", GIT_SERVER, "--repository", r]
    careless: Calls = [("git_status", {"repo_path": r}), ("git_add", {"repo_path": r, "files": ["notes.txt"]}),
                       ("git_reset", {"repo_path": r})]
    careful: Calls = [("git_add", {"repo_path": r, "files": ["notes.txt"]}),
                      ("git_commit", {"repo_path": r, "message": "notes"}), ("git_log", {"repo_path": r})]

    async def record_sessions() -> None:
        for calls in (careless, careful):
            results = await play(forewarn_mcp("--record", str(record), "--config", str(PROXY_CONFIG), *upstream),
                                 calls)
            assert all(not isinstance(x, MCPError) and not x.is_error for x in results)

    anyio.run(record_sessions)
    runs = [orjson.loads(line) for line in record.read_bytes().splitlines()]
    assert [[s.get("action", {}).get("tool") for s in run["steps"]] for run in runs] == [
        [None, "git_status", "git_add", "git_reset"], [None, "git_add", "git_commit", "git_log"]]
    ingested = tmp_path / "ingested.jsonl"
    subprocess.run([sys.executable, "-m", "forewarn", "ingest", str(record), "-o", str(ingested)], check=True,
                   capture_output=True)
    assert len(ingested.read_bytes().splitlines()) == 2
    model = tmp_path / "model.json"
    subprocess.run([sys.executable, "-m", "forewarn", "learn", str(ingested), "--spec", str(SPEC_PATH),
                    "-o", str(model)], check=True, capture_output=True)

    (repo / "notes.txt").write_text("more uncommitted work\n")  # (the careful session committed the first)

    async def guard_session() -> list[Any]:
        return await play(forewarn_mcp("--model", str(model), "--config", str(PROXY_CONFIG), *upstream), careless)

    status, added, reset = anyio.run(guard_session)
    # Two recorded sessions support no foresight: each state's interval spans nearly [0, 1], so under the
    # increase trigger looking and staging run (their rise is within what two runs cannot tell from none);
    # the reset leads to a state seen unsafe in the recording, and is stopped before it reaches the server.
    assert not status.is_error and "notes.txt" in text_of(status)
    assert not added.is_error
    assert isinstance(reset, MCPError) and reset.error.code == SESSION_STOPPED
    assert "before the call to `git_reset`" in reset.error.message
    assert "notes.txt" in git(repo, "diff", "--cached", "--name-only")  # the reset did not run


@pytest.mark.parametrize("relay", ["lean", "sdk"])
def test_malformed_json_rpc_gets_one_error_and_the_proxy_goes_on(model_file: Path, repo: Path, relay: str) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "forewarn", "mcp", "--model", str(model_file), "--config",
                             str(PROXY_CONFIG), "--relay", relay, "--", GIT_SERVER, "--repository", str(repo)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                             "clientInfo": {"name": "raw", "version": "0"}}}
    try:
        proc.stdin.write(b'{"jsonrpc": "2.0", "id": 0, "method": \n')
        proc.stdin.write(orjson.dumps(initialize) + b"\n")
        proc.stdin.flush()
        first = orjson.loads(proc.stdout.readline())
        second = orjson.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()
        proc.wait(timeout=120)
        proc.stdout.close()
    assert first["error"]["code"] == -32700  # parse error, once
    assert second["id"] == 1 and second["result"]["serverInfo"]["name"] == "forewarn-mcp"


def test_bad_command_lines_are_one_line_and_exit_2(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "forewarn", "mcp", *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120)

    none = run("--", "true")
    assert none.returncode == 2 and "needs --model MODEL" in none.stderr
    missing = run("--model", str(tmp_path / "nope.json"), "--", "true")
    assert missing.returncode == 2 and "no such model file" in missing.stderr
    bad = tmp_path / "proxy.yaml"
    bad.write_text("servers: {git: {command: x, url: 'http://y'}}\n")
    wrong = run("--record", str(tmp_path / "r.jsonl"), "--config", str(bad))
    assert wrong.returncode == 2 and "proxy.yaml" in wrong.stderr and "exactly one of 'command'" in wrong.stderr
    lean = run("--record", str(tmp_path / "r.jsonl"), "--relay", "lean", "--upstream-url", "http://127.0.0.1:9/mcp")
    assert lean.returncode == 2 and "--relay lean serves stdio in front of one upstream command" in lean.stderr
    assert "Traceback" not in none.stderr + missing.stderr + wrong.stderr + lean.stderr


def _launch(tmp_path: Path, relay: str, *upstream: str) -> tuple[int, bytes, str]:
    """``forewarn mcp --relay RELAY -- UPSTREAM`` as a host runs it (standard input a pipe it keeps open) until
    it exits: its exit status, what it wrote on standard output and on standard error."""
    proc = subprocess.Popen([sys.executable, "-m", "forewarn", "mcp", "--record", str(tmp_path / "r.jsonl"),
                             "--relay", relay, "--", *upstream], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        code = proc.wait(timeout=120)
    finally:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.close()
        errors = proc.stderr.read().decode()
        said = proc.stdout.read()
        proc.stdout.close()
        proc.stderr.close()
    return code, said, errors


@pytest.mark.parametrize("relay", ["lean", "sdk"])
def test_an_upstream_that_cannot_start_is_reported_at_launch(tmp_path: Path, relay: str) -> None:
    """A server whose process ends before it answers: one line and exit 2 on either path, as a host sees it
    (standard input a pipe the host keeps open)."""
    code, _, errors = _launch(tmp_path, relay, sys.executable, "-c", "import sys; sys.exit(3)")
    last = errors.strip().splitlines()[-1]
    assert code == 2 and "Traceback" not in errors
    assert last.startswith("error: upstream 'upstream'") and "could not be started" in last


@pytest.mark.parametrize("relay", ["lean", "sdk"])
def test_an_upstream_command_that_does_not_exist_is_one_line_at_launch(tmp_path: Path, relay: str) -> None:
    """``--relay lean -- no-such-command``: one line naming the upstream and the command, exit 2, at launch
    (not an error on each request, nor retries), with standard input a pipe the host keeps open."""
    code, said, errors = _launch(tmp_path, relay, "forewarn-no-such-command", "--flag")
    assert code == 2 and said == b""
    assert errors.strip().splitlines() == [
        "error: upstream 'upstream' (forewarn-no-such-command --flag) could not be started: No such file or directory"]
