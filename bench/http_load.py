"""HTTP load on the sidecar: ``observe`` next to a no-op endpoint of the same server, same run.

What it does
------------
1. Starts the sidecar in a child process (this script with ``_serve``): the real app of
   ``server.app.create_app`` on uvicorn, as ``forewarn serve`` runs it, with persistence
   on (SQLite WAL in a temporary folder; ``--synchronous full`` to fsync every group
   commit), serving the built-in demo model, plus one extra route, ``POST /noop``, that
   answers ``{}`` and does nothing else: the floor of FastAPI + uvicorn on this machine.
2. From this process (the load generator; a raw HTTP/1.1 client over keep-alive
   connections, asyncio), creates 16 sessions and sends ``observe`` steps round-robin,
   each a realistic embodied state (about 250 bytes) whose agent position changes at
   every step:

   a. *open loop* at 100, 500 and 1,000 requests/s for ``--seconds`` each, first against
      ``/noop`` (the floor the machine gives at that moment), then ``observe``: requests are
      sent on a fixed schedule whatever the answers do. Latency is from the request's
      write to the last byte of its answer (``p50``/``p99``); ``p99 sched`` also counts
      the time a request waited for its slot (scheduler lag and queueing), so a server
      that falls behind cannot hide it.
   b. *peak* (closed loop): 16 connections, each sending its next request as soon as the
      last one is answered, for ``--seconds``, against ``/noop`` and against ``observe``.
   c. *one step's round trip*: one connection, one request at a time, alternating blocks of
      ``observe`` on the sidecar and ``POST /echo`` on a **bare FastAPI app** in a second child
      process (one route that returns the body it was sent; no sidecar middleware, no auth, no
      storage) served by the same uvicorn set-up: what HTTP itself costs on this machine, measured
      in the same minutes. Target: a step's p50 at most 1.5x the echo's.
3. Prints throughput and latency, the server's own step and commit-wait times (from
   /metrics), and the two targets: p99 <= 5 ms at 500 requests/s, and peak ``observe``
   throughput >= 60% of the no-op endpoint's.

Bounded: every phase stops after ``--seconds`` (at most rate x seconds requests, each
with a 10 s timeout), only 127.0.0.1 is contacted, and the server is stopped at the end.
Nothing is asserted. The machine's load average is printed: on a shared 2-core machine
other work shifts the numbers.

With ``--db postgresql`` the same run then starts a throw-away PostgreSQL cluster (``initdb`` in
a temporary folder, loopback port, durable commits: ``fsync`` and ``synchronous_commit`` on) and
``--replicas`` (3) sidecar processes on it, spreads the ``observe`` load over them (each replica
its own sessions, as a load balancer with session affinity would), and prints them beside the
single SQLite process; target p99 <= 10 ms at 500 requests/s.

With ``--before DIR`` (another checkout, e.g. ``git worktree add /tmp/main main``) only 2c runs: this
checkout's sidecar and DIR's, each a child process with its own package on the path, beside the echo, in
alternating blocks of the same run, with each p50's ratio to the echo's.

Run: ``python bench/http_load.py [--seconds 5] [--quick] [--synchronous normal|full]
[--db sqlite|postgresql] [--replicas 3] [--before DIR] [--json FILE]``
"""
from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import orjson

import _common as C

RATES = (100, 500, 1000)
CONNECTIONS = 16
SESSIONS = 16
KEY = "bench-agent-key-0123456789abcdef"
ADMIN_KEY = "bench-admin-key-0123456789abcdef"  # /metrics answers an admin key only
TARGET_P99_MS = 5.0
TARGET_PG_P99_MS = 10.0  # replicas on PostgreSQL, durable commits
TARGET_RATIO = 0.60
TARGET_ECHO_RATIO = 1.5  # a step's round trip against a bare FastAPI echo's, p50
ROUND_TRIPS = 2000  # per endpoint, in alternating blocks of 100
TIMEOUT = 10.0


# -- the server (child process) ---------------------------------------------------------------


def serve(port: int, db: str, synchronous: Literal["normal", "full"]) -> None:
    from starlette.responses import Response

    import forewarn
    from forewarn.domains.embodied.builtin import builtin_model_path
    from forewarn.server.app import create_app, start

    if os.environ.get("FOREWARN_BENCH_SAY_ROOT"):
        print(f"sidecar on port {port} serves {Path(forewarn.__file__).resolve().parent.parent}", flush=True)
    from forewarn.server.run import serve_app
    from forewarn.server.settings import ServerSettings

    keys: Any = f"{KEY}:agent,{ADMIN_KEY}:admin"  # parsed by the settings, as FOREWARN_API_KEYS is
    settings = ServerSettings(host="127.0.0.1", port=port, db=db, models={"builtin": builtin_model_path()}, api_keys=keys,
                              synchronous=synchronous, log_level="warning")
    app = create_app(settings, state=start(settings))

    @app.post("/noop", include_in_schema=False)
    async def noop() -> Response:
        return Response(b"{}", media_type="application/json")

    serve_app(app, settings)  # as `forewarn serve` runs it


def serve_echo(port: int) -> None:
    """A bare FastAPI app with one route that echoes its body: HTTP's own cost, as the sidecar is served."""
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import Response

    from forewarn.server.run import serve_app
    from forewarn.server.settings import ServerSettings

    app = FastAPI()

    @app.get("/readyz")
    async def ready() -> Response:
        return Response(b"{}", media_type="application/json")

    async def echo(request: Request) -> Response:
        return Response(await request.body(), media_type="application/json")

    app.add_route("/echo", echo, methods=["POST"])  # a plain Starlette endpoint: the body, no validation

    serve_app(app, ServerSettings(host="127.0.0.1", port=port, log_level="warning"))


# -- the load generator ------------------------------------------------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection; answers are read by Content-Length."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        at = lower.find(b"content-length:")
        length = int(lower[at + 15:lower.index(b"\r\n", at)]) if at >= 0 else 0
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def post(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def kitchen(i: int) -> dict[str, Any]:
    """Embodied states of the built-in model's task; the facts repeat, the position does not."""
    egg = ("Fridge", "Fridge", "Microwave", "CounterTop")[i % 4]
    return {"objects": {"Egg": {"parentReceptacles": [egg], "isPickedUp": i % 3 == 0},
                        "Microwave": {"isOpen": i % 5 != 0, "isToggled": False}},
            "agent": {"position": [round(0.01 * i, 2), 0.9, -0.5], "rotation": i % 360, "step": i}}


class Steps:
    """Pre-rendered observe requests, round-robin over the sessions (rendering is not measured)."""

    def __init__(self, sessions: list[str], count: int = 4096) -> None:
        self.requests = [post(f"/v1/sessions/{sessions[i % len(sessions)]}/observe",
                              orjson.dumps({"state": kitchen(i), "action": "step"})) for i in range(count)]
        self.i = 0

    def next(self) -> bytes:
        self.i += 1
        return self.requests[self.i % len(self.requests)]


class Spread:
    """Requests spread over replicas as a load balancer with session affinity would: each replica
    gets the steps of its own sessions (any replica could serve any session; affinity saves reloads)."""

    def __init__(self, ports: list[int], steps: list[Steps]) -> None:
        self.ports, self.steps, self.i = ports, steps, 0

    def next(self) -> tuple[int, bytes]:
        self.i += 1
        k = self.i % len(self.ports)
        return k, self.steps[k].next()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def open_loop(ports: list[int], make: Any, rate: int, seconds: float) -> dict[str, Any]:
    """``make()`` gives (replica index, request); each replica has its own keep-alive connections."""
    loop = asyncio.get_running_loop()
    idle: list[asyncio.Queue[Connection]] = [asyncio.Queue() for _ in ports]
    for k, port in enumerate(ports):
        for _ in range(CONNECTIONS):
            idle[k].put_nowait(await Connection.open(port))
    latency: list[float] = []
    scheduled: list[float] = []
    errors = 0

    async def one(due: float, k: int, raw: bytes) -> None:
        nonlocal errors
        conn = await idle[k].get()
        sent = time.perf_counter()
        try:
            status, _ = await asyncio.wait_for(conn.request(raw), TIMEOUT)
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            errors += 1
            conn.close()
            idle[k].put_nowait(await Connection.open(ports[k]))
            return
        done = time.perf_counter()
        idle[k].put_nowait(conn)
        if status != 200:
            errors += 1
        latency.append(done - sent)
        scheduled.append(done - due)

    count = int(rate * seconds)
    start_loop = loop.time() + 0.05
    start_clock = time.perf_counter() + 0.05
    tasks = []
    for i in range(count):
        offset = i / rate
        delay = start_loop + offset - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(start_clock + offset, *make())))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start_clock
    for queue in idle:
        while not queue.empty():
            queue.get_nowait().close()
    return {"rate": rate, "requests": count, "achieved_rps": round(len(latency) / elapsed, 1), "errors": errors,
            "p50_ms": percentile(latency, 0.50) * 1e3, "p99_ms": percentile(latency, 0.99) * 1e3,
            "p99_sched_ms": percentile(scheduled, 0.99) * 1e3, "max_ms": max(latency, default=float("nan")) * 1e3}


async def closed_loop(ports: list[int], make: Any, seconds: float) -> dict[str, Any]:
    """``CONNECTIONS`` connections in all, spread over the replicas; each sends its next request when
    the last is answered (``make(k)`` gives a request for replica ``k``)."""
    conns = [(i % len(ports), await Connection.open(ports[i % len(ports)])) for i in range(CONNECTIONS)]
    latency: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def run(k: int, conn: Connection) -> None:
        nonlocal errors
        while time.perf_counter() < stop:
            sent = time.perf_counter()
            status, _ = await asyncio.wait_for(conn.request(make(k)), TIMEOUT)
            latency.append(time.perf_counter() - sent)
            errors += status != 200

    started = time.perf_counter()
    await asyncio.gather(*(run(k, c) for k, c in conns))
    elapsed = time.perf_counter() - started
    for _, conn in conns:
        conn.close()
    return {"requests": len(latency), "rps": round(len(latency) / elapsed, 1), "errors": errors,
            "p50_ms": percentile(latency, 0.5) * 1e3, "p99_ms": percentile(latency, 0.99) * 1e3}


async def measure(ports: list[int], seconds: float, *, noop_too: bool = True) -> dict[str, Any]:
    steps: list[Steps] = []
    noop = post("/noop", orjson.dumps({"state": kitchen(0)}))
    for port in ports:
        conn = await Connection.open(port)
        sessions = []
        for _ in range(max(1, SESSIONS // len(ports))):
            status, body = await conn.request(post("/v1/sessions", b"{}"))
            if status != 201:
                raise SystemExit(f"cannot create a session: HTTP {status} {body[:200]!r}")
            sessions.append(orjson.loads(body)["id"])
        steps.append(Steps(sessions))
        for _ in range(300):  # warm-up: memo, caches, connections
            await conn.request(steps[-1].next())
            await conn.request(noop)
        conn.close()
    spread = Spread(ports, steps)
    results: dict[str, Any] = {"open_loop": [], "open_loop_noop": [], "peak": {}}
    for rate in RATES:  # the no-op at the same rate first: the floor this machine gives right now
        if noop_too:
            results["open_loop_noop"].append(await open_loop(ports[:1], lambda: (0, noop), rate, seconds))
        results["open_loop"].append(await open_loop(ports, spread.next, rate, seconds))
    if noop_too:
        results["peak"]["noop"] = await closed_loop(ports[:1], lambda k: noop, seconds)
    results["peak"]["observe"] = await closed_loop(ports, lambda k: steps[k].next(), seconds)
    return results


async def round_trips(sidecar: int, echo: int, count: int = ROUND_TRIPS) -> dict[str, Any]:
    """One request at a time on one connection each: ``observe`` beside the bare echo, in alternating blocks."""
    conn = await Connection.open(sidecar)
    status, body = await conn.request(post("/v1/sessions", b"{}"))
    if status != 201:
        raise SystemExit(f"cannot create a session: HTTP {status} {body[:200]!r}")
    steps = Steps([orjson.loads(body)["id"]])
    bare = await Connection.open(echo)
    echoed = [post("/echo", orjson.dumps({"state": kitchen(i), "action": "step"})) for i in range(256)]
    times: dict[str, list[float]] = {"observe": [], "echo": []}
    for block in range(-2, count // 100):  # two blocks each of warm-up, not counted
        for name, target, request in (("echo", bare, lambda i: echoed[i % 256]), ("observe", conn, lambda i: steps.next())):
            for i in range(100):
                start = time.perf_counter()
                status, _ = await target.request(request(i))
                if status != 200:
                    raise SystemExit(f"{name}: HTTP {status}")
                if block >= 0:
                    times[name].append(time.perf_counter() - start)
    conn.close()
    bare.close()
    return {name: {"p50_ms": percentile(sorted(v), 0.5) * 1e3, "p99_ms": percentile(sorted(v), 0.99) * 1e3}
            for name, v in times.items()}


async def round_trips_against(sidecars: dict[str, int], echo: int, count: int = ROUND_TRIPS) -> dict[str, Any]:
    """:func:`round_trips` over several sidecars (e.g. this checkout's and another's) and the echo, in
    alternating blocks of 100: a change's step cost beside its baseline's, on the same minutes' machine."""
    targets: list[tuple[str, Connection, Any]] = []
    for name, port in sidecars.items():
        conn = await Connection.open(port)
        status, body = await conn.request(post("/v1/sessions", b"{}"))
        if status != 201:
            raise SystemExit(f"{name}: cannot create a session: HTTP {status} {body[:200]!r}")
        targets.append((name, conn, Steps([orjson.loads(body)["id"]]).next))
    echoed = [post("/echo", orjson.dumps({"state": kitchen(i), "action": "step"})) for i in range(256)]
    ring = iter(range(1 << 62))
    targets.append(("echo", await Connection.open(echo), lambda: echoed[next(ring) % 256]))
    times: dict[str, list[float]] = {name: [] for name, _, _ in targets}
    for block in range(-2, count // 100):  # two blocks each of warm-up, not counted
        for name, conn, request in targets:
            for _ in range(100):
                raw = request()
                start = time.perf_counter()
                status, _ = await conn.request(raw)
                if status != 200:
                    raise SystemExit(f"{name}: HTTP {status}")
                if block >= 0:
                    times[name].append(time.perf_counter() - start)
    for _, conn, _ in targets:
        conn.close()
    return {name: {"p50_ms": percentile(sorted(v), 0.5) * 1e3, "p99_ms": percentile(sorted(v), 0.99) * 1e3}
            for name, v in times.items()}


def compare_checkouts(before: Path, db_dir: str) -> dict[str, Any]:
    """Round trips only: this checkout's sidecar, ``before``'s (its own ``forewarn`` package on the
    path) and the bare echo, each in a child process, alternating; printed with the ratios."""
    roots = {"after": C.ROOT, "before": before.resolve()}
    ports = {name: free_port() for name in roots}
    processes = [subprocess.Popen([sys.executable, __file__, "_serve", str(ports[name]),
                                   str(Path(db_dir) / f"{name}.db"), "normal", str(root)],
                                  env={**os.environ, "PYTHONPATH": str(root), "FOREWARN_BENCH_SAY_ROOT": "1"})
                 for name, root in roots.items()]
    echo_port = free_port()
    processes.append(subprocess.Popen([sys.executable, __file__, "_echo", str(echo_port)],
                                      env={**os.environ, "PYTHONPATH": str(C.ROOT)}))
    try:
        for port, process in zip([*ports.values(), echo_port], processes, strict=True):
            wait_ready(port, process)
        trip = asyncio.run(round_trips_against(ports, echo_port))
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
    machine = C.machine()
    print(f"one step's round trip, one request at a time ({ROUND_TRIPS} each, alternating blocks of 100); "
          f"machine: {machine['cpus']} cpus, load average {machine['loadavg']}")
    echo = trip["echo"]["p50_ms"]
    rows = [[name, str(roots.get(name, "bare FastAPI")), t["p50_ms"], t["p99_ms"], f"{t['p50_ms'] / echo:.2f}x"]
            for name, t in trip.items()]
    print(C.table(["sidecar", "checkout", "p50 ms", "p99 ms", "p50 / echo"], rows, title="observe beside the echo"))
    print(f"target observe p50 <= {TARGET_ECHO_RATIO}x the echo's: after "
          f"{C.verdict(trip['after']['p50_ms'] / echo <= TARGET_ECHO_RATIO)}")
    return trip


def server_metrics(port: int) -> dict[str, float]:
    import httpx

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).text
    values: dict[str, float] = {}
    for line in text.splitlines():
        for name in ('forewarn_step_seconds_sum{op="observe"}', 'forewarn_step_seconds_count{op="observe"}',
                     "forewarn_commit_wait_seconds_sum", "forewarn_commit_wait_seconds_count"):
            if line.startswith(name + " "):
                values[name] = float(line.split()[-1])
    return values


def wait_ready(port: int, process: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if sock.recv(32).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit("the server was not ready in time")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_servers(db: str, synchronous: Literal["normal", "full"], count: int, seconds: float, noop_too: bool
                ) -> tuple[dict[str, Any], dict[str, float]]:
    """Start ``count`` servers on ``db``, measure, stop them; results and summed server metrics."""
    ports = [free_port() for _ in range(count)]
    processes = [subprocess.Popen([sys.executable, __file__, "_serve", str(port), db, synchronous],
                                  env={**os.environ, "PYTHONPATH": str(C.ROOT)}) for port in ports]
    try:
        for port, process in zip(ports, processes):
            wait_ready(port, process)
        results = asyncio.run(measure(ports, seconds, noop_too=noop_too))
        if noop_too:  # the single-process run: a step's round trip beside a bare FastAPI echo
            echo_port = free_port()
            echo = subprocess.Popen([sys.executable, __file__, "_echo", str(echo_port)],
                                    env={**os.environ, "PYTHONPATH": str(C.ROOT)})
            try:
                wait_ready(echo_port, echo)
                results["round_trip"] = asyncio.run(round_trips(ports[0], echo_port))
            finally:
                echo.terminate()
                echo.wait(30)
        metrics: dict[str, float] = {}
        for port in ports:
            for name, value in server_metrics(port).items():
                metrics[name] = metrics.get(name, 0.0) + value
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
    return results, metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase")
    parser.add_argument("--quick", action="store_true", help="2-second phases")
    parser.add_argument("--synchronous", choices=["normal", "full"], default="normal")
    parser.add_argument("--replicas", type=int, default=3, help="replicas sharing PostgreSQL (with --db postgresql)")
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite",
                        help="postgresql: also measure --replicas replicas on a throw-away local cluster, "
                             "beside one SQLite process in the same run")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--before", type=Path, help="only the round trips: this checkout's sidecar beside "
                        "this other checkout's (e.g. a worktree of main) and the echo, in one run")
    args = parser.parse_args()
    seconds = 2.0 if args.quick else args.seconds
    if args.before is not None:
        if not (args.before / "forewarn" / "server").is_dir():
            raise SystemExit(f"--before {args.before}: not a checkout (no forewarn/server in it)")
        with tempfile.TemporaryDirectory() as tmp:
            C.write_json(args.json, {"round_trip": compare_checkouts(args.before, tmp)})
        return

    with tempfile.TemporaryDirectory() as tmp:
        results, metrics = run_servers(str(Path(tmp) / "bench.db"), args.synchronous, 1, seconds, True)
    db_note = f"SQLite WAL, synchronous={args.synchronous}"
    report(results, metrics, seconds, db_note)
    figures: dict[str, Any] = {"seconds": seconds, "synchronous": args.synchronous, "results": results}
    if args.db == "postgresql":
        from _postgres import cluster, fresh_database  # a throw-away cluster, as the tests start it

        with cluster() as url:
            pg_results, pg_metrics = run_servers(fresh_database(url, "bench"), args.synchronous, args.replicas,
                                                 seconds, False)
        compare(results, pg_results, pg_metrics, args.replicas, db_note)
        figures["postgresql"] = {"replicas": args.replicas, "results": pg_results}
    C.write_json(args.json, figures)


def server_times(metrics: dict[str, float]) -> tuple[float, float]:
    step = metrics.get('forewarn_step_seconds_sum{op="observe"}', 0) / max(
        1.0, metrics.get('forewarn_step_seconds_count{op="observe"}', 1))
    commit = metrics.get("forewarn_commit_wait_seconds_sum", 0) / max(
        1.0, metrics.get("forewarn_commit_wait_seconds_count", 1))
    return step, commit


def report(results: dict[str, Any], metrics: dict[str, float], seconds: float, db_note: str) -> None:
    machine = C.machine()
    print(f"forewarn sidecar, HTTP load from a separate process on loopback ({db_note}); "
          f"{CONNECTIONS} connections, {SESSIONS} sessions, {seconds:g} s per phase")
    print(f"machine: {machine['cpus']} cpus, load average {machine['loadavg']}, python {machine['python']}\n")
    rows = [[name, r["rate"], r["achieved_rps"], r["errors"], r["p50_ms"], r["p99_ms"], r["p99_sched_ms"],
             r["max_ms"]]
            for o, n in zip(results["open_loop"], results["open_loop_noop"]) for name, r in (("noop", n), ("observe", o))]
    print(C.table(["endpoint", "req/s", "achieved", "errors", "p50 ms", "p99 ms", "p99 sched ms", "max ms"], rows,
                  title="open loop"))
    peak = results["peak"]
    ratio = peak["observe"]["rps"] / peak["noop"]["rps"]
    print()
    print(C.table(["endpoint", "req/s", "errors", "p50 ms", "p99 ms"],
                  [[name, p["rps"], p["errors"], p["p50_ms"], p["p99_ms"]] for name, p in peak.items()],
                  title=f"peak (closed loop, {CONNECTIONS} connections)"))
    step, commit = server_times(metrics)
    print(f"\nserver side, mean over all observes: step {step * 1e3:.3f} ms, of which waiting for the commit "
          f"{commit * 1e3:.3f} ms")
    at_500 = next(r for r in results["open_loop"] if r["rate"] == 500)
    print(f"\ntarget p99 <= {TARGET_P99_MS} ms at 500 req/s: p99 {at_500['p99_ms']:.2f} ms "
          f"(with scheduling {at_500['p99_sched_ms']:.2f} ms) -> {C.verdict(at_500['p99_ms'] <= TARGET_P99_MS)}")
    print(f"target peak observe >= {TARGET_RATIO:.0%} of no-op: {ratio:.0%} -> {C.verdict(ratio >= TARGET_RATIO)}")
    trip = results.get("round_trip")
    if trip:
        times = trip["observe"]["p50_ms"] / trip["echo"]["p50_ms"]
        print(f"\none step's round trip, one request at a time ({ROUND_TRIPS} each, alternating blocks): observe "
              f"p50 {trip['observe']['p50_ms']:.3f} ms (p99 {trip['observe']['p99_ms']:.3f}) beside a bare FastAPI "
              f"echo p50 {trip['echo']['p50_ms']:.3f} ms (p99 {trip['echo']['p99_ms']:.3f}): {times:.2f}x")
        print(f"target observe p50 <= {TARGET_ECHO_RATIO}x the echo's: {C.verdict(times <= TARGET_ECHO_RATIO)}")


def compare(sqlite: dict[str, Any], pg: dict[str, Any], metrics: dict[str, float], replicas: int,
            db_note: str) -> None:
    """The replicas on PostgreSQL beside the one SQLite process measured just before."""
    print(f"\n{replicas} replicas sharing PostgreSQL (synchronous_commit=on, fsync on: durable commits), "
          f"{CONNECTIONS} connections per replica, sessions bound to replicas as a load balancer with "
          f"session affinity would; beside the single process ({db_note}) above\n")
    rows = []
    for one, many in zip(sqlite["open_loop"], pg["open_loop"]):
        rows.append([f"{one['rate']} req/s", "1 x SQLite", one["achieved_rps"], one["errors"], one["p50_ms"],
                     one["p99_ms"], one["p99_sched_ms"]])
        rows.append(["", f"{replicas} x PostgreSQL", many["achieved_rps"], many["errors"], many["p50_ms"],
                     many["p99_ms"], many["p99_sched_ms"]])
    print(C.table(["load", "servers", "achieved", "errors", "p50 ms", "p99 ms", "p99 sched ms"], rows,
                  title="open loop, observe"))
    print()
    print(C.table(["servers", "req/s", "errors", "p50 ms", "p99 ms"],
                  [["1 x SQLite", sqlite["peak"]["observe"]["rps"], sqlite["peak"]["observe"]["errors"],
                    sqlite["peak"]["observe"]["p50_ms"], sqlite["peak"]["observe"]["p99_ms"]],
                   [f"{replicas} x PostgreSQL", pg["peak"]["observe"]["rps"], pg["peak"]["observe"]["errors"],
                    pg["peak"]["observe"]["p50_ms"], pg["peak"]["observe"]["p99_ms"]]],
                  title="peak observe (closed loop)"))
    step, commit = server_times(metrics)
    print(f"\nreplicas' side, mean over all observes: step {step * 1e3:.3f} ms, of which waiting for the commit "
          f"{commit * 1e3:.3f} ms")
    at_500 = next(r for r in pg["open_loop"] if r["rate"] == 500)
    print(f"\ntarget p99 <= {TARGET_PG_P99_MS} ms at 500 req/s on {replicas} replicas with durable commits: "
          f"p99 {at_500['p99_ms']:.2f} ms -> {C.verdict(at_500['p99_ms'] <= TARGET_PG_P99_MS)}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "_echo":
        serve_echo(int(sys.argv[2]))
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "_serve":
        if len(sys.argv) == 6:  # another checkout's package first (_common put this one's on the path)
            sys.path.insert(0, sys.argv[5])
        serve(int(sys.argv[2]), sys.argv[3], "full" if sys.argv[4] == "full" else "normal")
    else:
        main()
