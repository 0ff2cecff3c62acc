"""Streamable HTTP both ways: the proxy serving remote agents (one guarded session per MCP session)
and fronting mcp-server-git's own server over HTTP; a client gone mid-call and a malformed body
cost only themselves."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from _mcp_support import SERVERS, flaky_upstream, git, proxy_for, text_of
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp import SESSION_STOPPED, GuardedProxy, UpstreamSpec, serve_http

pytestmark = pytest.mark.mcp


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def git_over_http(repo: Path) -> Iterator[str]:
    """mcp-server-git's server (PyPI) served over streamable HTTP, in a process of its own."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVERS), "git-http", str(port), str(repo)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("the git server over HTTP did not start") from None
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@asynccontextmanager
async def serving(proxy: GuardedProxy) -> AsyncIterator[str]:
    port = free_port()
    started, stop = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: serve_http(proxy, port=port, started=started, stop=stop))
        with anyio.fail_after(120):
            await started.wait()
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            stop.set()


@asynccontextmanager
async def http_client(url: str) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def test_sessions_over_http_are_guarded_apart_before_an_http_upstream(mcp_model: GuardModel, repo: Path,
                                                                      git_over_http: str) -> None:
    r = str(repo)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        proxy = proxy_for(Guard(mcp_model), UpstreamSpec("git", url=git_over_http))
        async with serving(proxy) as url, http_client(url) as careless, http_client(url) as other:
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
