"""Fail closed with ``--serve-url`` (issue 36): a sidecar that cannot be reached lets no call reach the
upstream. The proxy judges on a local copy of the sidecar's model and created the sidecar's session at
the first commit, after the call ran: a sidecar down before (or between) calls let the call run, then
failed. Now it is reached before every forwarded call; a call it does not answer for is refused
(:data:`GUARD_UNREACHABLE`, the URL named) and rides the next committed step there (``refused``).

A real ``forewarn serve`` (uvicorn on 127.0.0.1) stopped and started again on its port and database, and
an upstream whose one tool leaves a line in a file each time it runs."""
from __future__ import annotations

import socket
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from _mcp_support import SERVERS, connected, lean_connected, proxy_for, text_of
from mcp.shared.exceptions import MCPError

from forewarn.guard import GuardModel
from forewarn.guard.mcp import GUARD_UNREACHABLE, UpstreamSpec

pytestmark = [pytest.mark.mcp, pytest.mark.server]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))  # tests/server/_sidecar.py


def _serve(settings: Any, port: int = 0) -> Any:
    """A ServerThread on ``port`` (0: a free one; else the same address again: a sidecar restarted)."""
    from _sidecar import ServerThread

    server = ServerThread(settings)
    if port:
        server.sock.close()
        server.sock = socket.socket()
        server.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.sock.bind(("127.0.0.1", port))
        server.thread = threading.Thread(target=server.server.run, kwargs={"sockets": [server.sock]}, daemon=True)
    return server.__enter__()


@asynccontextmanager
async def _client(proxy: Any, path: str) -> AsyncIterator[Any]:
    """A client session on the proxy: through the SDK's server, or the lean stdio relay."""
    if path == "lean":
        async with lean_connected(proxy) as (client, _):
            yield client
    else:
        async with proxy.running() as server, connected(server) as client:
            yield client


@pytest.mark.parametrize("path", ["sdk", "lean"])
def test_a_sidecar_down_lets_no_call_reach_the_upstream(mcp_model: GuardModel, tmp_path: Path, path: str) -> None:
    from _sidecar import KEYS, auth, settings
    from forewarn.guard.client import AsyncClient, Client

    marker = tmp_path / "touched"
    model = mcp_model.save(tmp_path / "mcp.json")
    config = settings(tmp_path / "db.sqlite", {"mcp": model})
    sidecar = _serve(config)
    port, url = sidecar.port, sidecar.url
    with Client(url, api_key=KEYS["agent"]) as client:
        guard = client.guard("mcp")  # (what `forewarn mcp --serve-url` previews with)
    upstream = UpstreamSpec("lenient", command=sys.executable, args=(str(SERVERS), "lenient", str(marker)))
    outcomes: list[str] = []

    async def call(client: Any) -> None:
        try:
            result = await client.call_tool("touch", {})
            outcomes.append(text_of(result))
        except MCPError as exc:
            assert exc.error.code == GUARD_UNREACHABLE
            outcomes.append(exc.error.message)

    async def scenario() -> None:
        nonlocal sidecar
        agent = AsyncClient(url, api_key=KEYS["agent"], retries=1)
        proxy = proxy_for(guard, upstream, unknown_tools="allow", sidecar=agent)
        proxy.model_name = "mcp"
        async with _client(proxy, path) as client:
            sidecar.__exit__()  # down before the session's first call
            await call(client)
            sidecar = _serve(config, port)
            await call(client)
            sidecar.__exit__()  # down between two calls
            await call(client)
            sidecar = _serve(config, port)
            await call(client)
        await agent.aclose()

    try:
        anyio.run(scenario)
        sessions = httpx.get(f"{url}/v1/sessions", headers=auth("agent"), timeout=30).json()["sessions"]
        assert len(sessions) == 1  # (none was made while the sidecar was down)
        steps = httpx.get(f"{url}/v1/sessions/{sessions[0]['id']}", headers=auth("agent"), timeout=30).json()["steps"]
    finally:
        sidecar.__exit__()
    refused = (f"Forewarn's sidecar at {url} cannot be reached, so the call to `touch` did not run (fail closed): "
               f"start the sidecar (forewarn serve) or fix its URL")
    assert [o.startswith(refused) for o in outcomes] == [True, False, True, False]
    assert outcomes[1] == outcomes[3] == "touched"
    assert len(marker.read_text().split()) == 2  # the upstream ran the two calls made with the sidecar up
    assert [s["action"]["tool"] if s["action"] else None for s in steps] == [None, "touch", "touch"]
    for step in steps[1:]:  # each carries the call refused before it
        assert [(r["tool"], r["args"]) for r in step["action"]["refused"]] == [("touch", {})]


def test_a_call_for_the_console_of_a_sidecar_that_is_down_does_not_run(mcp_model: GuardModel, tmp_path: Path) -> None:
    """ask_human without elicitation goes to the sidecar's console; down, it cannot be asked (its session
    cannot even be made there): the same refusal, not a bare failure of the proxy."""
    from _sidecar import KEYS, settings
    from forewarn.guard.client import AsyncClient, Client

    marker = tmp_path / "touched"
    sidecar = _serve(settings(tmp_path / "db.sqlite", {"mcp": mcp_model.save(tmp_path / "mcp.json")}))
    url = sidecar.url
    with Client(url, api_key=KEYS["agent"]) as client:
        guard = client.guard("mcp")
    sidecar.__exit__()
    upstream = UpstreamSpec("lenient", command=sys.executable, args=(str(SERVERS), "lenient", str(marker)))

    async def scenario() -> MCPError:
        agent = AsyncClient(url, api_key=KEYS["agent"], retries=1)
        proxy = proxy_for(guard, upstream, unknown_tools="ask_human", sidecar=agent)  # every call asks
        proxy.model_name = "mcp"
        try:
            async with _client(proxy, "sdk") as client:
                with pytest.raises(MCPError) as raised:
                    await client.call_tool("touch", {})
                return raised.value
        finally:
            await agent.aclose()

    error = anyio.run(scenario)
    assert error.error.code == GUARD_UNREACHABLE and not marker.exists()
    assert error.error.message.startswith(f"Forewarn's sidecar at {url} cannot be reached, so the call to `touch` "
                                          f"did not run")
