"""Overhead ForewarnMiddleware adds per agent step, against the same agent without it.

What it does
------------
1. Learns a model of the tool-using agent domain from generated runs
   (``domains.tools.generate_traces``, 500 runs) with the shipped spec.
2. Builds two ``create_agent`` agents over the same scripted chat model and the same
   trivial tools: one plain, one with ``ForewarnMiddleware``. A step is one model turn
   proposing one tool call plus that call; the script is a benign run of ``--steps``
   steps (files, shell, HTTP, e-mail inside the organisation) that the guard allows, so
   every step goes through the whole look-ahead (extract, preview) and commit (extract,
   observe) path, and nothing is held back.
3. Times, in one process and interleaved (plain, guarded, plain, ...), whole
   invocations with ``time.perf_counter_ns`` and the garbage collector off:

   a. *end to end*: per round, (guarded − plain) / steps: everything the middleware
      adds, LangGraph's cost of running the wrappers included, the model excluded (it
      is the same, and cheap, in both; the middleware adds no graph node);
   b. *in Forewarn's code*: time spent inside the middleware per step (its
      ``wrap_model_call`` and ``wrap_tool_call`` minus the model and the tool), in wall
      time and in CPU time of the thread running it (which leaves out waiting for the
      GIL while LangGraph's other threads run): the part Forewarn controls.

   p50 and p99 of the per-step times are printed too; the end-to-end overhead in
   process CPU time (steadier than wall time on a busy machine); and, from a third
   agent with a middleware whose two hooks do nothing, the part of it that is
   LangChain's (it wraps every ``wrap_*`` hook in a LangSmith ``traceable`` span).

4. *remote* (issue 13): a fourth agent guarded by ``ForewarnMiddleware(Client(url))``
   against a real ``forewarn serve`` started by the bench on 127.0.0.1 (its own process,
   SQLite, synchronous=normal): previews are local (the served model), each step is one
   committed ``observe`` over HTTP (the run's first one a batch that also commits the
   initial state), and each run creates its session in the background as it starts. Its
   overhead per step is reported beside the in-process one, in the same run, with the
   HTTP requests per run and their round trips by kind (``--no-remote`` to leave it out).

5. *async, concurrent* (issue 24): the same agents driven with ``ainvoke``, one conversation and then
   ``--concurrent`` (8) at once (``asyncio.gather``), beside the bare agent under the same load: in
   process, on the sidecar through ``ForewarnMiddleware(AsyncClient(url))`` (async all the way: the
   session is created and every step committed with awaited requests on the agent's loop) and, as the
   baseline the issue measured, through a synchronous ``Client`` (each commit in a worker thread).
   Printed: the wall time of a round per step, the overhead per step over the bare agent, and the
   ratio of a round's time to the bare agent's.

Target: under 0.5 ms per step in process, ≤ 2 ms remote (end to end, p50); async on the sidecar at most the
sync cost per step. Nothing is asserted.

Run: ``python bench/middleware_overhead.py [--rounds N] [--steps S] [--checkpointer] [--concurrent C] [--json FILE]``
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from anywhere
    sys.path.insert(0, str(ROOT))

from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import AgentMiddleware  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage  # noqa: E402
from langchain_core.tools import BaseTool, StructuredTool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from forewarn.domains.tools import ToolStateExtractor, generate_traces, load_tool_spec  # noqa: E402
from forewarn.guard import Guard, learn_model  # noqa: E402
from forewarn.guard.client import AsyncClient, Client  # noqa: E402
from forewarn.guard.langchain import ForewarnMiddleware  # noqa: E402
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls  # noqa: E402

TARGET_MS = 0.5
REMOTE_TARGET_MS = 2.0
AGENT_KEY = "bench-agent-key-0123456789"

BENIGN = [
    ("read_file", {"path": "README.md"}),
    ("shell", {"command": "git status"}),
    ("read_file", {"path": "docs/architecture.md"}),
    ("shell", {"command": "pytest -q"}),
    ("write_file", {"path": "notes/summary.md", "content": "All tests pass."}),
    ("http_get", {"url": "https://billing.corp.example/invoices?status=open"}),
    ("list_files", {"path": "."}),  # a tool given the kind 'other' (harmless) below
    ("send_email", {"to": "alice@corp.example", "subject": "Status", "body": "All green."}),
]


def make_tools() -> list[BaseTool]:
    def read_file(path: str) -> str:
        """Read a file."""
        return f"# {path}\nnotes"

    def write_file(path: str, content: str) -> str:
        """Write a file."""
        return "written"

    def shell(command: str) -> str:
        """Run a shell command."""
        return "ok"

    def http_get(url: str) -> str:
        """Fetch a URL."""
        return '{"open": 0}'

    def list_files(path: str) -> str:
        """List files."""
        return "README.md\nsrc/"

    def send_email(to: str, subject: str, body: str) -> str:
        """Send an e-mail."""
        return "sent"

    return [StructuredTool.from_function(f) for f in (read_file, write_file, shell, http_get, list_files, send_email)]


def make_model(steps: int) -> ScriptedChatModel:
    """A model that plays ``steps`` benign calls, then answers; reusable across invocations."""

    def script(messages: list[BaseMessage]) -> AIMessage | str:
        turn = sum(1 for m in messages if isinstance(m, AIMessage))
        if turn >= steps:
            return "Done."
        name, args = BENIGN[turn % len(BENIGN)]
        return tool_calls((name, args))

    model = ScriptedChatModel(script=script)
    model.seen = _Forgetful()  # keep memory flat over thousands of invocations
    return model


class _Forgetful(list):  # type: ignore[type-arg]
    def append(self, item: Any) -> None:
        pass


class TimedMiddleware(ForewarnMiddleware):
    """ForewarnMiddleware that adds the time spent in its own code (the model and the tools
    left out) to ``wall_ns`` and, as CPU time of the thread running it, to ``cpu_ns``."""

    wall_ns = 0
    cpu_ns = 0

    @staticmethod
    def _timed(around: Any, request: Any, handler: Any) -> Any:
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        inner_wall = inner_cpu = 0

        def timed(req: Any) -> Any:
            nonlocal inner_wall, inner_cpu
            w, c = time.perf_counter_ns(), time.thread_time_ns()
            try:
                return handler(req)
            finally:
                inner_wall += time.perf_counter_ns() - w
                inner_cpu += time.thread_time_ns() - c

        try:
            return around(request, timed)
        finally:
            TimedMiddleware.wall_ns += time.perf_counter_ns() - wall - inner_wall
            TimedMiddleware.cpu_ns += time.thread_time_ns() - cpu - inner_cpu

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return self._timed(super().wrap_model_call, request, handler)

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return self._timed(super().wrap_tool_call, request, handler)



def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


class NoopMiddleware(AgentMiddleware[Any, Any, Any]):
    """The same two hooks doing nothing: what LangChain charges for any such middleware."""

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(request)

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(request)


def row(values: list[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50), "p99": percentile(values, 99)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=400, help="timed invocations of each agent")
    parser.add_argument("--steps", type=int, default=8, help="tool-calling steps per invocation")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--checkpointer", action="store_true", help="give the agents an InMemorySaver")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--no-remote", dest="remote", action="store_false", help="leave the sidecar agent out")
    parser.add_argument("--concurrent", type=int, default=8, help="conversations at once in the async part (0: skip)")
    parser.add_argument("--async-rounds", type=int, default=60, help="timed rounds of the async part")
    options = parser.parse_args()

    tmp = tempfile.TemporaryDirectory()
    traces = Path(tmp.name) / "runs.jsonl"
    generate_traces(500, seed=0, path=traces)
    model = learn_model([traces], load_tool_spec())
    guard = Guard(model)

    tools = make_tools()
    extractor = ToolStateExtractor(tool_kinds={"list_files": "other"})
    saver = InMemorySaver if options.checkpointer else (lambda: None)
    middleware = TimedMiddleware(guard, extractor=extractor)
    agents = {
        "plain": create_agent(make_model(options.steps), tools, checkpointer=saver()),
        "noop": create_agent(make_model(options.steps), tools, middleware=[NoopMiddleware()], checkpointer=saver()),
        "guarded": create_agent(make_model(options.steps), tools, middleware=[middleware], checkpointer=saver()),
    }
    server = client = None
    if options.remote:
        server, client = start_sidecar(model.save(Path(tmp.name) / "tools.json"), Path(tmp.name))
        count_requests(client)
        agents["remote"] = create_agent(make_model(options.steps), tools, checkpointer=saver(),
                                        middleware=[ForewarnMiddleware(client, extractor=extractor)])
    try:
        code = measure(options, agents, middleware)
        if options.concurrent:
            url = client.url if client is not None else None
            asyncio.run(measure_async(options, guard, extractor, tools, url))
        return code
    finally:
        if client is not None:
            client.close()
        if server is not None:
            server.terminate()
            server.wait(15)
        tmp.cleanup()


def start_sidecar(model_path: Path, folder: Path) -> tuple[subprocess.Popen[bytes], Client]:
    """``forewarn serve`` in a process of its own on a free loopback port, and a client of it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "FOREWARN_API_KEYS": f"{AGENT_KEY}:agent:bench", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "forewarn.server", "serve", "--model", f"tools={model_path}", "--port", str(port),
                                "--db", str(folder / "bench.db"), "--log-level", "warning"], env=env, cwd=folder)
    client = Client(f"http://127.0.0.1:{port}", api_key=AGENT_KEY)
    deadline = time.monotonic() + 60
    while not client.ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the sidecar did not start")
        time.sleep(0.05)
    return process, client


REQUESTS: list[tuple[str, float]] = []  # (kind, round trip in ms) of every request the remote agent made


def count_requests(client: Client) -> None:
    """Record the kind and round trip of each request ``client`` sends (from any thread)."""
    send = client._send

    def counted(request: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return send(request)
        finally:
            kind = {"/v1/sessions": "create session", "/v1/batch": "batch (first state, before the first call)"}.get(
                request.path, request.path.rsplit("/", 1)[-1])
            REQUESTS.append((kind, (time.perf_counter_ns() - start) / 1e6))
    client._send = counted  # type: ignore[method-assign]


def measure(options: Any, agents: dict[str, Any], middleware: TimedMiddleware) -> int:
    task = {"messages": [("user", "Check the project, write a status note and mail it to Alice.")]}

    def invoke(agent: Any, i: int) -> tuple[int, int]:
        config = {"configurable": {"thread_id": f"t{i}"}} if options.checkpointer else {}
        start, cpu = time.perf_counter_ns(), time.process_time_ns()
        result = agent.invoke(task, config)
        elapsed, cpu = time.perf_counter_ns() - start, time.process_time_ns() - cpu
        assert result["messages"][-1].content == "Done.", "the benign script was interrupted"
        return elapsed, cpu

    for i in range(options.warmup):
        for agent in agents.values():
            invoke(agent, -i - 1)
    run = middleware.last_run
    assert run is not None and not run.interventions, "the guard intervened in the benign script"
    assert len(run.session.history) == options.steps + 1, "not every step was committed"

    per_step = options.steps * 1e6
    wall: dict[str, list[float]] = {name: [] for name in agents}
    cpu: dict[str, list[float]] = {name: [] for name in agents}
    delta, delta_cpu, over_noop, hooks, hooks_cpu, remote = [], [], [], [], [], []
    gc.collect()
    gc.disable()
    REQUESTS.clear()
    try:
        for i in range(options.rounds):
            TimedMiddleware.wall_ns = TimedMiddleware.cpu_ns = 0
            timed = {name: invoke(agent, i) for name, agent in agents.items()}
            for name, (w, c) in timed.items():
                wall[name].append(w / per_step)
                cpu[name].append(c / per_step)
            delta.append((timed["guarded"][0] - timed["plain"][0]) / per_step)
            delta_cpu.append((timed["guarded"][1] - timed["plain"][1]) / per_step)
            over_noop.append((timed["guarded"][1] - timed["noop"][1]) / per_step)
            hooks.append(TimedMiddleware.wall_ns / per_step)
            hooks_cpu.append(TimedMiddleware.cpu_ns / per_step)
            if "remote" in timed:
                remote.append((timed["remote"][0] - timed["plain"][0]) / per_step)
    finally:
        gc.enable()

    figures: dict[str, Any] = {
        "steps_per_invocation": options.steps,
        "rounds": options.rounds,
        "checkpointer": options.checkpointer,
        "plain_ms_per_step": row(wall["plain"]),
        "noop_middleware_ms_per_step": row(wall["noop"]),
        "guarded_ms_per_step": row(wall["guarded"]),
        "remote_ms_per_step": row(wall["remote"]) if remote else None,
        "overhead_ms_per_step": row(delta),
        "overhead_cpu_ms_per_step": row(delta_cpu),
        "overhead_over_noop_cpu_ms_per_step": row(over_noop),
        "in_forewarn_ms_per_step": row(hooks),
        "in_forewarn_cpu_ms_per_step": row(hooks_cpu),
        "target_ms": TARGET_MS,
        "remote_overhead_ms_per_step": row(remote) if remote else None,
        "remote_target_ms": REMOTE_TARGET_MS,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
    }
    print(f"ForewarnMiddleware overhead: {options.rounds} rounds x {options.steps} steps, "
          f"checkpointer={'InMemorySaver' if options.checkpointer else 'none'}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'per step (ms)':44} {'p50':>8} {'p99':>8}")
    for label, key in (("agent without middleware", "plain_ms_per_step"),
                       ("agent with a no-op middleware (same hooks)", "noop_middleware_ms_per_step"),
                       ("agent with Forewarn", "guarded_ms_per_step"),
                       ("overhead, wall time (paired)", "overhead_ms_per_step"),
                       ("overhead, CPU time (paired)", "overhead_cpu_ms_per_step"),
                       ("  of which beyond a no-op middleware (CPU)", "overhead_over_noop_cpu_ms_per_step"),
                       ("in Forewarn's code, wall time", "in_forewarn_ms_per_step"),
                       ("in Forewarn's code, CPU time", "in_forewarn_cpu_ms_per_step"),
                       *((("remote: agent with Forewarn on a sidecar", "remote_ms_per_step"),
                          ("remote overhead, wall time (paired)", "remote_overhead_ms_per_step")) if remote else ())):
        print(f"{label:44} {figures[key]['p50']:8.3f} {figures[key]['p99']:8.3f}")
    median = figures["overhead_ms_per_step"]["p50"]
    verdict = "meets" if median < TARGET_MS else "misses"
    print(f"target: < {TARGET_MS} ms per step (wall, p50): {verdict} it ({median:.3f} ms)")
    if remote:
        kinds = sorted({k for k, _ in REQUESTS})
        figures["remote_requests_per_run"] = {k: sum(1 for j, _ in REQUESTS if j == k) / options.rounds for k in kinds}
        figures["remote_round_trip_ms"] = {k: row([ms for j, ms in REQUESTS if j == k]) for k in kinds}
        print("remote: HTTP requests per run (round trip p50 / p99 ms): " + ", ".join(
            f"{figures['remote_requests_per_run'][k]:g} {k} ({figures['remote_round_trip_ms'][k]['p50']:.2f} / "
            f"{figures['remote_round_trip_ms'][k]['p99']:.2f})" for k in kinds))
        far = figures["remote_overhead_ms_per_step"]["p50"]
        print(f"remote target: <= {REMOTE_TARGET_MS} ms per step (wall, p50): "
              f"{'meets' if far <= REMOTE_TARGET_MS else 'misses'} it ({far:.3f} ms)")
    if options.json:
        options.json.write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


async def measure_async(options: Any, guard: Guard, extractor: ToolStateExtractor, tools: list[BaseTool],
                        url: str | None) -> None:
    """Part 5: async agents, one conversation and ``--concurrent`` at once, beside the bare agent."""
    task = {"messages": [("user", "Check the project, write a status note and mail it to Alice.")]}
    aclient = AsyncClient(url, api_key=AGENT_KEY) if url else None
    sync_client = Client(url, api_key=AGENT_KEY) if url else None
    agents: dict[str, Any] = {
        "bare": create_agent(make_model(options.steps), tools),
        "in process": create_agent(make_model(options.steps), tools,
                                   middleware=[ForewarnMiddleware(guard, extractor=extractor)]),
    }
    if aclient is not None and sync_client is not None:
        agents["sidecar, AsyncClient"] = create_agent(make_model(options.steps), tools,
                                                      middleware=[ForewarnMiddleware(aclient, extractor=extractor)])
        agents["sidecar, sync Client"] = create_agent(make_model(options.steps), tools,
                                                      middleware=[ForewarnMiddleware(sync_client, extractor=extractor)])
    counter = iter(range(10**9))

    async def one_round(agent: Any, n: int) -> float:
        start = time.perf_counter_ns()
        results = await asyncio.gather(*(agent.ainvoke(task, {"configurable": {"thread_id": f"a{next(counter)}"}})
                                         for _ in range(n)))
        assert all(r["messages"][-1].content == "Done." for r in results), "the benign script was interrupted"
        return (time.perf_counter_ns() - start) / 1e6

    figures: dict[str, Any] = {}
    print(f"\nasync: {options.async_rounds} rounds x {options.steps} steps, ms per step of a round (p50), "
          f"overhead over the bare agent in the same round, round time / bare")
    for n in (1, options.concurrent):
        for _ in range(5):  # warm-up
            for agent in agents.values():
                await one_round(agent, n)
        times: dict[str, list[float]] = {name: [] for name in agents}
        gc.collect()
        gc.disable()
        try:
            for _ in range(options.async_rounds):
                for name, agent in agents.items():
                    times[name].append(await one_round(agent, n))
        finally:
            gc.enable()
        steps = n * options.steps
        bare = times["bare"]
        print(f"  {n} conversation(s) at once:")
        for name, values in times.items():
            per_step = row([v / steps for v in values])
            over = row([(v - b) / steps for v, b in zip(values, bare)])
            ratio = percentile([v / b for v, b in zip(values, bare)], 50)
            figures[f"{name} x{n}"] = {"ms_per_step": per_step, "overhead_ms_per_step": over, "ratio": ratio}
            extra = "" if name == "bare" else f"   overhead {over['p50']:7.3f} ms/step   ratio {ratio:5.2f}x"
            print(f"    {name:24} {per_step['p50']:7.3f} ms/step{extra}")
    if aclient is not None:
        await aclient.aclose()
    if sync_client is not None:
        sync_client.close()
    if options.json:
        previous = json.loads(options.json.read_text(encoding="utf-8")) if options.json.exists() else {}
        options.json.write_text(json.dumps({**previous, "async": figures}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
