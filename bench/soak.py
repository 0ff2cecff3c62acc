"""Soak test of the sidecar: kill -9 cycles under load, slow clients, unique-state floods.

What it does
------------
1. **kill -9 cycles.** Starts the sidecar in a child process (this script with ``_serve``:
   ``server.app`` on uvicorn as ``forewarn serve`` runs it, SQLite WAL, the built-in model)
   and runs ``--workers`` threads, each an agent with its own session using
   ``guard.client.Client`` (which sends an ``Idempotency-Key`` with every observe and retries
   transport errors itself). Every step's state carries a unique counter, so each logical
   step has its own input hash. Every ``--interval`` seconds the server is killed with
   SIGKILL and restarted on the same port and database, ``--cycles`` times. Then it counts,
   from the database: *answered* decisions (observe calls that returned), *lost* (answered
   but not in the database, or stored with other bytes than were answered) and *duplicated*
   (a logical step committed more than once).
2. **slow clients.** Against a server with ``header_timeout`` and ``body_timeout`` of 2 s, opens
   ``--slow`` connections that send half a request line and ``--slow`` that send headers and
   half a body, then counts how many the server closed, and how long it took.
3. **hostile clients** (``--hostile`` connections, each phase ``--hostile-seconds`` long). A
   legitimate agent on 127.0.0.1 observes every 20 ms while attackers on 127.0.0.2 and up hold
   connections that send half their headers, or (with the agent key) drip a body one byte every
   20 s, and reconnect the moment they are cut off. Against the sidecar alone, with its default
   limits (header 10 s, whole body 30 s, 1000 connections, 64 per client address), from one
   address and from ten; then behind nginx configured by ``examples/nginx/forewarn.conf``
   (when nginx is installed), from ten addresses. Each row gives the legitimate agent's success
   rate and p50/p99 latency, beside the same agent with no attacker (the quiet baseline), and
   the sidecar's RSS.
4. **unique-state flood.** ``--flood`` previews with large unique receptacle lists (about
   ``--flood-kb`` KB each), and the server's RSS before, right after and after 2 s idle, with
   ``forewarn_cache_bytes``; the same flood against a server whose memo budget is unbounded
   (``limits.memo_bytes`` 1 TiB: what the memo held before it was counted in bytes) is the
   baseline beside it.

5. **abuse within an agent key's rights** (``--abusers`` concurrent loops, another tenant's agent
   key): sessions with 16 KiB of metadata (1,300 small values) opened and never closed, given a
   head start of four phases so that they can fill the tenant's metadata budget; then
   previews of the issue's CPU-heavy state (a 428 KB map where a predicate reads a Boolean).
   With the shipped limits, then without ``max_tenant_metadata_bytes`` and
   ``predicate_cpu_seconds`` (before). Rows as in 3, with the abuser's answers by status.

Only 127.0.0.1 is contacted; servers are stopped at the end; nothing is asserted.

Run: ``python bench/soak.py [--cycles 20] [--workers 4] [--interval 1.0] [--slow 300] [--hostile 1100]
[--hostile-seconds 20] [--abusers 8] [--flood 300] [--json FILE]`` (``--only hostile`` or ``--only abuse``
runs one phase)
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _hostile as H
import orjson

import _common as C

KEY = "soak-agent-key-0123456789abcdef"
ADMIN = "soak-admin-key-0123456789abcdef"
ABUSER = "soak-abuser-key-0123456789abcdef"  # an agent key of another tenant, abusing what it may do


def serve(port: int, db: Path, memo_bytes: int, profile: str = "soak") -> None:
    from forewarn.domains.embodied.builtin import builtin_model_path
    from forewarn.server.app import create_app, start
    from forewarn.server.run import serve_app
    from forewarn.server.settings import ServerSettings

    keys: Any = f"{KEY}:agent,{ADMIN}:admin,{ABUSER}:agent:abuser"  # parsed as FOREWARN_API_KEYS is
    settings = ServerSettings(host="127.0.0.1", port=port, db=db, models={"builtin": builtin_model_path()},
                              api_keys=keys, log_level="error",
                              limits=_limits(profile, memo_bytes))
    serve_app(create_app(settings, state=start(settings)), settings)


# The server profiles (limits) the drip phase can compare, by name: what each row's label says
PROFILES = {"default": "the shipped limits", "proxied": "as behind a proxy: no per-address cap",
            "unbudgeted": "no tenant budgets", "soak": "2 s deadlines",
            "refuse": "at the cap, refuse new connections (before)", "cap8": "8 connections per address"}


def _limits(profile: str, memo_bytes: int) -> Any:
    """``soak``: short deadlines for the slow-client phase; ``default``: the shipped limits;
    ``proxied``: the shipped limits as docs/security.md says to run behind a proxy; ``unbudgeted``: the
    shipped limits without the tenant metadata and predicate CPU budgets (what the sidecar did before)."""
    from forewarn.server.settings import Limits

    if profile == "default":
        return Limits(memo_bytes=memo_bytes)
    if profile == "unbudgeted":
        return Limits(memo_bytes=memo_bytes, max_tenant_metadata_bytes=1 << 40, predicate_cpu_seconds=None)
    if profile == "proxied":
        return Limits(memo_bytes=memo_bytes, max_connections_per_client=0)
    if profile == "refuse":
        return Limits(memo_bytes=memo_bytes, evict_stalled_after=None)
    if profile == "cap8":
        return Limits(memo_bytes=memo_bytes, evict_stalled_after=None, max_connections_per_client=8)
    return Limits(header_timeout=2.0, body_timeout=2.0, memo_bytes=memo_bytes, max_body_bytes=4 << 20)


class Server:
    def __init__(self, port: int, db: Path, memo_bytes: int = 64 << 20, profile: str = "soak") -> None:
        self.port, self.db, self.memo_bytes, self.profile = port, db, memo_bytes, profile
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen([sys.executable, __file__, "_serve", str(self.port), str(self.db),
                                         str(self.memo_bytes), self.profile],
                                        env={**os.environ, "PYTHONPATH": str(C.ROOT)})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"the server exited with code {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if sock.recv(32).startswith(b"HTTP/1.1 200"):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        raise SystemExit("the server was not ready in time")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)

    def rss_mib(self) -> float:
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def kitchen(i: int, worker: int) -> dict[str, Any]:
    egg = ("Fridge", "Fridge", "Microwave", "CounterTop")[i % 4]
    return {"objects": {"Egg": {"parentReceptacles": [egg], "isPickedUp": i % 3 == 0},
                        "Microwave": {"isOpen": i % 5 != 0, "isToggled": False}},
            "agent": {"worker": worker, "step": i}}  # unique per logical step: its own input hash


def kill_cycles(tmp: Path, cycles: int, workers: int, interval: float) -> dict[str, Any]:
    from forewarn.guard.client import Client, ServerError

    port, db = free_port(), tmp / "soak.db"
    server = Server(port, db)
    server.start()
    url = f"http://127.0.0.1:{port}"
    answered: list[tuple[str, int | None, float | None, str]] = []
    failed = [0]
    errors: set[str] = set()
    stop = threading.Event()
    lock = threading.Lock()

    def agent(worker: int) -> None:
        with Client(url, api_key=KEY, retries=10, timeout=10) as client:
            session = client.session()
            i = 0
            while not stop.is_set():
                try:  # the library sends an Idempotency-Key and retries across the kill by itself
                    decision = session.observe(kitchen(i, worker))
                except ServerError as exc:
                    with lock:
                        failed[0] += 1
                        errors.add(str(exc)[:160])
                else:
                    with lock:
                        answered.append((session.id, decision.step, decision.at, decision.action.value))
                i += 1

    threads = [threading.Thread(target=agent, args=(w,), daemon=True) for w in range(workers)]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    restart_seconds = []
    for _ in range(cycles):
        time.sleep(interval)
        server.kill()
        began = time.monotonic()
        server.start()
        restart_seconds.append(time.monotonic() - began)
    time.sleep(interval)
    stop.set()
    for thread in threads:
        thread.join(60)
    elapsed = time.monotonic() - started
    server.stop()
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        stored = {(s, n): d for s, n, d in conn.execute("SELECT session_id, step, decision FROM decisions")}
        duplicated = conn.execute("SELECT coalesce(sum(c - 1), 0) FROM (SELECT count(*) AS c FROM decisions"
                                  " GROUP BY session_id, input_hash HAVING c > 1)").fetchone()[0]
    def same(stored_json: str | None, at: float | None, action: str) -> bool:
        if stored_json is None:
            return False
        row = orjson.loads(stored_json)
        return bool(row["at"] == at and row["action"] == action)  # `at` is the commit's own time stamp

    lost = sum(1 for s, n, at, action in answered if not same(stored.get((s, n)), at, action))
    return {"cycles": cycles, "workers": workers, "seconds": elapsed, "answered": len(answered), "lost": lost,
            "duplicated": int(duplicated), "stored": len(stored), "client_errors": failed[0],
            "restart_s_mean": sum(restart_seconds) / max(1, len(restart_seconds)), "errors": sorted(errors)}


def slow_clients(tmp: Path, count: int) -> dict[str, Any]:
    port = free_port()
    server = Server(port, tmp / "slow.db")
    server.start()
    try:
        sockets = []
        for n in range(2 * count):
            sock = socket.create_connection(("127.0.0.1", port))
            if n < count:
                sock.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\n")
            else:
                sock.sendall(f"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                             "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode())
            sock.settimeout(0.0)
            sockets.append(sock)
        opened = time.monotonic()
        closed_at: dict[int, float] = {}
        deadline = opened + 30
        while len(closed_at) < len(sockets) and time.monotonic() < deadline:
            for n, sock in enumerate(sockets):
                if n in closed_at:
                    continue
                try:
                    data = sock.recv(4096)
                    if not data or b" 408 " in data[:20]:
                        closed_at[n] = time.monotonic() - opened
                except BlockingIOError:
                    pass
                except OSError:
                    closed_at[n] = time.monotonic() - opened
            time.sleep(0.05)
        for sock in sockets:
            sock.close()
        half_headers = [closed_at[n] for n in range(count) if n in closed_at]
        half_bodies = [closed_at[n] for n in range(count, 2 * count) if n in closed_at]
        return {"held": 2 * count, "closed_headers": len(half_headers), "closed_bodies": len(half_bodies),
                "max_s_headers": max(half_headers, default=float("nan")),
                "max_s_bodies": max(half_bodies, default=float("nan"))}
    finally:
        server.stop()


def _phase(rows: list[dict[str, Any]], name: str, server: Server, port: int, connections: int, addresses: int,
           payload: bytes | None, drip: float | None, seconds: float) -> None:
    """One row: the legitimate agent's figures while ``connections`` attackers (none: the quiet baseline)
    from ``addresses`` loopback addresses send ``payload`` (and a byte every ``drip`` seconds)."""
    attackers = None
    if payload is not None:
        attackers = H.Attack(port, connections, addresses, payload, drip, seconds)
        time.sleep(min(3.0, seconds / 4))  # let them take their slots first
    state = kitchen(0, 0)
    figures = H.legitimate(f"http://127.0.0.1:{port}", KEY, state, seconds / 2 if attackers else seconds / 4)
    if attackers is not None:
        figures.update({f"attack_{k}": v for k, v in attackers.counts(seconds + 30).items()})
    rows.append({"phase": name, "attackers": connections if payload else 0, "addresses": addresses,
                 "rss_mib": server.rss_mib(), **figures})


def hostile(tmp: Path, connections: int, seconds: float) -> list[dict[str, Any]]:
    """The legitimate agent's figures in each hostile phase (see the module's docstring)."""
    rows: list[dict[str, Any]] = []

    def phase(name: str, server: Server, port: int, addresses: int, payload: bytes | None,
              drip: float | None) -> None:
        _phase(rows, name, server, port, connections, addresses, payload, drip, seconds)

    direct = Server(free_port(), tmp / "hostile.db", profile="default")
    direct.start()
    try:
        session = _session(direct.port)
        phase("sidecar alone, quiet", direct, direct.port, 0, None, None)
        phase("slow headers, 1 address", direct, direct.port, 1, H.SLOW_HEADERS, None)
        phase("slow headers, 10 addresses", direct, direct.port, 10, H.SLOW_HEADERS, None)
        phase("body drip (agent key), 1 address", direct, direct.port, 1, H.drip_request(session, KEY), 20.0)
    finally:
        direct.stop()
    uncapped = Server(free_port(), tmp / "uncapped.db", profile="proxied")  # no per-address cap: as before
    uncapped.start()
    try:
        phase("no per-address cap (before): slow headers, 1 address", uncapped, uncapped.port, 1, H.SLOW_HEADERS,
              None)
    finally:
        uncapped.stop()
    def proxied_phases(proxied: Server, port: int) -> None:
        session = _session(port)
        phase("behind nginx, quiet", proxied, port, 0, None, None)
        phase("behind nginx: slow headers, 10 addresses", proxied, port, 10, H.SLOW_HEADERS, None)
        phase("behind nginx: body drip, 10 addresses", proxied, port, 10, H.drip_request(session, KEY), 20.0)

    _behind_nginx(tmp, "proxied", proxied_phases)
    return rows


def drip(tmp: Path, connections: int, addresses: int, seconds: float, profiles: list[str]) -> list[dict[str, Any]]:
    """Issue 36: ``connections`` slow-body connections (the agent key's observe, headers whole, a body byte
    every 20 s) from ``addresses`` loopback addresses against ``forewarn serve`` alone, with each server
    profile of ``profiles`` (the shipped limits first), then behind nginx as docs/security.md configures it;
    each beside a quiet baseline on the same server in the same run."""
    rows: list[dict[str, Any]] = []
    for profile in profiles:
        server = Server(free_port(), tmp / f"drip-{profile}.db", profile=profile)
        server.start()
        try:
            session = _session(server.port)
            label = "sidecar alone" + ("" if profile == "default" else f" ({PROFILES[profile]})")
            _phase(rows, f"{label}, quiet", server, server.port, connections, 0, None, None, seconds)
            _phase(rows, f"{label}: body drip, {addresses} addresses", server, server.port, connections, addresses,
                   H.drip_request(session, KEY), 20.0, seconds)
        finally:
            server.stop()

    def proxied_phases(proxied: Server, port: int) -> None:
        session = _session(port)
        _phase(rows, "behind nginx, quiet", proxied, port, connections, 0, None, None, seconds)
        _phase(rows, f"behind nginx: body drip, {addresses} addresses", proxied, port, connections,
               addresses, H.drip_request(session, KEY), 20.0, seconds)

    _behind_nginx(tmp, "drip-proxied", proxied_phases)
    return rows


def _behind_nginx(tmp: Path, name: str, phases: Callable[[Server, int], None]) -> None:
    """Run ``phases(server, nginx's port)`` on a server of the proxied profile behind nginx as docs/security.md
    configures it; where nginx is not installed, a line says the rows behind it are left out."""
    from _nginx import Nginx, nginx_binary

    if nginx_binary() is None:
        print("nginx is not installed: the rows behind it are left out (apt-get install nginx-light)")
        return
    proxied = Server(free_port(), tmp / f"{name}.db", profile="proxied")
    proxied.start()
    try:
        with Nginx(tmp / f"nginx-{name}", proxied.port) as proxy:
            phases(proxied, proxy.port)
    finally:
        proxied.stop()


def _session(port: int, key: str = KEY) -> str:
    import httpx

    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}) as http:
        return str(http.post("/v1/sessions", json={}).raise_for_status().json()["id"])


def issue_map_state() -> dict[str, Any]:
    """The issue's CPU-heavy state: a 428 KB map where a predicate reads a Boolean (6.5 s of CPU then)."""
    return {"objects": {"Egg": {"parentReceptacles": ["Fridge"], "isPickedUp": False},
                        "Microwave": {"isOpen": True, "isToggled": {f"k{i}": "v" * 10 for i in range(18_600)}}}}


def abuse(tmp: Path, seconds: float, workers: int) -> list[dict[str, Any]]:
    """An agent key of another tenant abusing what it may do, while the legitimate agent observes: sessions
    with the largest metadata allowed (16 KiB) opened and never closed, and previews of the issue's
    CPU-heavy state; with the shipped limits, then without the two budgets (before)."""
    rows: list[dict[str, Any]] = []
    # metadata of many small values (what costs memory: about 10 bytes held per byte of JSON), under 16 KiB
    metadata = orjson.dumps({"metadata": {f"k{i}": i for i in range(1_300)}})
    assert len(metadata) < 16 << 10
    heavy = orjson.dumps({"state": issue_map_state()})
    for profile, note in (("default", ""), ("unbudgeted", " (before: no budgets)")):
        server = Server(free_port(), tmp / f"abuse-{profile}.db", profile=profile)
        server.start()
        url = f"http://127.0.0.1:{server.port}"
        try:
            abuser_session = _session(server.port, ABUSER)
            for name, path, body, lead in (
                    ("quiet", None, b"", 0.0),
                    # the creates get a head start of four phases: long enough, here, to fill the tenant's budget
                    ("huge metadata: sessions of 16 KiB, never closed", "/v1/sessions", metadata, 4 * seconds),
                    ("CPU-heavy states: the issue's 428 KB map", f"/v1/sessions/{abuser_session}/preview", heavy,
                     min(2.0, seconds / 4))):
                flood = None if path is None else H.RequestFlood(url, ABUSER, path, body, workers, seconds + lead)
                time.sleep(lead)
                figures = H.legitimate(url, KEY, kitchen(0, 0), seconds / 2 if flood else seconds / 4)
                if flood is not None:
                    figures["abuser_answers"] = flood.counts(seconds + lead + 60)
                rows.append({"phase": f"sidecar{note}: {name}", "attackers": workers if flood else 0,
                             "addresses": 1, "rss_mib": server.rss_mib(), **figures})
        finally:
            server.stop()
    return rows


def flood(tmp: Path, count: int, kb: int, memo_bytes: int) -> dict[str, Any]:
    import httpx

    port = free_port()
    server = Server(port, tmp / f"flood-{memo_bytes}.db", memo_bytes)
    server.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60,
                          headers={"Authorization": f"Bearer {KEY}"}) as http:
            sid = http.post("/v1/sessions", json={}).json()["id"]
            before = server.rss_mib()
            per_item = 60
            for i in range(count):
                receptacles = [f"Shelf-{i}-{j}-" + "x" * 40 for j in range(kb * 1024 // per_item)]
                state = {"objects": {"Egg": {"parentReceptacles": receptacles, "isPickedUp": False},
                                     "Microwave": {"isOpen": True, "isToggled": False}}}
                http.post(f"/v1/sessions/{sid}/preview", json={"state": state}).raise_for_status()
            after = server.rss_mib()
            time.sleep(2.0)
            idle = server.rss_mib()
            text = http.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
            cache = next(float(line.split()[1]) for line in text.splitlines()
                         if line.startswith("forewarn_cache_bytes "))
        return {"memo_budget_mib": memo_bytes / 2**20, "requests": count, "kb_each": kb, "rss_before_mib": before,
                "rss_after_mib": after, "rss_idle_mib": idle, "cache_mib": cache / 2**20}
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds of load between two kills")
    parser.add_argument("--slow", type=int, default=300, help="slow connections of each kind")
    parser.add_argument("--flood", type=int, default=300, help="unique-state previews")
    parser.add_argument("--flood-kb", type=int, default=200, help="size of each flooding state")
    parser.add_argument("--hostile", type=int, default=1200, help="hostile connections in each hostile phase")
    parser.add_argument("--addresses", type=int, default=100, help="attacking addresses of the drip phase")
    parser.add_argument("--profiles", default="default",
                        help=f"server profiles of the drip phase, comma-separated: {', '.join(PROFILES)}")
    parser.add_argument("--hostile-seconds", type=float, default=20.0, help="length of each hostile phase")
    parser.add_argument("--abusers", type=int, default=8, help="concurrent loops of the abusing agent key")
    parser.add_argument("--only", choices=["hostile", "abuse", "drip"], help="run this phase alone")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    machine = C.machine()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if args.only == "drip":
            rows = drip(tmp, args.hostile, args.addresses, args.hostile_seconds, args.profiles.split(","))
            print(f"forewarn sidecar soak; machine: {machine['cpus']} cpus, load average {machine['loadavg']}\n")
            _print_hostile(rows, args.hostile)
            C.write_json(args.json, {"drip": rows})
            return
        drip_rows = [] if args.only == "abuse" else drip(tmp, args.hostile, args.addresses, args.hostile_seconds,
                                                         args.profiles.split(","))
        hostile_rows = [] if args.only == "abuse" else hostile(tmp, args.hostile, args.hostile_seconds)
        abuse_rows = abuse(tmp, args.hostile_seconds, args.abusers)
        print(f"forewarn sidecar soak; machine: {machine['cpus']} cpus, load average {machine['loadavg']}\n")
        if drip_rows:
            _print_hostile(drip_rows, args.hostile)
        if hostile_rows:
            _print_hostile(hostile_rows, args.hostile)
        _print_abuse(abuse_rows)
        if args.only is not None:
            C.write_json(args.json, {"hostile": hostile_rows, "abuse": abuse_rows, "drip": drip_rows})
            return
        kills = kill_cycles(tmp, args.cycles, args.workers, args.interval)
        slow = slow_clients(tmp, args.slow)
        bounded = flood(tmp, args.flood, args.flood_kb, 64 << 20)
        unbounded = flood(tmp, args.flood, args.flood_kb, 1 << 40)
    print(C.table(["kill -9 cycles", "workers", "seconds", "answered", "lost", "duplicated", "client errors",
                   "restart s"],
                  [[kills["cycles"], kills["workers"], kills["seconds"], kills["answered"], kills["lost"],
                    kills["duplicated"], kills["client_errors"], kills["restart_s_mean"]]],
                  title="durability under kill -9 (each answer checked against the database: step, commit time, action)"))
    for message in kills["errors"]:
        print(f"  client error: {message}")
    print()
    print(C.table(["connections held", "half headers closed", "within s", "half bodies closed", "within s"],
                  [[slow["held"], slow["closed_headers"], slow["max_s_headers"], slow["closed_bodies"],
                    slow["max_s_bodies"]]], title="slow clients (header and body timeouts 2 s)"))
    print()
    print(C.table(["memo budget MiB", "requests", "KB each", "RSS before", "RSS after", "RSS idle", "memo MiB"],
                  [[r["memo_budget_mib"], r["requests"], r["kb_each"], r["rss_before_mib"], r["rss_after_mib"],
                    r["rss_idle_mib"], r["cache_mib"]] for r in (bounded, unbounded)],
                  title="unique-state flood (previews); second row: unbounded memo, the baseline"))
    ok = kills["lost"] == 0 and kills["duplicated"] == 0
    print(f"\ntarget 0 lost and 0 duplicated across {kills['cycles']} kill -9 cycles -> {C.verdict(ok)}")
    held_ok = slow["closed_headers"] + slow["closed_bodies"] == slow["held"]
    print(f"target every slow connection closed -> {C.verdict(held_ok)}")
    C.write_json(args.json, {"kill_cycles": kills, "slow_clients": slow, "flood": [bounded, unbounded],
                             "hostile": hostile_rows, "abuse": abuse_rows, "drip": drip_rows})


def _print_hostile(rows: list[dict[str, Any]], connections: int) -> None:
    print(C.table(["phase", "attackers", "legit requests", "succeeded %", "p50 ms", "p99 ms", "RSS MiB"],
                  [[r["phase"], r["attackers"], r["requests"], 100 * r["success_rate"], r["p50_ms"], r["p99_ms"],
                    r["rss_mib"]] for r in rows],
                  title=f"a legitimate agent while {connections} hostile connections reconnect (quiet rows: the baseline)"))
    for r in rows:
        if r["attackers"]:
            ok = r["success_rate"] >= 0.95 and r["p99_ms"] <= 250
            print(f"target ≥ 95 % succeeded and p99 ≤ 250 ms, {r['phase']} -> {C.verdict(ok)}")
    print()


def _print_abuse(rows: list[dict[str, Any]]) -> None:
    print(C.table(["phase", "abusing loops", "legit requests", "succeeded %", "p50 ms", "p99 ms", "RSS MiB"],
                  [[r["phase"], r["attackers"], r["requests"], 100 * r["success_rate"], r["p50_ms"], r["p99_ms"],
                    r["rss_mib"]] for r in rows],
                  title="a legitimate agent while another tenant's agent key abuses its rights (quiet rows: the baseline)"))
    for r in rows:
        if r["attackers"]:
            answers = ", ".join(f"{status}: {n}" for status, n in sorted(r["abuser_answers"].items()))
            print(f"  {r['phase']}: the abuser's answers by status: {answers}")
    print()


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "_serve":
        serve(int(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        main()
