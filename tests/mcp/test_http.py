"""Streamable HTTP both ways: the proxy serving remote agents (one guarded session per MCP session)
and fronting mcp-server-git's own server over HTTP; a client gone mid-call and a malformed body
cost only themselves."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from _mcp_support import flaky_upstream, git, http_client, proxy_for, serving, text_of
from mcp.shared.exceptions import MCPError

from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp import SESSION_STOPPED, UpstreamSpec

pytestmark = pytest.mark.mcp


@pytest.mark.parametrize("relay", ["lean", "sdk"])
def test_sessions_over_http_are_guarded_apart_before_an_http_upstream(mcp_model: GuardModel, repo: Path,
                                                                      git_over_http: str, relay: str) -> None:
    r = str(repo)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        proxy = proxy_for(Guard(mcp_model), UpstreamSpec("git", url=git_over_http))
        async with serving(proxy, relay) as url, http_client(url) as careless, http_client(url) as other:
            seen["tools"] = {t.name for t in (await other.list_tools()).tools}
            await careless.call_tool("git_status", {"repo_path": r})
            await careless.call_tool("git_add", {"repo_path": r, "files": ["notes.txt"]})
            with pytest.raises(MCPError) as stopped:
                await careless.call_tool("git_reset", {"repo_path": r})
            seen["stopped"] = stopped.value.error
            seen["other"] = await other.call_tool("git_status", {"repo_path": r})
            with pytest.raises(MCPError) as again:
                await careless.call_tool("git_status", {"repo_path": r})
            seen["again"] = again.value.error
        return seen

    seen = anyio.run(scenario)
    assert {"git_add", "git_reset", "git_status"} <= seen["tools"]
    assert seen["stopped"].code == seen["again"].code == SESSION_STOPPED
    assert not seen["other"].is_error and "notes.txt" in text_of(seen["other"])  # the other session goes on
    assert "notes.txt" in git(repo, "diff", "--cached", "--name-only")  # the reset never ran


def test_a_client_gone_mid_call_and_a_malformed_body_cost_only_themselves(mcp_model: GuardModel) -> None:
    async def scenario() -> tuple[httpx.Response, str]:
        proxy = proxy_for(Guard(mcp_model), flaky_upstream(), unknown_tools="allow", call_timeout=30.0)
        async with serving(proxy) as url:
            async with anyio.create_task_group() as tasks:
                async def hang() -> None:
                    async with http_client(url) as gone:
                        await gone.call_tool("hang", {})
                tasks.start_soon(hang)
                await anyio.sleep(1.0)
                tasks.cancel_scope.cancel()  # the client disconnects while its call is upstream
            async with httpx.AsyncClient() as raw:
                bad = await raw.post(url, content=b'{"jsonrpc": "2.0", "id": 1, "method": ',
                                     headers={"content-type": "application/json",
                                              "accept": "application/json, text/event-stream"})
            async with http_client(url) as fine:
                echoed = text_of(await fine.call_tool("echo", {"text": "served"}))
        return bad, echoed

    bad, echoed = anyio.run(scenario)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == -32700
    assert echoed == "served"
