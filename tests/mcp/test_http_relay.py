"""The lean HTTP relay (``forewarn mcp --upstream-url URL --http HOST:PORT``, ``--relay lean``: requests passed
through to one streamable-HTTP upstream, only tools/call judged) in front of real mcp-server-git and flaky
servers over HTTP, the SDK's streamable-HTTP client as the agent: the outcomes of the SDK path
(test_http.py, test_relay.py, test_failures.py) and the bad input of a raw HTTP client."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import orjson
import pytest
from _mcp_support import (
    ASKING,
    HTTP_HEADERS,
    Approver,
    approve_then_refuse,
    assert_approved_then_refused,
    assert_failures_reported,
    free_port,
    git,
    http_client,
    http_server,
    proxy_for,
    serving,
    text_of,
)
from mcp.shared.exceptions import MCPError

from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp import (
    UPSTREAM_DOWN,
    UpstreamSpec,
)
from forewarn.guard.spec import Trigger

pytestmark = pytest.mark.mcp


def test_reflect_an_unknown_tool_a_tool_no_upstream_lists_and_the_proxys_name(mcp_model: GuardModel, repo: Path,
                                                                              git_over_http: str) -> None:
    r = str(repo)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with http_client(git_over_http) as direct:
            seen["upstream"] = (await direct.list_tools()).tools
        # (read_only_hints off: git_log's annotations say read-only, which would allow it: test_gateway_stops.py)
        proxy = proxy_for(Guard(mcp_model), UpstreamSpec("git", url=git_over_http), trigger="level",
                          read_only_hints=False)
        async with serving(proxy, "lean") as url, http_client(url) as client:
            seen["proxied"] = (await client.list_tools()).tools
            seen["held"] = await client.call_tool("git_add", {"repo_path": r, "files": ["notes.txt"]})
            seen["fine"] = await client.call_tool("git_log", {"repo_path": r, "max_count": 1})
            with pytest.raises(MCPError) as missing:
                await client.call_tool("no_such_tool", {})
            seen["missing"] = missing.value.error
        proxy.extractor.tool_kinds.pop("git_log", None)
        async with serving(proxy, "lean") as url, http_client(url) as client:
            seen["unknown"] = await client.call_tool("git_log", {"repo_path": r, "max_count": 1})
            async with httpx.AsyncClient() as raw:  # the handshake's answer, as a client reads it
                first = await raw.post(url, headers=HTTP_HEADERS, json={
                    "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                        "protocolVersion": types.LATEST_PROTOCOL_VERSION, "capabilities": {},
                        "clientInfo": {"name": "raw", "version": "0"}}})
            seen["initialize"] = first
        return seen

    seen = anyio.run(scenario)
    assert [t.model_dump() for t in seen["proxied"][:-1]] == [t.model_dump() for t in seen["upstream"]]
    assert seen["proxied"][-1].name == "forewarn_reset"  # the proxy's own tool, last (stops.py)
    held = seen["held"]
    assert held.is_error and "held back the call `git_add`" in text_of(held) and "did not run" in text_of(held)
    assert git(repo, "diff", "--cached", "--name-only") == ""  # never staged: upstream not called
    assert not seen["fine"].is_error and "init" in text_of(seen["fine"])
    assert seen["missing"].code == types.INVALID_PARAMS and "Unknown tool: no_such_tool" in seen["missing"].message
    unknown = seen["unknown"]
    assert unknown.is_error and "does not know the tool `git_log`" in text_of(unknown)
    assert "does not support elicitation" in text_of(unknown)
    first = seen["initialize"]
    assert first.status_code == 200 and first.headers.get("mcp-session-id")
    body = first.text if "json" in first.headers["content-type"] else first.text.split("data: ", 1)[1]
    assert '"name":"forewarn-mcp"' in body.replace(" ", "")


def test_elicitation_is_the_relays_own_request_in_the_calls_event_stream(mcp_model: GuardModel, repo: Path,
                                                                         git_over_http: str) -> None:
    async def scenario() -> tuple[Approver, Any, Any]:
        proxy = proxy_for(Guard(mcp_model, policy=ASKING), UpstreamSpec("git", url=git_over_http),
                          trigger=Trigger.LEVEL)
        async with serving(proxy, "lean") as url:
            return await approve_then_refuse(lambda approver: http_client(url, elicitation_callback=approver), repo)

    assert_approved_then_refused(anyio.run(scenario), repo)


def test_a_hung_upstream_times_out_big_arguments_are_refused_and_a_dead_one_is_reported(
        mcp_model: GuardModel) -> None:
    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        with http_server("flaky-http") as upstream:
            proxy = proxy_for(Guard(mcp_model), UpstreamSpec("flaky", url=upstream), call_timeout=2.0,
                              unknown_tools="allow", max_argument_bytes=1000)
            async with serving(proxy, "lean") as url, http_client(url) as one, http_client(url) as other:
                for key, name, args in (("hung", "hang", {}), ("big", "echo", {"text": "x" * 5000}),
                                        ("crashed", "crash", {}), ("after", "echo", {"text": "anyone?"})):
                    with pytest.raises(MCPError) as failed:
                        with anyio.fail_after(60):  # never a hung client
                            await one.call_tool(name, args)
                    seen[key] = failed.value.error
                    if key == "hung":
                        seen["other"] = text_of(await other.call_tool("echo", {"text": "still here"}))
        return seen

    seen = anyio.run(scenario)
    assert_failures_reported(seen)
    assert seen["after"].code == UPSTREAM_DOWN and "upstream 'flaky'" in seen["after"].message


def test_malformed_oversized_and_batched_bodies_get_one_clear_error_each(mcp_model: GuardModel,
                                                                        git_over_http: str) -> None:
    async def scenario() -> dict[str, httpx.Response]:
        proxy = proxy_for(Guard(mcp_model), UpstreamSpec("git", url=git_over_http))
        async with serving(proxy, "lean") as url, httpx.AsyncClient() as raw:
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "git_status",
                                                                                  "arguments": {}}}
            return {"malformed": await raw.post(url, content=b'{"jsonrpc": "2.0", "id": 1, "method": ',
                                                headers=HTTP_HEADERS),
                    "oversized": await raw.post(url, content=b"[" + b" " * (5 << 20) + b"]", headers=HTTP_HEADERS),
                    "batch": await raw.post(url, json=[call], headers=HTTP_HEADERS),
                    "elsewhere": await raw.post(url.replace("/mcp", "/other"), json=call, headers=HTTP_HEADERS)}

    seen = anyio.run(scenario)
    assert seen["malformed"].status_code == 400 and seen["malformed"].json()["error"]["code"] == types.PARSE_ERROR
    assert seen["oversized"].status_code == 413 and "above the proxy's limit" in seen["oversized"].json()["error"]["message"]
    assert seen["batch"].status_code == 400 and "batch may not carry tools/call" in seen["batch"].json()["error"]["message"]
    assert seen["elsewhere"].status_code == 404


def test_an_upstream_url_nothing_answers_is_reported_at_launch(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    done = subprocess.run([sys.executable, "-m", "forewarn", "mcp", "--record", str(tmp_path / "r.jsonl"),
                           "--upstream-url", url, "--http", f"127.0.0.1:{free_port()}"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"upstream 'upstream' ({url}) could not be reached" in last


def test_a_page_on_a_rebound_domain_and_a_body_that_is_not_json_are_refused(mcp_model: GuardModel,
                                                                            git_over_http: str) -> None:
    """The SDK path's checks on a loopback address: a web page whose domain now resolves to 127.0.0.1 sends
    its own Host or Origin, and the proxy refuses it before anything reaches the upstream."""
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": types.LATEST_PROTOCOL_VERSION, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}

    async def scenario() -> dict[str, httpx.Response]:
        proxy = proxy_for(Guard(mcp_model), UpstreamSpec("git", url=git_over_http))
        async with serving(proxy, "lean") as url, httpx.AsyncClient() as raw:
            port = url.split(":")[2].split("/")[0]
            return {"host": await raw.post(url, json=initialize, headers={**HTTP_HEADERS, "host": f"evil.example:{port}"}),
                    "origin": await raw.post(url, json=initialize, headers={**HTTP_HEADERS, "origin": "http://evil.example"}),
                    "text": await raw.post(url, content=orjson.dumps(initialize),
                                           headers={**HTTP_HEADERS, "content-type": "text/plain"}),
                    "local": await raw.post(url, json=initialize,
                                            headers={**HTTP_HEADERS, "origin": f"http://localhost:{port}"})}

    seen = anyio.run(scenario)
    assert seen["host"].status_code == 421 and "Invalid Host header" in seen["host"].text
    assert seen["origin"].status_code == 403 and "Invalid Origin header" in seen["origin"].text
    assert seen["text"].status_code == 400 and "Invalid Content-Type header" in seen["text"].text
    assert seen["local"].status_code == 200 and seen["local"].headers.get("mcp-session-id")


def test_a_session_idle_past_the_timeout_is_ended_here_and_upstream(mcp_model: GuardModel, repo: Path,
                                                                   git_over_http: str, tmp_path: Path) -> None:
    """A client that never says DELETE: its guarded session ends after the idle timeout with no other request
    coming (released and recorded as such), the upstream's too. A request on its id then gets HTTP 404, the MCP
    spec's answer that makes a client start a new session (the SDK's client reports "Session not found"), as
    does a call on an id the relay never had (whose state goes with it); a new session works."""
    record = tmp_path / "sessions.jsonl"
    r = str(repo)
    arguments = {"repo_path": r, "max_count": 1}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "git_log", "arguments": arguments}}
    version = "2025-06-18"  # (a raw client of a version whose requests need no _meta envelope)
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        proxy = proxy_for(Guard(mcp_model), UpstreamSpec("git", url=git_over_http), record=str(record))
        async with serving(proxy, "lean", idle_timeout=0.5) as url, httpx.AsyncClient(timeout=60) as raw:
            first = await raw.post(url, headers=HTTP_HEADERS, json=hello)
            sid = first.headers["mcp-session-id"]
            theirs = {**HTTP_HEADERS, "mcp-session-id": sid, "mcp-protocol-version": version}
            await raw.post(url, headers=theirs, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            seen["raw before"] = await raw.post(url, headers=theirs, json=call)
            async with http_client(url) as idle:
                seen["before"] = text_of(await idle.call_tool("git_log", arguments))
                with anyio.fail_after(30):  # ended by the relay's own sweep: nobody sends a request meanwhile
                    while len(record.read_bytes().splitlines()) < 2:
                        await anyio.sleep(0.05)
                seen["ended"] = [orjson.loads(line) for line in record.read_bytes().splitlines()]
                seen["raw after"] = await raw.post(url, headers=theirs, json=call)
                seen["get after"] = await raw.get(url, headers=theirs)
                with anyio.fail_after(30):  # (the upstream's session is ended in the background)
                    while (await raw.post(git_over_http, headers=theirs, json=call)).status_code != 404:
                        await anyio.sleep(0.05)
                with pytest.raises(MCPError) as gone:
                    with anyio.fail_after(60):
                        await idle.call_tool("git_log", arguments)
                seen["after"] = gone.value.error
            unknown = {**theirs, "mcp-session-id": "no-such-session"}
            seen["unknown"] = await raw.post(url, headers=unknown, json=call)
            seen["unknown again"] = await raw.post(url, headers=unknown, json={**call, "id": 3})
            async with http_client(url) as fresh:
                seen["fresh"] = text_of(await fresh.call_tool("git_log", arguments))
        return seen

    seen = anyio.run(scenario)
    assert seen["raw before"].status_code == 200 and "init" in seen["before"]
    assert [e["meta"]["ended"] for e in seen["ended"]] == ["idle for more than 0.5 s"] * 2
    assert [len(e["steps"]) for e in seen["ended"]] == [2, 2]  # (the state before any call, the call)
    for answer in (seen["raw after"], seen["get after"]):
        assert answer.status_code == 404 and "Session not found" in answer.json()["error"]["message"]
    assert seen["after"].code == types.INVALID_REQUEST and "Session not found" in seen["after"].message
    # an id the relay never had: the upstream does not know it either; the relay says 404 and keeps nothing of it
    assert seen["unknown"].status_code == 404 and "HTTP 404" in seen["unknown"].json()["error"]["message"]
    assert seen["unknown again"].status_code == 404 and "Session not found" in seen["unknown again"].json()["error"]["message"]
    assert "init" in seen["fresh"]
