"""The documented deployment behind a real nginx (examples/nginx/forewarn.conf): clients that
hold slow connections from one address or several do not keep the others from being served."""
from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx
import pytest

from _nginx import Nginx, nginx_binary
from _sidecar import ServerThread, auth, egg_state, settings
from forewarn.server.settings import Limits

pytestmark = pytest.mark.skipif(nginx_binary() is None,
                                reason="nginx is not installed (apt-get install nginx-light; .ci/run installs it)")


def _slow(address: str, port: int, payload: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), source_address=(address, 0))
    sock.sendall(payload)  # and never the rest
    return sock


def test_slow_clients_from_many_addresses_do_not_starve_the_others(tmp_path: Path, builtin_path: Path) -> None:
    # the sidecar as the docs say to run it there: no per-address cap of its own, few slots
    limits = Limits(max_connections=50, max_connections_per_client=0, header_timeout=30.0, body_timeout=30.0)
    with ServerThread(settings(tmp_path / "forewarn.db", {"builtin": builtin_path}, limits=limits)) as server, \
            Nginx(tmp_path / "nginx", server.port) as proxy, httpx.Client(base_url=proxy.url, timeout=10) as http:
        sid = http.post("/v1/sessions", json={}, headers=auth("agent")).json()["id"]
        key = auth("agent")["Authorization"]
        held = []
        for i in range(300):  # more than the sidecar's 50 slots, from 10 addresses
            address = f"127.0.0.{2 + i % 10}"
            if i % 2:
                held.append(_slow(address, proxy.port, b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\n"))
            else:
                held.append(_slow(address, proxy.port, (
                    f"POST /v1/sessions/{sid}/observe HTTP/1.1\r\nHost: x\r\nAuthorization: {key}\r\n"
                    "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"state\":").encode()))
        time.sleep(0.5)
        answers = [http.post(f"/v1/sessions/{sid}/observe", json={"state": egg_state()}, headers=auth("agent"))
                   for _ in range(30)]
        assert [a.status_code for a in answers] == [200] * 30
        assert all(a.json()["action"] for a in answers)
        for sock in held:
            sock.close()


def test_large_bodies_pass_through_the_proxy_whole(tmp_path: Path, builtin_path: Path) -> None:
    """A body the proxy buffered arrives whole."""
    with ServerThread(settings(tmp_path / "forewarn.db", {"builtin": builtin_path},
                               limits=Limits(max_connections_per_client=0))) as server, \
            Nginx(tmp_path / "nginx", server.port) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as http:
        sid = http.post("/v1/sessions", json={}, headers=auth("agent")).json()["id"]
        state = {**egg_state(), "camera": "x" * 200_000}  # larger than nginx keeps in memory: buffered to disk
        answer = http.post(f"/v1/sessions/{sid}/observe", json={"state": state}, headers=auth("agent"))
        assert answer.status_code == 200, answer.text
