"""Latency ``forewarn mcp`` adds per tool call, against the same client talking to the upstream directly.

What it does
------------
1. Learns the MCP domain's model from 600 planned sessions (``domains.mcp.synthetic_runs``).
2. *stdio*: opens three SDK ``ClientSession`` s over stdio, one to ``mcp-server-time`` (PyPI) directly,
   one to ``forewarn mcp --relay lean --model ... -- mcp-server-time`` and one with ``--relay sdk`` (real
   processes, the path a desktop host takes), and times ``get_current_time`` on each, interleaved (direct,
   lean, sdk, direct, ...),
   ``--calls`` times. Every proxied call goes through the whole path: extract, preview, forward,
   extract, commit.
3. *streamable HTTP*: the same with mcp-server-time's server served over streamable HTTP in its own
   process, and ``forewarn mcp --upstream-url ... --http`` in front of it, once with each relay
   (``--relay lean``, ``--relay sdk``); the client speaks HTTP to all three.
4. *start*: seconds from launching a process to its answer to ``initialize``, ``--starts`` times, interleaved:
   ``mcp-server-time`` alone, and ``forewarn mcp --model ... -- mcp-server-time`` (the lean stdio relay, audit
   off: a desktop host starts every configured server when it opens). Target (issue 43): the proxy answers
   within 1.5 s on a 2-core machine.
5. *saturation*: decisions per second — the decision path alone (``judge`` on a growing session, in
   this process); whole calls through an in-process SDK proxy with ``--sessions`` concurrent sessions; and
   the lean relays as hosts run them, each session calling back to back for ``--seconds``: ``--sessions``
   concurrent sessions to one ``--relay lean --http`` proxy, and ``--stdio-sessions`` stdio sessions (a stdio
   proxy serves one client: each has its own proxy and upstream), each beside as many sessions to the
   upstream directly. Every call through a proxy is one judged decision; p50 and p99 are the calls'
   latencies at saturation, and the HTTP proxy's CPU per call says what one core of it sustains.

6. *gate* (issue 43): the lean stdio relay with the gateway's per-call work on — ``--redact secrets`` (every
   result searched for secrets) and the tool descriptions judged (the default) — beside the same relay with
   both off (``--descriptions off``) and the direct path, interleaved; and, in this process, what judging a
   ``tools/list`` answer and redacting one result cost.

7. *peers* (issue 43): Lasso's ``mcp-gateway`` 1.2.1 and ``mcp-proxy`` 0.13 from their own venvs under
   ``bench/.peers/`` (``--install-peers`` creates them; ``bench/_mcp_peers.py``), interleaved with Forewarn on
   the same ``mcp-server-time``: added p50 per call over stdio (Forewarn's lean relay, Lasso's gateway) and over
   streamable HTTP in front of the stdio server (Forewarn's SDK relay, mcp-proxy; the server's own HTTP as the
   base), and start-up of each. A peer not installed is skipped with a line saying how to install it.

Target: added p50 ≤ 1 ms over stdio, ≤ 2 ms over streamable HTTP. Nothing is asserted; figures are
printed beside their targets.

Run: ``python bench/mcp_overhead.py [--calls N] [--sessions S] [--stdio-sessions S] [--seconds T]
[--starts N] [--only stdio|http|start|saturation|gate|peers] [--install-peers] [--repeat N] [--json FILE]``;
the load average before and after is printed beside the figures (on a busy machine every process
hop waits for a CPU, and the direct path's own figure shows how much).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from anywhere
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import orjson  # noqa: E402
from _mcp_peers import (  # noqa: E402
    INSTALL,
    bench_peers,
    http_session,
    install_peers,
    peer_starts,
    stdio_session,
)
from mcp import ClientSession  # noqa: E402

from forewarn.domains.mcp import PROXY_CONFIG, SPEC_PATH, synthetic_runs  # noqa: E402
from forewarn.guard import Guard, learn_model, load_spec  # noqa: E402
from forewarn.guard.mcp import GuardedProxy, UpstreamSpec, in_process, load_config  # noqa: E402
from forewarn.guard.mcp.judge import GuardedSession, judge  # noqa: E402

BIN = Path(sys.executable).parent
TIME_SERVER = str(BIN / "mcp-server-time")
ARGS = {"timezone": "UTC"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 180
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on port {port}") from None
            time.sleep(0.1)


_INITIALIZE = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}) + b"\n"


def seconds_to_initialize(command: list[str]) -> float:
    """Seconds from launching ``command`` to its answer to ``initialize`` (read raw from its standard output)."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(_INITIALIZE)
        proc.stdin.flush()
        answer = orjson.loads(proc.stdout.readline())
        took = time.perf_counter() - started
        assert answer.get("id") == 1 and "result" in answer, answer
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        proc.stdout.close()
    return took


def bench_start(model_path: Path, starts: int) -> dict[str, list[float]]:
    """Start-up of the server alone and of the proxy in front of it, interleaved."""
    direct = [TIME_SERVER]
    proxy = [sys.executable, "-m", "forewarn", "mcp", "--model", str(model_path), "--config", str(PROXY_CONFIG),
             "--audit", "off", "--", TIME_SERVER]
    seconds_to_initialize(direct)  # (the first launch reads the files from disk: both read them warm)
    times: dict[str, list[float]] = {"direct": [], "proxy": []}
    for _ in range(starts):
        times["direct"].append(seconds_to_initialize(direct))
        times["proxy"].append(seconds_to_initialize(proxy))
    return times


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) a process has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pid(word: str, without: str | None = None) -> int:
    """This process's child whose command line contains ``word`` and not ``without`` (the stdio client does not
    say its pid)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and word in cmdline and (without is None or without not in cmdline):
            return int(entry.name)
    raise RuntimeError(f"no child process runs {word!r}")


async def interleaved(sessions: list[ClientSession], calls: int, pids: dict[str, int]
                      ) -> tuple[list[list[float]], dict[str, float]]:
    """Each session's latencies (ms; the calls interleaved: one on each, in turn), and the CPU seconds each
    process in ``pids`` used meanwhile."""
    times: list[list[float]] = [[] for _ in sessions]
    for _ in range(20):  # warm every path
        for session in sessions:
            await session.call_tool("get_current_time", ARGS)
    cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
    for _ in range(calls):
        for index, session in enumerate(sessions):
            start = time.perf_counter_ns()
            result = await session.call_tool("get_current_time", ARGS)
            times[index].append((time.perf_counter_ns() - start) / 1e6)
            assert not result.is_error, result
    return times, {name: cpu_seconds(pid) - cpu[name] for name, pid in pids.items()}


def proxy_loop() -> str:
    """The event loop ``forewarn mcp`` runs on here: uvloop where the mcp extra installed it."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio's own (uvloop is not installed)"
    return f"uvloop {importlib.metadata.version('uvloop')}"


def q(values: list[float], percent: int) -> float:
    return statistics.quantiles(values, n=100)[percent - 1]


def summary(direct: list[float], proxied: list[float], cpu: dict[str, float], upstream_calls: int
            ) -> dict[str, float]:
    """Latency figures, and CPU per call: the proxy's own process against the upstream server's (which,
    over HTTP, serves both paths: ``upstream_calls`` calls)."""
    calls = len(direct)
    return {"proxy_cpu_ms_per_call": cpu["proxy"] / calls * 1e3,
            "upstream_cpu_ms_per_call": cpu["upstream"] / upstream_calls * 1e3,
            "direct_p50_ms": statistics.median(direct), "proxied_p50_ms": statistics.median(proxied),
            "added_p50_ms": statistics.median(proxied) - statistics.median(direct),
            "direct_p95_ms": q(direct, 95), "proxied_p95_ms": q(proxied, 95),
            "added_median_of_pairs_ms": statistics.median(p - d for d, p in zip(direct, proxied))}


def proxy_args(model: Path) -> list[str]:
    return ["-m", "forewarn", "mcp", "--model", str(model), "--config", str(PROXY_CONFIG)]


async def bench_stdio(model: Path, calls: int) -> dict[str, dict[str, float]]:
    """The direct path, and the proxy with each relay (``--relay lean``, ``--relay sdk``), interleaved."""
    upstream = ["--local-timezone", "UTC"]

    def through(relay: str) -> Any:
        return stdio_session(sys.executable, [*proxy_args(model), "--relay", relay, "--", TIME_SERVER, *upstream])

    async with stdio_session(TIME_SERVER, upstream) as direct, through("lean") as lean, through("sdk") as sdk:
        # (the proxies' command lines name the upstream too)
        pids = {"upstream": child_pid("mcp-server-time", without="forewarn"), "lean": child_pid("--relay lean"),
                "sdk": child_pid("--relay sdk")}
        (direct_ms, lean_ms, sdk_ms), cpu = await interleaved([direct, lean, sdk], calls, pids)
        return {relay: summary(direct_ms, ms, {"proxy": cpu[relay], "upstream": cpu["upstream"]}, calls)
                for relay, ms in (("lean", lean_ms), ("sdk", sdk_ms))}


async def bench_http(model: Path, calls: int) -> dict[str, dict[str, float]]:
    """The direct path, and a proxy with each relay (``--relay lean``, ``--relay sdk``) in front of the same
    upstream server, interleaved."""
    up_port, ports = free_port(), {"lean": free_port(), "sdk": free_port()}
    upstream = subprocess.Popen([sys.executable, "-c", "from mcp_server_time.server import create_server; "
                                 f"create_server('UTC').run('streamable-http', host='127.0.0.1', port={up_port})"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proxies: dict[str, subprocess.Popen[bytes]] = {}
    try:
        wait_for(up_port, upstream)
        url = f"http://127.0.0.1:{up_port}/mcp"
        for relay, port in ports.items():
            proxies[relay] = subprocess.Popen([sys.executable, *proxy_args(model), "--relay", relay, "--upstream-url",
                                               url, "--http", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL)
        for relay, port in ports.items():
            wait_for(port, proxies[relay])
        async with http_session(url) as direct, http_session(f"http://127.0.0.1:{ports['lean']}/mcp") as lean, \
                http_session(f"http://127.0.0.1:{ports['sdk']}/mcp") as sdk:
            pids = {"upstream": upstream.pid, **{relay: proc.pid for relay, proc in proxies.items()}}
            (direct_ms, lean_ms, sdk_ms), cpu = await interleaved([direct, lean, sdk], calls, pids)
            return {relay: summary(direct_ms, ms, {"proxy": cpu[relay], "upstream": cpu["upstream"]}, 3 * calls)
                    for relay, ms in (("lean", lean_ms), ("sdk", sdk_ms))}
    finally:
        for proc in (*proxies.values(), upstream):
            proc.terminate()
            proc.wait(timeout=30)


def decisions_per_second(guard: Guard, seconds: float = 2.0) -> float:
    """The decision path alone: judge a call on a session that grows (extract the state, preview it)."""
    proxy = GuardedProxy(guard, load_config(PROXY_CONFIG, upstreams=[UpstreamSpec("time", command=TIME_SERVER)]))
    from forewarn.guard.toolcalls import ToolStep

    session = guard.session()
    guarded = GuardedSession("bench", session, proxy.extractor)
    session.observe(guarded.state)
    count, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        judge(guarded, "get_current_time", ARGS, unknown_tools=proxy.config.unknown_tools,
              fallback=proxy._fallback)
        count += 1
        if count % 8 == 0:  # the session goes on: every 8th call runs
            guarded.ran(ToolStep("get_current_time", ARGS, result="{}"))
    return count / seconds


async def calls_per_second(guard: Guard, sessions: int, seconds: float = 5.0) -> float:
    """Whole calls through an in-process proxy (stdio upstream), ``sessions`` clients at once."""
    proxy = GuardedProxy(guard, load_config(PROXY_CONFIG, upstreams=[
        UpstreamSpec("time", command=TIME_SERVER, args=("--local-timezone", "UTC"))]))
    done = 0
    async with proxy.running() as server:
        async def client() -> None:
            nonlocal done
            async with in_process(server) as session:
                deadline = time.perf_counter() + seconds
                while time.perf_counter() < deadline:
                    await session.call_tool("get_current_time", ARGS)
                    done += 1
        async with anyio.create_task_group() as tasks:
            for _ in range(sessions):
                tasks.start_soon(client)
    return done / seconds


async def saturate(targets: list[Any], seconds: float) -> dict[str, float]:
    """Calls per second and latency (ms) with one client session per target, calling back to back, all at once,
    for ``seconds`` (a target: a URL, or a (command, args) pair served over stdio)."""
    times: list[float] = []
    ready, go = [0], anyio.Event()
    deadline = [0.0]

    async def client(target: Any) -> None:
        opened = http_session(target) if isinstance(target, str) else stdio_session(*target)
        async with opened as session:
            for _ in range(5):  # warm the path
                await session.call_tool("get_current_time", ARGS)
            ready[0] += 1
            await go.wait()
            while time.perf_counter() < deadline[0]:
                start = time.perf_counter_ns()
                result = await session.call_tool("get_current_time", ARGS)
                times.append((time.perf_counter_ns() - start) / 1e6)
                assert not result.is_error, result

    async with anyio.create_task_group() as tasks:
        for target in targets:
            tasks.start_soon(client, target)
        while ready[0] < len(targets):  # every session connected and warm: then all start together
            await anyio.sleep(0.05)
        deadline[0] = time.perf_counter() + seconds
        go.set()
    return {"calls_per_s": len(times) / seconds, "p50_ms": statistics.median(times), "p99_ms": q(times, 99)}


async def saturation_http(model: Path, sessions: int, seconds: float) -> dict[str, dict[str, float]]:
    """``sessions`` concurrent client sessions to one ``--relay lean --http`` proxy, and to its upstream directly."""
    up_port, port = free_port(), free_port()
    upstream = subprocess.Popen([sys.executable, "-c", "from mcp_server_time.server import create_server; "
                                 f"create_server('UTC').run('streamable-http', host='127.0.0.1', port={up_port})"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proxy: subprocess.Popen[bytes] | None = None
    try:
        wait_for(up_port, upstream)
        url = f"http://127.0.0.1:{up_port}/mcp"
        proxy = subprocess.Popen([sys.executable, *proxy_args(model), "--relay", "lean", "--upstream-url", url,
                                  "--http", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(port, proxy)
        direct = await saturate([url] * sessions, seconds)
        before = cpu_seconds(proxy.pid)
        proxied = await saturate([f"http://127.0.0.1:{port}/mcp"] * sessions, seconds)
        proxied["proxy_cpu_ms_per_call"] = (cpu_seconds(proxy.pid) - before) / (proxied["calls_per_s"] * seconds) * 1e3
        return {"direct": direct, "lean": proxied}
    finally:
        for proc in (proxy, upstream):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=30)


async def saturation_stdio(model: Path, sessions: int, seconds: float) -> dict[str, dict[str, float]]:
    """``sessions`` stdio sessions at once, each its own ``--relay lean`` proxy (a stdio proxy serves one client,
    as a host launches one per server), and as many direct sessions to the upstream."""
    upstream = ["--local-timezone", "UTC"]
    direct = await saturate([(TIME_SERVER, upstream)] * sessions, seconds)
    through = (sys.executable, [*proxy_args(model), "--relay", "lean", "--", TIME_SERVER, *upstream])
    return {"direct": direct, "lean": await saturate([through] * sessions, seconds)}


async def bench_gate(model: Path, calls: int) -> dict[str, dict[str, float]]:
    """The direct path, the lean stdio relay with the gateway's checks off, and with secrets redacted from every
    result (descriptions judged too, at each tools/list), interleaved."""
    upstream = ["--local-timezone", "UTC"]

    def through(*flags: str) -> Any:
        return stdio_session(sys.executable, [*proxy_args(model), "--relay", "lean", *flags, "--", TIME_SERVER,
                                              *upstream])

    async with stdio_session(TIME_SERVER, upstream) as direct, through("--descriptions", "off") as plain, \
            through("--redact", "secrets") as gated:
        pids = {"upstream": child_pid("mcp-server-time", without="forewarn"), "plain": child_pid("--descriptions off"),
                "gated": child_pid("--redact secrets")}
        (direct_ms, plain_ms, gated_ms), cpu = await interleaved([direct, plain, gated], calls, pids)
        out = {name: summary(direct_ms, ms, {"proxy": cpu[name], "upstream": cpu["upstream"]}, calls)
               for name, ms in (("plain", plain_ms), ("gated", gated_ms))}
        out["gated"]["over_plain_median_of_pairs_ms"] = statistics.median(g - p for p, g in zip(plain_ms, gated_ms))
        return out


def gate_in_process(rounds: int = 2000) -> dict[str, float]:
    """Microseconds to judge a 12-tool ``tools/list`` answer (descriptions of about 300 characters) and to
    redact a result of 1 KB and of 16 KB of text (no secret in it: the common case)."""
    from forewarn.guard.mcp.descriptions import DescriptionPolicy, inspect_tools_list
    from forewarn.guard.mcp.redact import RedactPolicy, redact_result

    words = "Shows the working tree status of the repository, with staged and unstaged changes listed by path. "
    tools = {"tools": [{"name": f"tool_{i}", "description": words * 3, "inputSchema": {
        "type": "object", "properties": {"repo_path": {"type": "string", "description": "The repository."}}}}
        for i in range(12)]}
    policy, secrets = DescriptionPolicy(), RedactPolicy.from_config("secrets")
    text = "On branch main, modified: src/app.py; 3 files changed, 41 insertions(+), 7 deletions(-). "
    out: dict[str, float] = {}
    for label, run in (("tools_list_us", lambda: inspect_tools_list(tools, policy, server="s")),
                       ("redact_1k_us", lambda: redact_result({"content": [{"type": "text", "text": text * 11}]},
                                                              secrets)),
                       ("redact_16k_us", lambda: redact_result({"content": [{"type": "text", "text": text * 180}]},
                                                               secrets))):
        run()
        start = time.perf_counter_ns()
        for _ in range(rounds):
            run()
        out[label] = (time.perf_counter_ns() - start) / rounds / 1e3
    return out


def print_peers(peers: dict[str, Any], starts: dict[str, list[float]], calls: int, launches: int) -> None:
    """The peers' table (docs/mcp-gateway.md shows one): added p50 per call and start-up, median of the launches."""
    for line in peers["skipped"]:
        print(f"peers: {line}")
    print(f"peers, {calls} calls each interleaved, start-up median of {launches} launches:")
    print("| system | p50 per call | added p50 per call | start-up |\n|---|---|---|---|")
    names = {"direct": "mcp-server-time directly", "forewarn": "Forewarn `mcp`, lean relay",
             "mcp-gateway": "Lasso `mcp-gateway`"}
    for label, row in peers["stdio"].items():
        added = "—" if label == "direct" else f"{row['added_p50_ms']:+.2f} ms ({row['ratio']:.2f}×)"
        print(f"| stdio: {names[label]} | {row['p50_ms']:.2f} ms | {added} | {statistics.median(starts[label]):.2f} s |")
    names = {"direct": "the server's own streamable HTTP", "forewarn": "Forewarn `mcp --http`, SDK relay, before "
             "the stdio server", "mcp-proxy": "`mcp-proxy`, before the stdio server"}
    for label, row in peers["http"].items():
        added = "—" if label == "direct" else f"{row['added_p50_ms']:+.2f} ms"
        start = {"forewarn": "forewarn http", "mcp-proxy": "mcp-proxy"}.get(label)
        took = "—" if start is None else f"{statistics.median(starts[start]):.2f} s"
        print(f"| HTTP: {names[label]} | {row['p50_ms']:.2f} ms | {added} | {took} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--sessions", type=int, default=8, help="concurrent sessions at saturation (HTTP, SDK)")
    parser.add_argument("--stdio-sessions", type=int, default=4,
                        help="concurrent stdio sessions at saturation (each its own proxy and upstream processes)")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each saturation run lasts")
    parser.add_argument("--starts", type=int, default=5, help="launches of each for the start-up figures")
    parser.add_argument("--only", choices=("stdio", "http", "start", "saturation", "gate", "peers"))
    parser.add_argument("--install-peers", action="store_true",
                        help=f"first create the peers' venvs under bench/.peers/ ({', '.join(INSTALL)}; from PyPI)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run the stdio and HTTP comparisons this many times (fresh processes each): each "
                             "run's added p50 and their median are printed")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    parts = {options.only} if options.only else {"stdio", "http", "start", "saturation", "gate", "peers"}
    if options.install_peers:
        install_peers()
    with tempfile.TemporaryDirectory() as tmp:
        traces, model_path = Path(tmp) / "runs.jsonl", Path(tmp) / "model.json"
        traces.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in synthetic_runs(600, seed=1)))
        model = learn_model([traces], load_spec(SPEC_PATH))
        model.save(model_path)
        guard = Guard(model)
        results: dict[str, Any] = {"calls": options.calls, "load_before": os.getloadavg()[0]}
        for part, bench in (("stdio", bench_stdio), ("http", bench_http)):
            if part in parts:
                runs = [anyio.run(bench, model_path, options.calls) for _ in range(max(options.repeat, 1))]
                results[part], results[f"{part}_repeats"] = runs[-1], runs
        if "gate" in parts:
            results["gate"] = anyio.run(bench_gate, model_path, options.calls)
            results["gate_in_process"] = gate_in_process()
        if "start" in parts:
            results["start_s"] = bench_start(model_path, options.starts)
        if "saturation" in parts:
            results["decisions_per_s"] = decisions_per_second(guard)
            results["proxied_calls_per_s"] = anyio.run(calls_per_second, guard, options.sessions)
            results["saturation_http"] = anyio.run(saturation_http, model_path, options.sessions, options.seconds)
            results["saturation_stdio"] = anyio.run(saturation_stdio, model_path, options.stdio_sessions,
                                                    options.seconds)
        if "peers" in parts:
            command = [sys.executable, *proxy_args(model_path)]
            results["peers"] = anyio.run(bench_peers, command, TIME_SERVER, options.calls, free_port, wait_for)
            results["peer_starts_s"] = peer_starts(command, TIME_SERVER, options.starts, seconds_to_initialize,
                                                   free_port)
        results["load_after"] = os.getloadavg()[0]
    print(f"load average (1 min): {results['load_before']:.2f} before, {results['load_after']:.2f} after, "
          f"on {os.cpu_count()} CPUs; the proxies' event loop: {proxy_loop()}")
    rows = [(f"stdio, --relay {relay}", 1.0, r) for relay, r in results.get("stdio", {}).items()]
    rows += [(f"http, --relay {relay}", 2.0, r) for relay, r in results.get("http", {}).items()]
    for label, target, r in rows:
        print(f"{label}:  direct p50 {r['direct_p50_ms']:.3f} ms  proxied p50 {r['proxied_p50_ms']:.3f} ms  "
              f"added p50 {r['added_p50_ms']:.3f} ms (target ≤ {target:g} ms)  "
              f"p95 {r['direct_p95_ms']:.3f} / {r['proxied_p95_ms']:.3f} ms  "
              f"(median of the paired differences {r['added_median_of_pairs_ms']:.3f} ms)")
        print(f"       CPU per call: the proxy's process {r['proxy_cpu_ms_per_call']:.3f} ms, the upstream "
              f"server's {r['upstream_cpu_ms_per_call']:.3f} ms")
    for transport, target in (("stdio", 1.0), ("http", 2.0)):
        repeats = results.get(f"{transport}_repeats", [])
        for relay in repeats[0] if len(repeats) > 1 else ():
            added = [r[relay]["added_p50_ms"] for r in repeats]
            print(f"{transport}, --relay {relay}, added p50 over {len(added)} runs: "
                  f"{', '.join(f'{a:.3f}' for a in added)} ms; median {statistics.median(added):.3f} ms "
                  f"(target ≤ {target:g} ms)")
    if "gate" in parts:
        plain, gated, micro = results["gate"]["plain"], results["gate"]["gated"], results["gate_in_process"]
        print(f"gate, stdio, --relay lean: direct p50 {plain['direct_p50_ms']:.3f} ms; checks off: added p50 "
              f"{plain['added_p50_ms']:.3f} ms (proxy CPU {plain['proxy_cpu_ms_per_call']:.3f} ms a call); --redact "
              f"secrets: added p50 {gated['added_p50_ms']:.3f} ms (proxy CPU {gated['proxy_cpu_ms_per_call']:.3f} ms "
              f"a call); redaction over the plain relay, median of the paired differences "
              f"{gated['over_plain_median_of_pairs_ms']:+.3f} ms")
        print(f"       in process: judging a 12-tool tools/list {micro['tools_list_us']:.0f} µs (once per list); "
              f"redacting a result of 1 KB {micro['redact_1k_us']:.0f} µs, of 16 KB {micro['redact_16k_us']:.0f} µs")
    if "start" in parts:
        start = results["start_s"]
        print(f"start-up to the answer to initialize, {options.starts} launches each, interleaved: mcp-server-time "
              f"alone median {statistics.median(start['direct']):.2f} s (min {min(start['direct']):.2f}), "
              f"forewarn mcp in front of it median {statistics.median(start['proxy']):.2f} s (min "
              f"{min(start['proxy']):.2f}) (target ≤ 1.5 s)")
    if "saturation" in parts:
        print(f"decision path alone: {results['decisions_per_s']:,.0f} decisions/s; whole calls through the "
              f"in-process SDK proxy ({options.sessions} sessions): {results['proxied_calls_per_s']:,.0f} calls/s")
        for transport, count in (("http", options.sessions), ("stdio", options.stdio_sessions)):
            direct, lean = results[f"saturation_{transport}"]["direct"], results[f"saturation_{transport}"]["lean"]
            cpu = (f"; the proxy's CPU {lean['proxy_cpu_ms_per_call']:.3f} ms a call"
                   if "proxy_cpu_ms_per_call" in lean else "")
            print(f"saturation, {transport}, --relay lean, {count} sessions at once: {lean['calls_per_s']:,.0f} "
                  f"decisions/s (p50 {lean['p50_ms']:.2f} ms, p99 {lean['p99_ms']:.2f} ms){cpu}; direct "
                  f"{direct['calls_per_s']:,.0f} calls/s (p50 {direct['p50_ms']:.2f} ms, p99 {direct['p99_ms']:.2f} ms)")
    if "peers" in parts:
        print_peers(results["peers"], results["peer_starts_s"], options.calls, options.starts)
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
