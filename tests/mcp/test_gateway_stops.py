"""The proxy in a desktop host (issue 38 item 4): a stop that ends the harmful line of work without killing the
session for good, and unknown tools without elicitation — mcp-server-git and the poisoned SDK server
(``_gateway_server.py``), driven by the SDK's client over the lean stdio relay, the lean HTTP relay (in front
of the server's own streamable HTTP) and the SDK path."""
from __future__ import annotations

import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from _gateway_server import gateway_over_http
from _mcp_support import (
    Approver,
    connected,
    git,
    git_upstream,
    http_client,
    lean_connected,
    proxy_for,
    serving,
    text_of,
)
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from forewarn.domains.mcp import PROXY_CONFIG
from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp import SESSION_STOPPED, GuardedProxy, UpstreamSpec, load_config
from forewarn.guard.mcp.audit import AuditStore

SERVER = Path(__file__).with_name("_gateway_server.py")
PATHS = ("stdio", "http", "sdk")


@asynccontextmanager
async def client_for(path: str, proxy: GuardedProxy, **client: Any) -> AsyncIterator[tuple[ClientSession, None]]:
    """A client of ``proxy``: over the lean stdio relay, the lean HTTP relay (``proxy``'s upstream is then a
    URL), or the SDK path in this process."""
    if path == "stdio":
        async with lean_connected(proxy, **client) as (session, _):
            yield session, None
    elif path == "http":
        async with serving(proxy, "lean") as url, http_client(url, **client) as session:
            yield session, None
    else:
        async with proxy.running() as server, connected(server, **client) as session:
            yield session, None


def _staging(model: GuardModel) -> Guard:
    """The domain's guard with reflection at the ask threshold: staging work (git_add) passes, as these stop-scope
    scenarios need. Counting, the default estimate since 0.4, puts a state with pending work past the spec's reflect
    threshold (0.7 on p_safe); a reset that discards the work still leads into the unsafe state and is stopped."""
    from dataclasses import replace

    guard = Guard(model)
    return guard.with_policy(replace(guard.policy, thresholds=guard.policy.thresholds.model_copy(update={"reflect": 0.5})))


def git_for(path: str, repo: Path, request: pytest.FixtureRequest) -> UpstreamSpec:
    """mcp-server-git as the path's upstream: over stdio, or its own streamable HTTP for the HTTP relay."""
    return UpstreamSpec("git", url=request.getfixturevalue("git_over_http")) if path == "http" else git_upstream(repo)


@pytest.mark.parametrize("path", PATHS)
def test_after_a_stop_of_its_kinds_a_read_goes_on(path: str, mcp_model: GuardModel, repo: Path,
                                                  request: pytest.FixtureRequest) -> None:
    r = str(repo)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        proxy = proxy_for(_staging(mcp_model), git_for(path, repo, request), after_stop="kinds")
        async with client_for(path, proxy) as (client, _):
            await client.call_tool("git_add", {"repo_path": r, "files": ["notes.txt"]})
            with pytest.raises(MCPError) as stopped:
                await client.call_tool("git_reset", {"repo_path": r})
            seen["stopped"] = stopped.value.error
            seen["log"] = await client.call_tool("git_log", {"repo_path": r, "max_count": 1})
            seen["status"] = await client.call_tool("git_status", {"repo_path": r})
            with pytest.raises(MCPError) as again:
                await client.call_tool("git_reset", {"repo_path": r})
            seen["again"] = again.value.error
        return seen

    seen = anyio.run(scenario)
    assert seen["stopped"].code == SESSION_STOPPED and "until a person resets" in seen["stopped"].message
    assert not seen["log"].is_error and "init" in text_of(seen["log"])  # the read after the stop ran
    assert not seen["status"].is_error and "notes.txt" in text_of(seen["status"])
    assert seen["again"].code == SESSION_STOPPED and "every later call of `git_reset`" in seen["again"].message
    assert "notes.txt" in git(repo, "diff", "--cached", "--name-only")  # the reset never ran


@pytest.mark.parametrize("path", PATHS)
def test_a_person_lifts_a_stop_through_forewarn_reset(path: str, mcp_model: GuardModel, repo: Path,
                                                      request: pytest.FixtureRequest) -> None:
    r = str(repo)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        approver = Approver(False, True)
        async with client_for(path, proxy_for(_staging(mcp_model), git_for(path, repo, request)),
                              elicitation_callback=approver) as (client, _):
            await client.call_tool("git_add", {"repo_path": r, "files": ["notes.txt"]})
            with pytest.raises(MCPError):
                await client.call_tool("git_reset", {"repo_path": r})
            with pytest.raises(MCPError) as read:
                await client.call_tool("git_log", {"repo_path": r, "max_count": 1})
            seen["read"] = read.value.error
            seen["declined"] = await client.call_tool("forewarn_reset", {})
            seen["approved"] = await client.call_tool("forewarn_reset", {})
            seen["log"] = await client.call_tool("git_log", {"repo_path": r, "max_count": 1})
        seen["asked"] = [q.message for q in approver.asked]
        async with client_for(path, proxy_for(_staging(mcp_model), git_for(path, repo, request))) as (client, _):
            seen["nothing"] = await client.call_tool("forewarn_reset", {})
            await client.call_tool("git_add", {"repo_path": r, "files": ["README.md"]})
            with pytest.raises(MCPError):
                await client.call_tool("git_reset", {"repo_path": r})
            seen["nobody"] = await client.call_tool("forewarn_reset", {})
        return seen

    seen = anyio.run(scenario)
    assert seen["read"].code == SESSION_STOPPED and "every later call of the session" in seen["read"].message
    assert "forewarn_reset" in seen["read"].message
    assert seen["declined"].is_error and "The stop stays" in text_of(seen["declined"])
    assert not seen["approved"].is_error and "stop is lifted" in text_of(seen["approved"])
    assert not seen["log"].is_error and "init" in text_of(seen["log"])
    assert len(seen["asked"]) == 2 and "forewarn_reset" in seen["asked"][0] and "lifts Forewarn's stop" in seen["asked"][0]
    assert seen["nothing"].is_error and "has not stopped this session" in text_of(seen["nothing"])
    assert seen["nobody"].is_error and "does not support elicitation" in text_of(seen["nobody"])
    assert "notes.txt" in git(repo, "diff", "--cached", "--name-only")  # no reset ever ran


@pytest.mark.parametrize("path", PATHS)
def test_an_unknown_tool_without_elicitation(path: str, mcp_model: GuardModel, tmp_path: Path) -> None:
    audit, change = tmp_path / "audit.sqlite", tmp_path / "change.txt"

    async def scenario(upstream: UpstreamSpec) -> dict[str, Any]:
        config = load_config(PROXY_CONFIG, upstreams=[upstream], argument_aliases={}, tool_kinds={})
        store = AuditStore(audit, model_name="mcp", model_version="test")
        proxy = GuardedProxy(_staging(mcp_model), config, audit=store)
        try:
            async with client_for(path, proxy) as (client, _):
                return {"clock": await client.call_tool("clock", {}),
                        "touch": await client.call_tool("touch", {"text": "x"})}
        finally:
            store.close()

    if path == "http":
        with gateway_over_http(change) as url:
            seen = anyio.run(scenario, UpstreamSpec("poisoned", url=url))
    else:
        seen = anyio.run(scenario, UpstreamSpec("poisoned", command=sys.executable,
                                                args=(str(SERVER), "stdio", str(change))))
    # annotated read-only, of no kind: allowed, and recorded as such
    assert not seen["clock"].is_error and text_of(seen["clock"]) == "12:00"
    # no annotations, no elicitation, no console: refused with the reason
    touch = text_of(seen["touch"])
    assert seen["touch"].is_error and "does not know the tool `touch`" in touch
    assert "does not support elicitation and the proxy has no console" in touch
    with sqlite3.connect(audit) as conn:
        calls = dict(conn.execute("SELECT tool, status || ' ' || coalesce(reason, '') FROM proposals").fetchall())
    assert calls["clock"].startswith("executed") and "does not know the tool `clock`" in calls["clock"]
    assert calls["touch"].startswith("rejected")
