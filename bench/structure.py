"""The package's structure, measured: what docs/architecture.md reports, for any checkout.

Figures (``--root`` a checkout, default this one; an older commit: ``git worktree add`` or
``git archive COMMIT | tar -x -C DIR`` first):

* **files crossed** by one decision: the Forewarn source files whose functions run while
  ``Session.observe`` decides in process, (a) the sidecar answers one ``POST /v1/sessions/{id}/observe`` (uvicorn on 127.0.0.1 in a
  thread, SQLite) and (b) ``ForewarnMiddleware`` guards one agent step (the model's turn
  proposing a tool call, the look-ahead, the call, its commit), each after a warm-up of the
  same call, so lazy imports and first-use caches do not count; and (c) one MCP ``tools/call`` through the
  lean relay over stdio and over streamable HTTP (the relay's loop in a thread, ``mcp-server-time`` as the
  upstream; ``--no-mcp`` to skip). Recorded with
  ``sys.setprofile``/``threading.setprofile`` (every thread the call runs on).
* **import cycles**: strongly connected groups of modules in the import graph (grimp, the
  graph import-linter checks; function-level imports count), listed.
* **upward arrows**: imports from a lower layer to a higher one in the ``layers`` contracts
  of pyproject.toml (the ones the contracts let through in ``ignore_imports``), listed.
* **import time**: ``python -X importtime -c 'from forewarn import Guard'``, modules and the
  total, and the CPU time it takes beyond a bare interpreter (the best of five runs: a busy
  machine only adds).
* **install**: the top-level names and ``.pth`` files of the wheel ``pip wheel`` builds.
* **guard/mcp/**: its modules and lines.
* **package lines**: lines of the package's ``.py`` files (forewarn/, guard/, monitors/,
  server/, domains/, and setup.py if any), their number and the median file's lines
  (``tests/test_architecture_figures.py`` holds docs/architecture.md to these).

Run: ``python bench/structure.py [--root DIR] [--no-flows] [--no-wheel] [--no-mcp] [--json FILE]``
(the flows need the server and langchain extras).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = ("forewarn", "guard", "monitors", "server", "domains")


# -- files crossed by one call ------------------------------------------------------------------

class Crossed:
    """The Forewarn files whose code runs while ``recording`` is on, in every thread."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = tuple(str(r.resolve()) + os.sep for r in roots)
        self.files: set[str] = set()
        self.recording = False

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if self.recording and event == "call":
            name = frame.f_code.co_filename
            if name.startswith(self.roots):
                self.files.add(os.path.relpath(os.path.realpath(name), self.base))

    def install(self, base: Path) -> None:
        self.base = str(base.resolve())
        sys.setprofile(self)
        threading.setprofile(self)

    def record(self, call: Callable[[], Any]) -> list[str]:
        self.files = set()
        self.recording = True
        try:
            call()
        finally:
            self.recording = False
        return sorted(self.files)


def tool_model(folder: Path) -> Any:
    from forewarn.domains.tools import generate_traces, load_tool_spec
    from forewarn.guard import learn_model

    traces = folder / "runs.jsonl"
    generate_traces(200, seed=0, path=traces)
    return learn_model([traces], load_tool_spec())


def in_process_observe(crossed: Crossed, model: Any) -> list[str]:
    from forewarn.domains.tools import ToolStateExtractor
    from forewarn.guard import Guard
    from forewarn.guard.toolcalls.transcript import Transcript

    session = Guard(model).session()
    state = ToolStateExtractor()(Transcript())
    for _ in range(3):
        session.observe(state)
    return crossed.record(lambda: session.observe(state))


_MCP_HELLO = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}
_MCP_READY = {"jsonrpc": "2.0", "method": "notifications/initialized"}
_MCP_CALL = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "get_current_time", "arguments": {"timezone": "UTC"}}}


def mcp_tools_call(crossed: Crossed, folder: Path) -> dict[str, list[str]]:
    """One ``tools/call`` through each lean relay in this process (its event loop in a thread), in front of
    ``mcp-server-time`` (PyPI): over stdio (the client a socket, the upstream the command) and over streamable
    HTTP (uvicorn, the upstream the same server over HTTP in its own process)."""
    import asyncio
    import socket
    import subprocess

    import anyio
    import httpx
    import orjson

    from forewarn.domains.mcp import PROXY_CONFIG, SPEC_PATH, synthetic_runs
    from forewarn.guard import Guard, learn_model, load_spec
    from forewarn.guard.mcp import GuardedProxy, LeanRelay, UpstreamSpec, load_config, serve_http

    traces = folder / "mcp-runs.jsonl"
    traces.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in synthetic_runs(600, seed=1)))
    guard = Guard(learn_model([traces], load_spec(SPEC_PATH)))
    server = str(Path(sys.executable).parent / "mcp-server-time")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(work: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(work, loop).result(120)

    out: dict[str, list[str]] = {}
    # stdio
    relay = LeanRelay(GuardedProxy(guard, load_config(PROXY_CONFIG, upstreams=[UpstreamSpec("time", command=server)])))
    ours, theirs = socket.socketpair()

    async def serve_stdio() -> asyncio.Future[None]:
        transport, protocol = await loop.create_connection(relay.client_side, sock=theirs)
        return asyncio.ensure_future(relay.serve(asyncio.StreamWriter(transport, protocol, None, loop)))

    served = run(serve_stdio())
    wire = ours.makefile("rwb")

    def line(message: dict[str, Any]) -> None:
        wire.write(orjson.dumps(message) + b"\n")
        wire.flush()
        if "id" in message:
            assert orjson.loads(wire.readline())["id"] == message["id"]

    line(_MCP_HELLO)
    line(_MCP_READY)
    for _ in range(3):
        line(_MCP_CALL)
    out["files_mcp_tools_call_stdio"] = crossed.record(lambda: line(_MCP_CALL))
    ours.shutdown(socket.SHUT_WR)
    run(asyncio.wait_for(served, 60))
    wire.close()
    ours.close()
    # streamable HTTP
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        up_port = probe.getsockname()[1]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    upstream = subprocess.Popen([sys.executable, "-c", "from mcp_server_time.server import create_server; "
                                 f"create_server('UTC').run('streamable-http', host='127.0.0.1', port={up_port})"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", up_port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and upstream.poll() is None, "mcp-server-time did not listen"
                time.sleep(0.1)
        proxy = GuardedProxy(guard, load_config(PROXY_CONFIG, upstreams=[
            UpstreamSpec("time", url=f"http://127.0.0.1:{up_port}/mcp")]))

        async def events() -> tuple[anyio.Event, anyio.Event]:
            return anyio.Event(), anyio.Event()

        started, stop = run(events())
        serving = asyncio.run_coroutine_threadsafe(serve_http(proxy, host="127.0.0.1", port=port, started=started,
                                                              stop=stop, relay="lean"), loop)
        run(started.wait())
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60) as client:
            hello = client.post("/mcp", content=orjson.dumps(_MCP_HELLO))
            hello.raise_for_status()
            headers = {k: hello.headers[k] for k in ("mcp-session-id",) if k in hello.headers}
            client.post("/mcp", content=orjson.dumps(_MCP_READY), headers=headers)

            def call() -> None:
                answer = client.post("/mcp", content=orjson.dumps(_MCP_CALL), headers=headers)
                answer.raise_for_status()
                assert b'"id":2' in answer.content.replace(b" ", b""), answer.content

            for _ in range(3):
                call()
            out["files_mcp_tools_call_http"] = crossed.record(call)
        loop.call_soon_threadsafe(stop.set)
        serving.result(60)
    finally:
        upstream.terminate()
        upstream.wait(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(15)
    return out


def mcp_folder(root: Path) -> tuple[int, int]:
    """Modules and lines of ``guard/mcp/`` (its sub-folders too)."""
    files = sorted((root / "guard" / "mcp").rglob("*.py"))
    return len(files), sum(len(f.read_bytes().splitlines()) for f in files)


def sidecar_observe(crossed: Crossed, model: Any, folder: Path) -> list[str]:
    import httpx
    import uvicorn
    from pydantic import SecretStr

    from forewarn.domains.tools import ToolStateExtractor
    from forewarn.guard.toolcalls.transcript import Transcript
    from forewarn.server.app import create_app
    from forewarn.server.run import uvicorn_config
    from forewarn.server.settings import ApiKey, Role, ServerSettings

    key = "bench-agent-key-0123456789"
    settings = ServerSettings(db=folder / "db.sqlite", models={"tools": model.save(folder / "tools.json")},
                              api_keys=(ApiKey(key=SecretStr(key), role=Role.AGENT, name="bench"),),
                              log_level="warning", model_dirs=(folder,))
    app = create_app(settings)
    server = uvicorn.Server(uvicorn_config(app, settings, log_level="warning"))
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    state = ToolStateExtractor()(Transcript())
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as client:
            session = client.post("/v1/sessions", json={"model": "tools"}).json()["id"]

            def observe() -> None:
                answer = client.post(f"/v1/sessions/{session}/observe", json={"state": state})
                answer.raise_for_status()

            for _ in range(3):
                observe()
            return crossed.record(observe)
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


def middleware_step(crossed: Crossed, model: Any) -> list[str]:
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.tools import StructuredTool

    from forewarn.domains.tools import ToolStateExtractor
    from forewarn.guard import Guard
    from forewarn.guard.langchain import ForewarnMiddleware
    from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls

    def read_file(path: str) -> str:
        """Read a file."""
        return f"# {path}\nnotes"

    def script(messages: list[BaseMessage]) -> AIMessage | str:
        if sum(1 for m in messages if isinstance(m, AIMessage)) >= 1:
            return "Done."
        return tool_calls(("read_file", {"path": "README.md"}))

    agent = create_agent(ScriptedChatModel(script=script), [StructuredTool.from_function(read_file)],
                         middleware=[ForewarnMiddleware(Guard(model), extractor=ToolStateExtractor())])

    def step() -> None:
        agent.invoke({"messages": [HumanMessage("Read the README.")]})

    for _ in range(3):
        step()
    return crossed.record(step)


# -- the import graph -------------------------------------------------------------------------

def import_graph(root: Path) -> Any:
    sys.path.insert(0, str(root))
    import grimp

    return grimp.build_graph("forewarn", cache_dir=None)


def cycles(graph: Any) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in modules:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(edges[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(edges.get(nxt, []))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


def upward_arrows(graph: Any, root: Path) -> list[str]:
    """Imports from a lower layer to a higher one, in every ``layers`` contract."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config.get("tool", {}).get("importlinter", {}).get("contracts", [])
    arrows: set[str] = set()
    for contract in contracts:
        if contract.get("type") != "layers":
            continue
        for container in contract.get("containers", [""]):
            layers = [[(f"{container}." if container else "") + m.strip() for m in re.split(r"[:|]", layer)
                       if m.strip()] for layer in contract["layers"]]

            def layer_of(module: str, layers: list[list[str]] = layers) -> int | None:
                for i, names in enumerate(layers):
                    if any(module == n or module.startswith(n + ".") for n in names):
                        return i
                return None

            for importer in graph.modules:
                below = layer_of(importer)
                if below is None:
                    continue
                for imported in graph.find_modules_directly_imported_by(importer):
                    above = layer_of(imported)
                    if above is not None and above < below:
                        arrows.add(f"{importer} -> {imported}")
    return sorted(arrows)


# -- start-up, install, size --------------------------------------------------------------------

def import_time(root: Path, runs: int = 5) -> tuple[int, float, float]:
    """(modules imported, total ms, CPU ms) of ``from forewarn import Guard``, each the best of ``runs``.

    The total is ``-X importtime``'s (wall clock); the CPU time is the process's user + system
    time beyond a bare interpreter's, which a busy machine disturbs far less.
    """
    env = {**os.environ, "PYTHONPATH": str(root)}

    def cpu(code: str, *flags: str) -> tuple[float, str]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, env=env,
                              cwd=tempfile.gettempdir(), check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000, done.stderr

    modules, wall, used = 0, float("inf"), float("inf")
    bare = min(cpu("pass")[0] for _ in range(runs))
    for _ in range(runs):
        spent, err = cpu("from forewarn import Guard", "-X", "importtime")
        rows = [line.split("|") for line in err.splitlines()
                if line.startswith("import time:") and "self [us]" not in line]
        modules = len(rows)
        wall = min(wall, sum(int(r[0].split(":")[1]) for r in rows) / 1000)
        used = min(used, spent - bare)
    return modules, wall, used


def wheel_contents(root: Path) -> tuple[list[str], list[str]]:
    """The wheel's top-level names (not its .dist-info) and its .pth files."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                        "-w", out, str(root)], check=True, capture_output=True, cwd=out)
        (wheel,) = Path(out).glob("*.whl")
        names = zipfile.ZipFile(wheel).namelist()
    top = sorted({n.split("/")[0].removesuffix(".py") for n in names if ".dist-info/" not in n
                  and not n.endswith(".pth")})
    return top, sorted(n for n in names if n.endswith(".pth"))


def module_lengths(root: Path) -> list[int]:
    """Lines of each of the package's ``.py`` files (forewarn/, guard/, monitors/, server/, domains/; a file
    reached through the ``forewarn/`` links counted once, where it lives)."""
    out = []
    for folder in PACKAGE_DIRS:
        for path in sorted((root / folder).rglob("*.py")):
            if not path.is_symlink() and not any(p.is_symlink() for p in path.relative_to(root).parents
                                                 if p != Path(".") and (root / p).is_symlink()):
                out.append(len(path.read_bytes().splitlines()))
    return out


def package_lines(root: Path) -> int:
    setup = root / "setup.py"
    return sum(module_lengths(root)) + (len(setup.read_bytes().splitlines()) if setup.exists() else 0)


def median_module(root: Path) -> float:
    """The median module's lines (``__init__.py`` files and all)."""
    return float(statistics.median(module_lengths(root)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=HERE)
    parser.add_argument("--no-flows", dest="flows", action="store_false")
    parser.add_argument("--no-wheel", dest="wheel", action="store_false")
    parser.add_argument("--no-mcp", dest="mcp", action="store_false", help="no MCP flows (they need the mcp extra)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    root = args.root.resolve()
    out: dict[str, Any] = {"root": str(root)}
    graph = import_graph(root)
    out["cycles"] = cycles(graph)
    out["upward_arrows"] = upward_arrows(graph, root)
    out["modules"] = len(graph.modules)
    out["import_arrows"] = sum(len(graph.find_modules_directly_imported_by(m)) for m in graph.modules)
    out["import_modules"], out["import_ms"], out["import_cpu_ms"] = import_time(root)
    out["package_lines"] = package_lines(root)
    out["package_modules"] = len(module_lengths(root))
    out["median_module_lines"] = median_module(root)
    out["mcp_modules"], out["mcp_lines"] = mcp_folder(root)
    if args.wheel:
        out["top_level_names"], out["pth_files"] = wheel_contents(root)
    if args.flows:
        crossed = Crossed([root / d for d in PACKAGE_DIRS])
        crossed.install(root)
        with tempfile.TemporaryDirectory() as tmp:
            model = tool_model(Path(tmp))
            out["files_in_process_observe"] = in_process_observe(crossed, model)
            out["files_sidecar_observe"] = sidecar_observe(crossed, model, Path(tmp))
            out["files_middleware_step"] = middleware_step(crossed, model)
            if args.mcp:
                out.update(mcp_tools_call(crossed, Path(tmp)))
        sys.setprofile(None)
        threading.setprofile(None)
    print(f"import graph: {out['modules']} modules, {out['import_arrows']} arrows")
    print(f"import cycles: {len(out['cycles'])}")
    for group in out["cycles"]:
        print("  " + " <-> ".join(group))
    print(f"upward arrows: {len(out['upward_arrows'])}")
    for arrow in out["upward_arrows"]:
        print("  " + arrow)
    print(f"from forewarn import Guard: {out['import_modules']} modules, {out['import_ms']:.0f} ms wall, "
          f"{out['import_cpu_ms']:.0f} ms CPU beyond a bare interpreter (best of 5)")
    print(f"package lines: {out['package_lines']} in {out['package_modules']} modules, "
          f"median module {out['median_module_lines']:.0f} lines")
    print(f"guard/mcp/: {out['mcp_modules']} modules, {out['mcp_lines']} lines")
    if args.wheel:
        print(f"wheel: top-level names {out['top_level_names']}, .pth files {out['pth_files']}")
    if args.flows:
        for key in ("files_in_process_observe", "files_sidecar_observe", "files_middleware_step",
                    "files_mcp_tools_call_stdio", "files_mcp_tools_call_http"):
            if key not in out:
                continue
            print(f"{key}: {len(out[key])}")
            for name in out[key]:
                print("  " + name)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
