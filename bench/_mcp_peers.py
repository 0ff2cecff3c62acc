"""The peers of ``forewarn mcp`` in ``bench/mcp_overhead.py --only peers`` (issue 43): Lasso's ``mcp-gateway``
(1.2.1; it needs ``mcp<2``) and ``mcp-proxy`` (0.13), each in a venv of its own under ``bench/.peers/``
(git-ignored; ``--install-peers`` creates them from the package index), measured interleaved with Forewarn on
the same upstream, ``mcp-server-time``: added p50 per call and start-up (seconds to the answer to
``initialize``). A peer that is not installed is skipped with a line saying how to install it."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

PEERS = Path(__file__).with_name(".peers")
# peer → (its executable, the packages its venv gets)
INSTALL = {"mcp-gateway": ("mcp-gateway", ["mcp-gateway==1.2.1", "mcp<2"]),
           "mcp-proxy": ("mcp-proxy", ["mcp-proxy==0.13.0"])}
ARGS = {"timezone": "UTC"}
_INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}


def peer(name: str) -> Path | None:
    """The peer's executable, if its venv is there."""
    path = PEERS / name / "bin" / INSTALL[name][0]
    return path if path.exists() else None


def how_to_install(name: str) -> str:
    return (f"{name}: not installed (python bench/mcp_overhead.py --install-peers, or: python -m venv "
            f"bench/.peers/{name} && bench/.peers/{name}/bin/pip install {' '.join(INSTALL[name][1])})")


def install_peers() -> None:
    for name, (_, packages) in INSTALL.items():
        if peer(name) is None:
            subprocess.run([sys.executable, "-m", "venv", str(PEERS / name)], check=True)
            subprocess.run([str(PEERS / name / "bin" / "pip"), "install", "--quiet", *packages], check=True)


def lasso_config(folder: Path, time_server: str) -> Path:
    """Lasso's config: the host's ``mcpServers`` entry of the gateway, its upstreams under ``servers``."""
    path = folder / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"mcp-gateway": {"command": "mcp-gateway", "servers": {
        "time": {"command": time_server, "args": ["--local-timezone", "UTC"]}}}}}))
    return path


@asynccontextmanager
async def stdio_session(command: str, args: list[str]) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session with a server started as ``command args``."""
    # this process's environment (PYTHONPATH: the proxy is this checkout's), not the SDK's trimmed default
    async with stdio_client(StdioServerParameters(command=command, args=args, env=dict(os.environ))) as (r, w), \
            ClientSession(r, w) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def http_session(url: str) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session with the streamable-HTTP server at ``url``."""
    async with streamable_http_client(url) as (r, w), ClientSession(r, w) as session:
        await session.initialize()
        yield session


async def interleaved(sessions: dict[str, tuple[ClientSession, str]], calls: int) -> dict[str, list[float]]:
    """Each session's latencies in ms, one call on each in turn (``sessions``: label → (session, tool name))."""
    times: dict[str, list[float]] = {label: [] for label in sessions}
    for _ in range(20):  # warm every path
        for session, tool in sessions.values():
            await session.call_tool(tool, ARGS)
    for _ in range(calls):
        for label, (session, tool) in sessions.items():
            start = time.perf_counter_ns()
            result = await session.call_tool(tool, ARGS)
            times[label].append((time.perf_counter_ns() - start) / 1e6)
            assert not result.is_error, result
    return times


def _added(times: dict[str, list[float]], base: str) -> dict[str, dict[str, float]]:
    direct = statistics.median(times[base])
    return {label: {"p50_ms": statistics.median(ms), "added_p50_ms": statistics.median(ms) - direct,
                    "ratio": statistics.median(ms) / direct} for label, ms in times.items()}


async def bench_peers(proxy: list[str], time_server: str, calls: int, free_port: Any, wait_for: Any
                      ) -> dict[str, Any]:
    """Added p50 over stdio (direct, Forewarn's lean relay, Lasso's gateway) and over streamable HTTP in front of
    a stdio server (the server's own HTTP as the base, Forewarn's SDK relay, mcp-proxy), each group interleaved.
    ``proxy``: the command line of ``forewarn mcp`` up to its options."""
    out: dict[str, Any] = {"skipped": [how_to_install(n) for n in INSTALL if peer(n) is None]}
    upstream = [time_server, "--local-timezone", "UTC"]
    with tempfile.TemporaryDirectory() as tmp:
        async with AsyncExitStack() as stack:
            sessions = {"direct": (await stack.enter_async_context(stdio_session(upstream[0], upstream[1:])), "get_current_time"),
                        "forewarn": (await stack.enter_async_context(stdio_session(proxy[0], [*proxy[1:], "--", *upstream])),
                                     "get_current_time")}
            lasso = peer("mcp-gateway")
            if lasso is not None:
                command = [str(lasso), "--mcp-json-path", str(lasso_config(Path(tmp), time_server))]
                sessions["mcp-gateway"] = (await stack.enter_async_context(stdio_session(command[0], command[1:])),
                                           "time_get_current_time")
            out["stdio"] = _added(await interleaved(sessions, calls), "direct")
    ports = {"direct": free_port(), "forewarn": free_port(), "mcp-proxy": free_port()}
    commands = {"direct": [sys.executable, "-c", "from mcp_server_time.server import create_server; "
                           f"create_server('UTC').run('streamable-http', host='127.0.0.1', port={ports['direct']})"],
                "forewarn": [*proxy, "--relay", "sdk", "--http", f"127.0.0.1:{ports['forewarn']}", "--", *upstream]}
    if (other := peer("mcp-proxy")) is not None:
        commands["mcp-proxy"] = [str(other), "--port", str(ports["mcp-proxy"]), "--", *upstream]
    procs = {label: subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for label, cmd in commands.items()}
    try:
        for label, proc in procs.items():
            wait_for(ports[label], proc)
        async with AsyncExitStack() as stack:
            sessions = {label: (await stack.enter_async_context(http_session(f"http://127.0.0.1:{ports[label]}/mcp")),
                                "get_current_time") for label in procs}
            out["http"] = _added(await interleaved(sessions, calls), "direct")
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(timeout=30)
    return out


def seconds_to_http_initialize(command: list[str], port: int) -> float:
    """Seconds from launching ``command`` to its answer to an ``initialize`` POSTed to ``/mcp`` on ``port``."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(timeout=5) as client:
            while True:
                try:
                    answer = client.post(f"http://127.0.0.1:{port}/mcp", json=_INITIALIZE,
                                         headers={"Accept": "application/json, text/event-stream"})
                    if answer.status_code == 200:
                        return time.perf_counter() - started
                except httpx.TransportError:
                    pass
                if proc.poll() is not None or time.perf_counter() - started > 120:
                    raise RuntimeError(f"{command[0]} did not answer initialize on port {port}")
                time.sleep(0.01)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def peer_starts(proxy: list[str], time_server: str, starts: int, stdio_start: Any, free_port: Any
                ) -> dict[str, list[float]]:
    """Start-up (s), interleaved: over stdio the server alone, Forewarn, Lasso's gateway; over HTTP in front of
    the stdio server, Forewarn (SDK relay) and mcp-proxy."""
    upstream = [time_server, "--local-timezone", "UTC"]
    with tempfile.TemporaryDirectory() as tmp:
        stdio = {"direct": upstream, "forewarn": [*proxy, "--audit", "off", "--", *upstream]}
        if (lasso := peer("mcp-gateway")) is not None:
            stdio["mcp-gateway"] = [str(lasso), "--mcp-json-path", str(lasso_config(Path(tmp), time_server))]
        times: dict[str, list[float]] = {label: [] for label in stdio}
        http = ["forewarn http"] + (["mcp-proxy"] if peer("mcp-proxy") is not None else [])
        times.update({label: [] for label in http})
        stdio_start(upstream)  # (the first launch reads the files from disk: every one then reads them warm)
        for _ in range(starts):
            for label, command in stdio.items():
                times[label].append(stdio_start(command))
            for label in http:
                port = free_port()
                command = ([*proxy, "--audit", "off", "--relay", "sdk", "--http", f"127.0.0.1:{port}", "--", *upstream]
                           if label == "forewarn http" else [str(peer("mcp-proxy")), "--port", str(port), "--",
                                                             *upstream])
                times[label].append(seconds_to_http_initialize(command, port))
    return times
