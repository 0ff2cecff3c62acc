"""The lean relay (``forewarn mcp --relay lean``: stdio, one upstream, frames passed through as bytes) in front
of a real mcp-server-git, mcp-server-time and the flaky server, the SDK's ClientSession as the agent: the same
outcomes as the SDK path (test_proxy_stdio.py, test_approvals.py, test_failures.py)."""
from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from _mcp_support import (
    ASKING,
    GIT_SERVER,
    TIME_SERVER,
    Approver,
    approve_then_refuse,
    assert_approved_then_refused,
    assert_failures_reported,
    flaky_upstream,
    git,
    git_upstream,
    lean_connected,
    proxy_for,
    text_of,
)
from mcp.shared.exceptions import MCPError

from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp import (
    SESSION_STOPPED,
    UpstreamSpec,
)
from forewarn.guard.spec import Trigger

pytestmark = pytest.mark.mcp


def test_tools_list_is_the_upstreams_own_and_the_reset_over_uncommitted_work_is_stopped(
        mcp_model: GuardModel, repo: Path, tmp_path: Path) -> None:
    record = tmp_path / "runs.jsonl"

    async def scenario() -> dict[str, Any]:
        from mcp import ClientSession, StdioServerParameters, stdio_client

        params = StdioServerParameters(command=GIT_SERVER, args=["--repository", str(repo)])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as direct:
            info = await direct.initialize()
            upstream = (await direct.list_tools()).tools
        seen: dict[str, Any] = {"upstream": upstream, "name": info.server_info.name}
        proxy = proxy_for(Guard(mcp_model), git_upstream(repo), record=str(record))
        async with lean_connected(proxy) as (client, _):
            seen["proxied"] = (await client.list_tools()).tools
            seen["status"] = text_of(await client.call_tool("git_status", {"repo_path": str(repo)}))
            seen["added"] = text_of(await client.call_tool("git_add", {"repo_path": str(repo),
                                                                       "files": ["notes.txt"]}))
            for key, name in (("stopped", "git_reset"), ("later", "git_log")):
                with pytest.raises(MCPError) as refused:
                    await client.call_tool(name, {"repo_path": str(repo)})
                seen[key] = refused.value.error
        return seen

    seen = anyio.run(scenario)
    assert [t.model_dump() for t in seen["proxied"][:-1]] == [t.model_dump() for t in seen["upstream"]]
    assert seen["proxied"][-1].name == "forewarn_reset"  # the proxy's own tool, last (stops.py)
    assert "notes.txt" in seen["status"] and "staged" in seen["added"].lower()
    assert seen["stopped"].code == seen["later"].code == SESSION_STOPPED
    assert "stopped this session before the call to `git_reset`" in seen["stopped"].message
    assert "every later call" in seen["later"].message and "git_log" in seen["later"].message
    assert "notes.txt" in git(repo, "diff", "--cached", "--name-only")  # the reset never ran
    run = orjson.loads(record.read_bytes())
    assert [s.get("action", {}).get("tool") for s in run["steps"]] == [None, "git_status", "git_add"]
    assert run["meta"]["outcome"] == "stopped" and run["meta"]["source"] == "mcp"


def test_reflect_an_unknown_tool_and_a_tool_no_upstream_lists(mcp_model: GuardModel, repo: Path) -> None:
    async def scenario() -> tuple[Any, Any, Any, Any, MCPError]:
        async with lean_connected(proxy_for(Guard(mcp_model), git_upstream(repo), trigger="level")) as (client, _):
            held = await client.call_tool("git_add", {"repo_path": str(repo), "files": ["notes.txt"]})
            fine = await client.call_tool("git_log", {"repo_path": str(repo), "max_count": 1})
        # (read_only_hints off: its annotations say read-only, which would allow it: test_gateway_stops.py)
        proxy = proxy_for(Guard(mcp_model), UpstreamSpec("time", command=TIME_SERVER), read_only_hints=False)
        allowed = None
        async with lean_connected(proxy) as (client, _):
            allowed = await client.call_tool("get_current_time", {"timezone": "UTC"})
        proxy.extractor.tool_kinds.pop("get_current_time", None)
        async with lean_connected(proxy) as (client, _):
            unknown = await client.call_tool("get_current_time", {"timezone": "UTC"})
            with pytest.raises(MCPError) as missing:
                await client.call_tool("no_such_tool", {})
        return held, fine, allowed, unknown, missing.value

    held, fine, allowed, unknown, missing = anyio.run(scenario)
    assert held.is_error and "held back the call `git_add`" in text_of(held) and "did not run" in text_of(held)
    assert git(repo, "diff", "--cached", "--name-only") == ""  # never staged: upstream not called
    assert not fine.is_error and "init" in text_of(fine)
    assert not allowed.is_error and "UTC" in text_of(allowed)
    assert unknown.is_error and "does not know the tool `get_current_time`" in text_of(unknown)
    assert "does not support elicitation" in text_of(unknown)
    assert "Unknown tool: no_such_tool" in missing.error.message


def test_elicitation_is_the_relays_own_request_and_its_answer_comes_back_to_it(mcp_model: GuardModel,
                                                                               repo: Path) -> None:
    async def scenario() -> tuple[Approver, Any, Any]:
        proxy = proxy_for(Guard(mcp_model, policy=ASKING), git_upstream(repo), trigger=Trigger.LEVEL)

        @asynccontextmanager
        async def client(approver: Approver) -> AsyncIterator[Any]:
            async with lean_connected(proxy, elicitation_callback=approver) as (session, _):
                yield session
        return await approve_then_refuse(client, repo)

    assert_approved_then_refused(anyio.run(scenario), repo)


def test_a_hung_upstream_times_out_and_a_crashed_one_is_reported_and_restarted(mcp_model: GuardModel) -> None:
    async def scenario() -> dict[str, Any]:
        proxy = proxy_for(Guard(mcp_model), flaky_upstream(), call_timeout=2.0, unknown_tools="allow",
                          max_argument_bytes=1000)
        seen: dict[str, Any] = {}
        async with lean_connected(proxy) as (client, relay):
            for key, name, args in (("hung", "hang", {}), ("big", "echo", {"text": "x" * 5000}),
                                    ("crashed", "crash", {})):
                with pytest.raises(MCPError) as failed:
                    await client.call_tool(name, args)
                seen[key] = failed.value.error
                if key == "hung":
                    seen["other"] = text_of(await client.call_tool("echo", {"text": "still here"}))
            seen["after"] = text_of(await client.call_tool("echo", {"text": "back"}))  # a new process
            seen["connections"] = relay.connections
        return seen

    seen = anyio.run(scenario)
    assert_failures_reported(seen)
    assert seen["after"] == "back" and seen["connections"] == 2
