"""The package's structure, measured: what docs/architecture.md reports, for any checkout.

Figures (``--root`` a checkout, default this one; an older commit: ``git worktree add`` or
``git archive COMMIT | tar -x -C DIR`` first):

* **files crossed** by one decision: the Forewarn source files whose functions run while
  ``Session.observe`` decides in process, (a) the sidecar answers one ``POST /v1/sessions/{id}/observe`` (uvicorn on 127.0.0.1 in a
  thread, SQLite) and (b) ``ForewarnMiddleware`` guards one agent step (the model's turn
  proposing a tool call, the look-ahead, the call, its commit), each after a warm-up of the
  same call, so lazy imports and first-use caches do not count. Recorded with
  ``sys.setprofile``/``threading.setprofile`` (every thread the call runs on).
* **import cycles**: strongly connected groups of modules in the import graph (grimp, the
  graph import-linter checks; function-level imports count), listed.
* **upward arrows**: imports from a lower layer to a higher one in the ``layers`` contracts
  of pyproject.toml (the ones the contracts let through in ``ignore_imports``), listed.
* **import time**: ``python -X importtime -c 'from forewarn import Guard'``, modules and the
  total, and the CPU time it takes beyond a bare interpreter (the best of five runs: a busy
  machine only adds).
* **install**: the top-level names and ``.pth`` files of the wheel ``pip wheel`` builds.
* **package lines**: lines of the package's ``.py`` files (forewarn/, guard/, monitors/,
  server/, domains/, and setup.py if any).

Run: ``python bench/structure.py [--root DIR] [--no-flows] [--no-wheel] [--json FILE]``
(the flows need the server and langchain extras).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
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


def package_lines(root: Path) -> int:
    total = 0
    for folder in PACKAGE_DIRS:
        for path in (root / folder).rglob("*.py"):
            if not path.is_symlink() and not any(p.is_symlink() for p in path.relative_to(root).parents
                                                 if p != Path(".") and (root / p).is_symlink()):
                total += len(path.read_bytes().splitlines())
    setup = root / "setup.py"
    return total + (len(setup.read_bytes().splitlines()) if setup.exists() else 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=HERE)
    parser.add_argument("--no-flows", dest="flows", action="store_false")
    parser.add_argument("--no-wheel", dest="wheel", action="store_false")
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
    print(f"package lines: {out['package_lines']}")
    if args.wheel:
        print(f"wheel: top-level names {out['top_level_names']}, .pth files {out['pth_files']}")
    if args.flows:
        for key in ("files_in_process_observe", "files_sidecar_observe", "files_middleware_step"):
            print(f"{key}: {len(out[key])}")
            for name in out[key]:
                print("  " + name)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
