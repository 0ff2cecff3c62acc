"""The proxy in front of a real mcp-server-git (PyPI) and mcp-server-time, clients being the SDK's
ClientSession: allow, reflect, stop, unknown tools, pass-through, recording."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from _mcp_support import GIT_SERVER, TIME_SERVER, connected, git, git_upstream, proxy_for, text_of
from mcp.shared.exceptions import MCPError

from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp import SESSION_STOPPED, UpstreamSpec

pytestmark = pytest.mark.mcp


def test_tools_list_passes_through_unchanged(mcp_model: GuardModel, repo: Path) -> None:
    async def scenario() -> tuple[list[Any], list[Any]]:
        from mcp import ClientSession, StdioServerParameters, stdio_client

        params = StdioServerParameters(command=GIT_SERVER, args=["--repository", str(repo)])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as direct:
            await direct.initialize()
            upstream = (await direct.list_tools()).tools
        async with proxy_for(Guard(mcp_model), git_upstream(repo)).running() as server, connected(server) as client:
            proxied = (await client.list_tools()).tools
        return upstream, proxied

    upstream, proxied = anyio.run(scenario)
    assert [t.model_dump() for t in proxied[:-1]] == [t.model_dump() for t in upstream]
    assert proxied[-1].name == "forewarn_reset"  # the proxy's own tool, last (stops.py)
    assert "git_reset" in {t.name for t in proxied}


def test_allowed_calls_run_and_the_reset_over_uncommitted_work_is_stopped(mcp_model: GuardModel, repo: Path,
                                                                          tmp_path: Path) -> None:
    record = tmp_path / "runs.jsonl"

    async def scenario() -> tuple[str, str, str, str]:
        proxy = proxy_for(Guard(mcp_model), git_upstream(repo), record=str(record))
        async with proxy.running() as server, connected(server) as client:
            status = await client.call_tool("git_status", {"repo_path": str(repo)})
            added = await client.call_tool("git_add", {"repo_path": str(repo), "files": ["notes.txt"]})
            with pytest.raises(MCPError) as stopped:
                await client.call_tool("git_reset", {"repo_path": str(repo)})
            with pytest.raises(MCPError) as later:
                await client.call_tool("git_log", {"repo_path": str(repo)})
            assert stopped.value.error.code == later.value.error.code == SESSION_STOPPED
            return text_of(status), text_of(added), stopped.value.error.message, later.value.error.message

    status, added, stopped, later = anyio.run(scenario)
    assert "notes.txt" in status and "staged" in added.lower()
    assert "stopped this session before the call to `git_reset`" in stopped
    assert "every later call" in later and "git_log" in later
    # the reset never ran: notes.txt is still staged
    assert "notes.txt" in git(repo, "diff", "--cached", "--name-only")
    # recorded: the state before any call, then one step per call that ran (the stopped one did not)
    lines = record.read_bytes().splitlines()
    assert len(lines) == 1
    run = orjson.loads(lines[0])
    assert [s.get("action", {}).get("tool") for s in run["steps"]] == [None, "git_status", "git_add"]
    assert run["steps"][0]["state"]["steps"] == 0
    assert run["meta"]["outcome"] == "stopped" and run["meta"]["source"] == "mcp"


def test_reflect_returns_the_reason_as_an_error_result_without_calling_upstream(mcp_model: GuardModel,
                                                                                repo: Path) -> None:
    # The domain's thresholds under the level trigger: staging work leads to p_unsafe 37 % (p_safe below the
    # spec's reflect θ 0.7), so it is held back; reading the log stays where runs start (25 %), so it runs.
    # (Under the default increase trigger both pass: 25 % → 37 % is inside the staged state's interval.)
    guard = Guard(mcp_model)

    async def scenario() -> tuple[Any, Any]:
        proxy = proxy_for(guard, git_upstream(repo), trigger="level")
        async with proxy.running() as server, connected(server) as client:
            held = await client.call_tool("git_add", {"repo_path": str(repo), "files": ["notes.txt"]})
            fine = await client.call_tool("git_log", {"repo_path": str(repo), "max_count": 1})
            return held, fine

    held, fine = anyio.run(scenario)
    assert held.is_error and "held back the call `git_add`" in text_of(held) and "did not run" in text_of(held)
    assert git(repo, "diff", "--cached", "--name-only") == ""  # never staged: upstream not called
    assert not fine.is_error and "init" in text_of(fine)


def test_an_unknown_tool_fails_closed_and_a_tool_no_upstream_lists_is_an_error(mcp_model: GuardModel,
                                                                               repo: Path) -> None:
    async def scenario() -> tuple[Any, MCPError]:
        # mcp-server-time's tools have kinds in proxy.yaml; drop one so it is unknown to the extractor
        # (read_only_hints off: its annotations say read-only, which would allow it: test_gateway_stops.py)
        proxy = proxy_for(Guard(mcp_model), UpstreamSpec("time", command=TIME_SERVER), read_only_hints=False)
        proxy.extractor.tool_kinds.pop("get_current_time", None)
        async with proxy.running() as server, connected(server) as client:
            unknown = await client.call_tool("get_current_time", {"timezone": "UTC"})
            with pytest.raises(MCPError) as missing:
                await client.call_tool("no_such_tool", {})
            return unknown, missing.value

    unknown, missing = anyio.run(scenario)
    # no elicitation, no console: asking is impossible, so the call is refused, saying why
    assert unknown.is_error and "does not know the tool `get_current_time`" in text_of(unknown)
    assert "does not support elicitation" in text_of(unknown)
    assert "Unknown tool: no_such_tool" in missing.error.message


def test_a_known_time_tool_is_allowed(mcp_model: GuardModel) -> None:
    async def scenario() -> Any:
        proxy = proxy_for(Guard(mcp_model), UpstreamSpec("time", command=TIME_SERVER))
        async with proxy.running() as server, connected(server) as client:
            return await client.call_tool("get_current_time", {"timezone": "UTC"})

    result = anyio.run(scenario)
    assert not result.is_error and "UTC" in text_of(result)
