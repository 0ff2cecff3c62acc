"""What the MCP proxy's tests share (their fixtures are in conftest.py): the upstream servers' commands,
git, proxies in this process and clients (the SDK's ``ClientSession``) connected to them."""
from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import orjson
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from forewarn.domains.mcp import PROXY_CONFIG
from forewarn.guard.mcp import (
    APPROVAL_SCHEMA,
    ARGUMENTS_TOO_LARGE,
    UPSTREAM_DOWN,
    UPSTREAM_TIMEOUT,
    GuardedProxy,
    UpstreamSpec,
    in_process,
    load_config,
    serve_http,
)
from forewarn.guard.mcp.stdio._transport import LINE_LIMIT
from forewarn.guard.mcp.stdio.relay import LeanRelay
from forewarn.guard.policy import Policy
from forewarn.guard.spec import Action, Thresholds

BIN = Path(sys.executable).parent
GIT_SERVER = str(BIN / "mcp-server-git")
TIME_SERVER = str(BIN / "mcp-server-time")
SERVERS = Path(__file__).with_name("_servers.py")

FILES_SERVER = shutil.which("mcp-server-filesystem")
needs_node = pytest.mark.skipif(FILES_SERVER is None or shutil.which("node") is None,
                                reason="Node or the npm package @modelcontextprotocol/server-filesystem is not "
                                       "installed (.ci/run installs it where npm is present)")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def git_upstream(repo: Path, name: str = "git") -> UpstreamSpec:
    return UpstreamSpec(name, command=GIT_SERVER, args=("--repository", str(repo)))


def proxy_for(guard: Any, *upstreams: UpstreamSpec, **settings: Any) -> GuardedProxy:
    record = settings.pop("record", None)
    sidecar = settings.pop("sidecar", None)
    on_decision = settings.pop("on_decision", None)
    trigger = settings.pop("trigger", None)
    config = load_config(PROXY_CONFIG, upstreams=list(upstreams), **settings)
    return GuardedProxy(guard, config, record=record, sidecar=sidecar, on_decision=on_decision, trigger=trigger)


connected = in_process  # a ClientSession on the proxy's server, over memory streams


def text_of(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def files_upstream(root: Path) -> UpstreamSpec:
    assert FILES_SERVER is not None
    return UpstreamSpec("files", command=FILES_SERVER, args=(str(root),))


def flaky_upstream(**settings: Any) -> UpstreamSpec:
    return UpstreamSpec("flaky", command=sys.executable, args=(str(SERVERS), "flaky"), **settings)


@asynccontextmanager
async def lean_connected(proxy: GuardedProxy, **client: Any) -> AsyncIterator[tuple[ClientSession, LeanRelay]]:
    """A ``ClientSession`` on the lean relay of ``proxy`` (stdio, one upstream) in this process, over a
    socket pair — the relay reads and writes bytes as it does on a host's pipes — and the relay."""
    ours, theirs = socket.socketpair()
    relay = LeanRelay(proxy)
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_connection(relay.client_side, sock=theirs)
    served = asyncio.create_task(relay.serve(asyncio.StreamWriter(transport, protocol, None, loop)))
    from_relay, to_relay = await asyncio.open_connection(sock=ours, limit=LINE_LIMIT)
    inbox_send, inbox = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    outbox, outbox_receive = anyio.create_memory_object_stream[SessionMessage](16)

    async def read() -> None:
        async with inbox_send:
            while line := await from_relay.readline():
                await inbox_send.send(SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False)))

    async def write() -> None:
        async with outbox_receive:
            async for item in outbox_receive:
                to_relay.write(item.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n")
                await to_relay.drain()

    async with inbox, outbox, anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        tasks.start_soon(write)
        async with ClientSession(inbox, outbox, **client) as session:
            await session.initialize()
            yield session, relay
        to_relay.close()  # the client's end closes: the relay stops its upstream and returns
        await served
        transport.close()
        await to_relay.wait_closed()
        tasks.cancel_scope.cancel()


# what a streamable-HTTP client sends with each POST (raw requests in the HTTP tests)
HTTP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
HELLO: dict[str, Any] = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}


async def http_hello(raw: httpx.AsyncClient, url: str) -> dict[str, str]:
    """A session opened on the MCP endpoint ``url`` by hand (``HELLO``, then ``notifications/initialized``): the
    headers its later requests carry."""
    first = await raw.post(url, headers=HTTP_HEADERS, json=HELLO)
    theirs = {**HTTP_HEADERS, "mcp-session-id": first.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    await raw.post(url, headers=theirs, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return theirs


@asynccontextmanager
async def lean_raw(proxy: GuardedProxy, limit: int = LINE_LIMIT, capabilities: dict[str, Any] | None = None
                   ) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter, LeanRelay]]:
    """The lean relay of ``proxy`` in this process over a socket pair, for a client that writes bytes: the
    client's reader and writer (the handshake done: ``HELLO`` declaring ``capabilities``, then
    ``notifications/initialized``), and the relay (``limit``: the longest line it reads). The client's end is
    closed at the end, and the relay has returned."""
    hello = {**HELLO, "params": {**HELLO["params"], "capabilities": capabilities or {}}}
    ours, theirs = socket.socketpair()
    relay = LeanRelay(proxy, limit=limit)
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_connection(relay.client_side, sock=theirs)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    served = asyncio.create_task(relay.serve(writer))
    from_relay, to_relay = await asyncio.open_connection(sock=ours, limit=LINE_LIMIT)
    try:
        to_relay.write(orjson.dumps(hello) + b"\n" + b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        assert b'"forewarn-mcp"' in await from_relay.readline()
        yield from_relay, to_relay, relay
    finally:
        to_relay.close()
        await served
        writer.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_server(mode: str, *args: str) -> Iterator[str]:
    """``_servers.py MODE PORT ARGS`` (an upstream over streamable HTTP) in a process of its own: its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVERS), mode, str(port), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the {mode} server did not start") from None
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@asynccontextmanager
async def serving(proxy: GuardedProxy, relay: str = "auto", **http: Any) -> AsyncIterator[str]:
    """``proxy`` served over streamable HTTP in this process (``relay``: as ``forewarn mcp --relay``; ``http``:
    more of :func:`serve_http`'s settings): its URL."""
    port = free_port()
    started, stop = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: serve_http(proxy, port=port, started=started, stop=stop, relay=relay, **http))
        with anyio.fail_after(120):
            await started.wait()
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            stop.set()


@asynccontextmanager
async def http_client(url: str, **client: Any) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write, **client) as session:
        await session.initialize()
        yield session


# staging work raises the risk above 20 %: a human is asked (the increase trigger; reading does not)
ASKING = Policy(thresholds=Thresholds(ask_human=0.8), unseen_state=Action.ASK_HUMAN)


class Approver:
    """An elicitation callback (the SDK's ``elicitation_callback``) that accepts with ``approve`` set as scripted,
    one answer a question, and keeps the questions."""

    def __init__(self, *answers: bool) -> None:
        self.asked: list[types.ElicitRequestParams] = []
        self._answers = iter(answers)

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params)
        return types.ElicitResult(action="accept", content={"approve": next(self._answers)})


async def approve_then_refuse(client: Callable[[Approver], Any], repo: Path) -> tuple[Approver, Any, Any]:
    """Two sessions (``client(approver)``: a connected ClientSession's context) each staging a file under the
    ASKING policy: the approver approves the first and refuses the second."""
    approver = Approver(True, False)
    async with client(approver) as session:
        approved = await session.call_tool("git_add", {"repo_path": str(repo), "files": ["notes.txt"]})
    async with client(approver) as session:
        refused = await session.call_tool("git_add", {"repo_path": str(repo), "files": ["README.md"]})
    return approver, approved, refused


def assert_approved_then_refused(outcome: tuple[Approver, Any, Any], repo: Path) -> None:
    approver, approved, refused = outcome
    asked = approver.asked
    assert len(asked) == 2 and "Forewarn asks before the agent calls `git_add`" in asked[0].message
    assert isinstance(asked[0], types.ElicitRequestFormParams) and asked[0].requested_schema == APPROVAL_SCHEMA
    assert not approved.is_error and git(repo, "diff", "--cached", "--name-only").split() == ["notes.txt"]
    assert refused.is_error and "the user refused it; the call did not run" in text_of(refused)


def assert_failures_reported(seen: dict[str, Any]) -> None:
    """The errors of the flaky server's scenario (call_timeout 2 s, max_argument_bytes 1000): a hung call, one
    of another session meanwhile, oversized arguments, a crash."""
    assert seen["hung"].code == UPSTREAM_TIMEOUT
    assert "did not answer tools/call 'hang' within 2 s" in seen["hung"].message
    assert seen["other"] == "still here"
    assert seen["big"].code == ARGUMENTS_TOO_LARGE and "above the proxy's limit of 1000" in seen["big"].message
    assert seen["crashed"].code == UPSTREAM_DOWN and "upstream 'flaky'" in seen["crashed"].message
