"""Hostile clients for ``soak.py``: connections that send headers or a body a byte at a time and
reconnect as soon as they are cut off, and one legitimate agent measured while they run.

Not a public module (``soak.py`` imports it as ``_hostile``). Every address is on loopback
(127.0.0.2 and up for the attackers, 127.0.0.1 for the legitimate agent); every loop is bounded
in time and stops by itself.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from typing import Any

SLOW_HEADERS = b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\n"


def drip_request(session: str, key: str) -> bytes:
    return (f"POST /v1/sessions/{session}/observe HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"state\":").encode()


async def _attacker(port: int, address: str, payload: bytes, drip_every: float | None, stop_at: float,
                    counts: dict[str, int]) -> None:
    loop = asyncio.get_running_loop()
    while loop.time() < stop_at:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(address, 0))
        except OSError:
            counts["refused"] += 1
            await asyncio.sleep(0.05)
            continue
        counts["opened"] += 1
        try:
            writer.write(payload)
            while loop.time() < stop_at:
                try:
                    data = await asyncio.wait_for(reader.read(4096), timeout=drip_every or (stop_at - loop.time()))
                except TimeoutError:  # still open: one more byte (a drip) or keep waiting
                    if drip_every is not None:
                        writer.write(b" ")
                    continue
                if not data:
                    counts["cut_off"] += 1
                    break
        except OSError:
            counts["cut_off"] += 1
        finally:
            writer.close()
        await asyncio.sleep(0.01)  # and straight back


async def _attack(port: int, connections: int, addresses: int, payload: bytes, drip_every: float | None,
                  seconds: float) -> dict[str, int]:
    counts = {"opened": 0, "refused": 0, "cut_off": 0}
    stop_at = asyncio.get_running_loop().time() + seconds
    await asyncio.gather(*(_attacker(port, f"127.0.0.{2 + i % addresses}", payload, drip_every, stop_at, counts)
                           for i in range(connections)))
    return counts


class Attack:
    """``connections`` attackers over ``addresses`` loopback addresses for ``seconds``, in a process of
    their own (so they share no interpreter lock with the legitimate agent measured beside them)."""

    def __init__(self, port: int, connections: int, addresses: int, payload: bytes, drip_every: float | None,
                 seconds: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, json.dumps([port, connections, addresses, payload.decode(), drip_every,
                                                   seconds])], stdout=subprocess.PIPE, text=True)

    def counts(self, timeout: float) -> dict[str, int]:
        out, _ = self.process.communicate(timeout=timeout)
        return dict(json.loads(out)) if out.strip() else {}


def legitimate(url: str, key: str, state: dict[str, Any], seconds: float, every: float = 0.02) -> dict[str, Any]:
    """One agent observing on its own session every ``every`` seconds; each request may take 5 s."""
    import httpx

    latencies: list[float] = []
    failed = 0
    with httpx.Client(base_url=url, timeout=5.0, headers={"Authorization": f"Bearer {key}"}) as http:
        session = None
        stop_at = time.monotonic() + seconds
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            try:
                if session is None:
                    session = http.post("/v1/sessions", json={}).raise_for_status().json()["id"]
                http.post(f"/v1/sessions/{session}/observe", json={"state": state}).raise_for_status()
                latencies.append(time.perf_counter() - started)
            except Exception:  # any failure counts: refused, reset, timed out, an error status
                failed += 1
            time.sleep(every)
    latencies.sort()
    total = len(latencies) + failed

    def ms(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else float("nan")

    return {"requests": total, "succeeded": len(latencies), "success_rate": len(latencies) / total if total else 0.0,
            "p50_ms": ms(0.50), "p99_ms": ms(0.99)}


async def _requests(url: str, key: str, path: str, body: bytes, workers: int, seconds: float) -> dict[str, int]:
    """``workers`` loops sending the same request, each as soon as the last was answered; counts by status."""
    import httpx

    counts: dict[str, int] = {}
    stop_at = asyncio.get_running_loop().time() + seconds
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=url, timeout=30.0, headers=headers) as http:
        async def loop() -> None:
            while asyncio.get_running_loop().time() < stop_at:
                try:
                    status = str((await http.post(path, content=body)).status_code)
                except httpx.HTTPError:
                    status = "error"
                counts[status] = counts.get(status, 0) + 1

        await asyncio.gather(*(loop() for _ in range(workers)))
    return counts


class RequestFlood:
    """An agent key's abuse within its rights: ``workers`` concurrent loops posting ``body`` to ``path``
    for ``seconds`` (sessions with the largest metadata allowed, states that are costly to read), in a
    process of its own."""

    def __init__(self, url: str, key: str, path: str, body: bytes, workers: int, seconds: float) -> None:
        # the body through a file: a state of 428 KB is past the longest argument the kernel takes
        self.body = tempfile.NamedTemporaryFile(suffix=".json")  # noqa: SIM115  # closed in counts()
        self.body.write(body)
        self.body.flush()
        self.process = subprocess.Popen(
            [sys.executable, __file__, "requests", json.dumps([url, key, path, self.body.name, workers, seconds])],
            stdout=subprocess.PIPE, text=True)

    def counts(self, timeout: float) -> dict[str, int]:
        try:
            out, _ = self.process.communicate(timeout=timeout)
        finally:
            self.body.close()
        return dict(json.loads(out)) if out.strip() else {}


if __name__ == "__main__":
    if sys.argv[1] == "requests":
        url, key, path, body_file, workers, seconds = json.loads(sys.argv[2])
        with open(body_file, "rb") as file:
            body = file.read()
        print(json.dumps(asyncio.run(_requests(url, key, path, body, workers, seconds))))
    else:
        port, connections, addresses, payload, drip_every, seconds = json.loads(sys.argv[1])
        print(json.dumps(asyncio.run(_attack(port, connections, addresses, payload.encode(), drip_every, seconds))))
