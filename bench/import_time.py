"""Import and load time of a guard, now and at a baseline commit, in fresh processes.

What it does
------------
1. Learns one demo-size model once, with this checkout: the household world of
   ``_common.py`` (``--steps`` steps of runs, the ten CEL predicates of ``SPEC_YAML``),
   and keeps the first state of a fresh run for a decision. The model file format is
   the same at the baseline, so both trees load the very same file.
2. Extracts the baseline commit (default ``9562418``, the commit before issue 11's light
   core) with ``git archive`` into a temporary folder: the repository itself is not
   touched (no checkout, no worktree left behind).
3. For each tree, in a fresh interpreter each time (``PYTHONPATH`` = the tree, working
   directory a temporary folder), times with ``time.perf_counter``:

   * ``import forewarn``;
   * ``import forewarn.guard``;
   * ``from forewarn.guard import Guard`` then ``Guard.load(model)``, then the first
     decision (``guard.session().observe(state)``): the times are cumulative from the
     start of the script, as an agent's process sees them;

   and counts ``sys.modules`` after each step (the interpreter alone holds about 100), and
   says whether ``stormpy`` and ``scipy`` were imported. Interpreter start-up is not
   included; where Forewarn is installed, ``forewarn-aliases.pth`` imports ``forewarn``
   during it (the script says so), so ``import forewarn`` itself then costs nothing.
   Trees alternate run by run (same machine load for both); one warm-up run per tree
   first compiles the bytecode. The median of ``--repeats`` runs is shown.

Nothing is asserted: the figures are printed beside the baseline's.

Run: ``python bench/import_time.py [--repeats N] [--steps N] [--baseline REV] [--json FILE]``
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

import orjson

import _common as C

ROOT = C.ROOT
BASELINE = "9562418"

# One child script per measurement. Each prints one JSON line: {stage: [seconds, modules]} and the heavy flags.
CHILD = """
import sys, time
start = time.perf_counter()
out = {"preloaded": "forewarn" in sys.modules}
def mark(stage):
    out[stage] = [time.perf_counter() - start, len(sys.modules)]
%s
out["stormpy"] = "stormpy" in sys.modules
out["scipy"] = "scipy" in sys.modules
import json
print(json.dumps(out))
"""
SCRIPTS = {
    "import forewarn": "import forewarn\nmark('import forewarn')",
    "import forewarn.guard": "import forewarn.guard\nmark('import forewarn.guard')",
    "load and decide": ("from forewarn.guard import Guard\nmark('from forewarn.guard import Guard')\n"
                        "guard = Guard.load(MODEL)\nmark('+ Guard.load(model)')\n"
                        "decision = guard.session().observe(STATE)\nmark('+ first decision')"),
}
ROWS = ["import forewarn", "import forewarn.guard", "from forewarn.guard import Guard", "+ Guard.load(model)",
        "+ first decision"]


def learn(workdir: Path, steps: int) -> tuple[Path, dict[str, Any], int]:
    import warnings

    from forewarn.guard import learn_model, parse_spec

    traces = workdir / "runs.jsonl"
    C.write_jsonl(traces, C.household_runs(steps, seed=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = learn_model([traces], parse_spec(C.SPEC_YAML))
    path = model.save(workdir / "model.json")
    state = next(C.household_runs(10, seed=99))["steps"][0]["state"]
    return path, state, model.dtmc.size


def extract(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev], capture_output=True,
                             check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="tar")
    return into


def run_child(tree: Path, name: str, model: Path, state: dict[str, Any], cwd: Path) -> dict[str, Any]:
    code = f"MODEL = {str(model)!r}\nSTATE = {state!r}\n" + CHILD % SCRIPTS[name]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(tree),
                                                                        "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {name} failed:\n{done.stderr}")
    result: dict[str, Any] = orjson.loads(done.stdout.splitlines()[-1])
    return result


def measure(trees: dict[str, Path], model: Path, state: dict[str, Any], repeats: int,
            cwd: Path) -> dict[str, dict[str, Any]]:
    samples: dict[str, dict[str, list[list[float]]]] = {label: {} for label in trees}
    heavy: dict[str, dict[str, bool]] = {label: {} for label in trees}
    for label, tree in trees.items():  # warm-up: compile the bytecode
        run_child(tree, "load and decide", model, state, cwd)
    for _ in range(repeats):
        for name in SCRIPTS:
            for label, tree in trees.items():
                result = run_child(tree, name, model, state, cwd)
                for stage, value in result.items():
                    if stage in ("stormpy", "scipy", "preloaded"):
                        heavy[label][stage] = heavy[label].get(stage, False) or bool(value)
                    else:
                        samples[label].setdefault(stage, []).append(value)
    return {label: {"stages": {stage: {"seconds": statistics.median(v[0] for v in values),
                                       "modules": int(statistics.median(v[1] for v in values))}
                               for stage, values in stages.items()},
                    "stormpy_or_scipy_at_decision": {k: v for k, v in heavy[label].items() if k != "preloaded"},
                    "forewarn_imported_at_start": heavy[label].get("preloaded", False)}
            for label, stages in samples.items()}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 0.01 else f"{seconds * 1e3:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20_000, help="training steps of the household model")
    parser.add_argument("--baseline", default=BASELINE, help="git revision to compare with (default %(default)s)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="forewarn-import-") as tmp:
        work = Path(tmp)
        model, state, size = learn(work, args.steps)
        trees = {f"baseline {args.baseline}": extract(args.baseline, work / "baseline"), "now": ROOT}
        results = measure(trees, model, state, args.repeats, work)
        kib = model.stat().st_size // 1024

    base, now = results[f"baseline {args.baseline}"], results["now"]
    rows = []
    for stage in ROWS:
        b, n = base["stages"][stage], now["stages"][stage]
        rows.append([stage, _ms(b["seconds"]), b["modules"], _ms(n["seconds"]), n["modules"],
                     f"{n['seconds'] / b['seconds']:.2f}×" if n["seconds"] >= 1e-3 else "–"])
    print(C.table(["fresh process", f"baseline {args.baseline}", "modules", "now", "modules", "now/baseline"], rows,
                  title=f"Import and load time, median of {args.repeats} fresh processes (household model, "
                        f"{size} states, {kib} KiB)"))
    for label, result in results.items():
        loaded = [name for name, on in result["stormpy_or_scipy_at_decision"].items() if on]
        print(f"{label}: after the first decision, loaded: {', '.join(loaded) or 'neither stormpy nor scipy'}")
    if any(result["forewarn_imported_at_start"] for result in results.values()):
        print("forewarn was already imported when each script started (forewarn-aliases.pth imports forewarn and "
              "forewarn._aliases at interpreter start-up in this environment): `import forewarn` adds nothing")
    C.write_json(args.json, {"machine": C.machine(), "config": vars(args) | {"model_states": size, "model_kib": kib},
                             "results": results})


if __name__ == "__main__":
    main()
