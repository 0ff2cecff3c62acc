"""The client's one implementation: the same operations through httpx (a custom transport, another
host) and through the loopback pool; the retry plan and the idempotency key, whichever drives them."""
from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from _sidecar import KEYS, ServerThread, egg_state, free_port
from forewarn.guard.client import _core as core
from forewarn.guard.client import AsyncClient, AsyncRemoteSession, Client, RemoteSession, ServerError

DECISION = {"action": "allow", "p_unsafe": 0.1, "p_safe": 0.9, "property": "P", "abstract_state": {"a": True},
            "session_id": "s_1", "step": 3, "committed": True}


class Flaky:
    """A transport that drops the first ``drops`` attempts of every request, then answers."""

    def __init__(self, drops: int) -> None:
        self.drops = drops
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        if sum(1 for r in self.seen if r.url.path == request.url.path) <= self.drops:
            raise httpx.ReadError("the connection dropped", request=request)
        if request.url.path.endswith("/observe"):
            return httpx.Response(200, content=orjson.dumps(DECISION))
        return httpx.Response(200, json={"id": "s_1", "closed": True})


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core, "BACKOFF", (0.0,))


def test_an_idempotent_write_is_retried_with_one_key_through_httpx() -> None:
    flaky = Flaky(drops=2)
    with Client("http://127.0.0.1:9", transport=httpx.MockTransport(flaky)) as client:
        assert client._fast is None  # a custom transport: httpx drives
        session = RemoteSession(client, "s_1", {})
        decision = session.observe({"x": 1}, ask=False)
    assert decision.step == 3 and session.last == decision
    keys = {r.headers["Idempotency-Key"] for r in flaky.seen}
    assert len(flaky.seen) == 3 and len(keys) == 1  # three attempts, one key
    assert orjson.loads(flaky.seen[-1].content) == {"state": {"x": 1}, "ask": False}


def test_a_plain_write_is_not_retried_once_sent() -> None:
    flaky = Flaky(drops=1)
    with Client("http://127.0.0.1:9", transport=httpx.MockTransport(flaky)) as client:
        with pytest.raises(ServerError, match="cannot reach"):
            RemoteSession(client, "s_1", {}).close()
    assert len(flaky.seen) == 1


def test_the_async_client_drives_the_same_operations() -> None:
    flaky = Flaky(drops=1)

    async def run() -> Any:
        async with AsyncClient("http://127.0.0.1:9", transport=httpx.MockTransport(flaky)) as client:
            return await AsyncRemoteSession(client, "s_1", {}).observe({"x": 1})

    assert asyncio.run(run()).step == 3 and len({r.headers["Idempotency-Key"] for r in flaky.seen}) == 1


def test_which_requests_take_the_loopback_pool() -> None:
    assert Client("http://127.0.0.1:8321")._fast is not None
    assert Client("http://localhost:8321/prefix")._fast is not None
    assert Client("https://127.0.0.1:8321")._fast is None and Client("http://sidecar.internal:8321")._fast is None


def test_the_loopback_pool_against_a_real_server(server: ServerThread) -> None:
    with Client(server.url, api_key=KEYS["agent"]) as client:
        assert client._fast is not None and client.ready()
        session = client.session()
        assert [session.observe(egg_state(), ask=False).step for _ in range(3)] == [0, 1, 2]
        with pytest.raises(ServerError) as info:
            client.get_session("s_" + "x" * 20)
        assert info.value.status == 404 and info.value.code == "not_found"
        assert len(client._fast._idle) == 1  # one keep-alive connection, reused
    with Client(server.url, api_key="not-a-key") as stranger:
        with pytest.raises(ServerError) as info:
            stranger.models()
        assert info.value.status == 401
    assert not Client(f"http://127.0.0.1:{free_port()}", retries=0).ready()  # nothing listens there


def test_the_loopback_pool_drops_a_connection_the_server_closed() -> None:
    """A server that closes each connection after one answer (as uvicorn does past its keep-alive
    timeout) without saying so: the next request must not be sent down the dead connection."""
    import socket
    import threading
    import time

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    served: list[int] = []

    def serve() -> None:
        for n in range(2):
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 22\r\n\r\n"
                             b'{"models": [], "n": %d}' % n)
                served.append(n)
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with Client(f"http://127.0.0.1:{port}", retries=0) as client:
            assert client.models() == []
            time.sleep(0.2)  # the server has closed the kept-alive connection by now
            assert client.models() == []  # on a fresh connection (retries=0: no second chance)
        thread.join(5)
        assert served == [0, 1]
    finally:
        listener.close()
