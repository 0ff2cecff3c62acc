"""Learning throughput from JSONL: steps per second of ``guard.learn_model`` (10 predicates).

What it does
------------
1. Writes household trace files (``_common.household_runs``: runs of about 70–100
   steps, 12 objects x 6 properties plus an agent block, about 1.7 KB of JSON a state;
   the ten CEL predicates of ``_common.SPEC_YAML``): one of ``--steps`` steps (default
   200,000, about 350 MB) and a smaller one (a quarter of it, default 50,000).
2. For each file, a fresh child process runs the whole public path,
   ``guard.learn_model([file], spec)``: SHA-256 of the file for provenance, streaming
   read, JSON parsing and validation, predicate evaluation, counting, smoothing, Storm
   check (sound), PAC report. It prints steps/s and its peak RSS (``getrusage``): the
   two peaks side by side show whether memory stays flat as the file grows (it should:
   runs are streamed one line at a time; memory grows with abstract states and the
   predicate memo, which is capped, not with runs).
3. In this process, the same work on the large file with each phase timed by hand:
   ``guard.traces.read_runs`` (read + parse + validate, timed around each ``next``),
   ``guard.traces.abstract_run`` (predicates), ``TransitionCounts.add`` (counting,
   which is what ``guard.learning.count_transitions`` does per run), then
   ``learn_dtmc`` (smoothing), ``check_dtmc`` (Storm), ``pac_report`` and the file
   digest. The shares are of the sum of the phases.

Times are wall-clock and CPU (``time.process_time``); on a shared machine CPU is the
steadier figure, and "CPU share" (CPU / wall) says how much of the cores the run got.
``--profile`` adds a cProfile listing of the streaming part (a separate pass over the
small file, so the timed figures are not profiled). Nothing is asserted.

Run: ``python bench/learn_throughput.py [--quick] [--steps N] [--json FILE]``
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as C
from forewarn.guard import learn_model, parse_spec
from forewarn.guard.learning import TransitionCounts, count_transitions, learn_dtmc
from forewarn.guard.pac import pac_report
from forewarn.guard.pipeline import default_formula, transition_rule
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.storm import Method, check_dtmc
from forewarn.guard.traces import abstract_run, file_digest, read_runs

TARGET_STEPS_PER_S = 50_000


def worker(path: str) -> dict[str, Any]:
    """The full public path in a fresh process: learn_model on one file."""
    spec = parse_spec(C.SPEC_YAML)
    rss_start = C.max_rss_mib()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    model = learn_model([path], spec)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    steps = model.provenance["steps"]
    return {"path": path, "bytes": Path(path).stat().st_size, "runs": model.provenance["runs"], "steps": steps,
            "states": model.dtmc.size, "wall_s": wall, "cpu_s": cpu, "steps_per_s_wall": steps / wall,
            "steps_per_s_cpu": steps / cpu, "rss_start_mib": rss_start, "rss_peak_mib": C.max_rss_mib()}


def run_worker(path: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", str(path)],
                          capture_output=True, text=True, check=True)
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def profile_streaming(path: Path) -> str:
    """cProfile listing of read + abstraction + counting (a separate, untimed pass)."""
    predicates = PredicateSet(parse_spec(C.SPEC_YAML))
    profiler = cProfile.Profile()
    profiler.enable()
    count_transitions(read_runs(path), predicates)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(14)
    return text.getvalue()


def phases(path: Path) -> dict[str, Any]:
    """The learn path on one file with each phase timed separately (wall and CPU)."""
    spec = parse_spec(C.SPEC_YAML)
    predicates = PredicateSet(spec)
    wall = dict.fromkeys(("read_parse", "abstraction", "counting", "smoothing", "check", "pac", "digest"), 0.0)
    cpu = dict(wall)
    clock, cpu_clock = time.perf_counter, time.process_time
    counts = TransitionCounts()
    runs = read_runs(path)
    while True:
        w0, c0 = clock(), cpu_clock()
        run = next(runs, None)
        w1, c1 = clock(), cpu_clock()
        wall["read_parse"] += w1 - w0
        cpu["read_parse"] += c1 - c0
        if run is None:
            break
        abstract = abstract_run(run, predicates)
        w2, c2 = clock(), cpu_clock()
        counts.add(abstract, predicates)
        w3, c3 = clock(), cpu_clock()
        wall["abstraction"] += w2 - w1
        cpu["abstraction"] += c2 - c1
        wall["counting"] += w3 - w2
        cpu["counting"] += c3 - c2

    def timed(key: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        w0, c0 = clock(), cpu_clock()
        value = fn(*args, **kwargs)
        wall[key] += clock() - w0
        cpu[key] += cpu_clock() - c0
        return value

    dtmc = timed("smoothing", learn_dtmc, counts, predicates, alpha=spec.learning.alpha,
                 rule=transition_rule(spec, predicates))
    timed("check", check_dtmc, dtmc, default_formula(spec), method=Method.SOUND)
    timed("pac", pac_report, dtmc, epsilon=spec.learning.epsilon, delta=spec.learning.delta)
    timed("digest", file_digest, path)
    out: dict[str, Any] = {"steps": counts.steps, "runs": counts.runs, "states": dtmc.size,
                           "memo_entries": len(predicates._memo), "wall_s": wall, "cpu_s": cpu}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="40,000 and 10,000 steps (about 20 s)")
    parser.add_argument("--steps", type=int, help="steps in the large file (default 200,000)")
    parser.add_argument("--small", type=int, help="steps in the small file (default a quarter of --steps)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--profile", action="store_true", help="print a cProfile listing of the streaming part")
    parser.add_argument("--keep", metavar="DIR", help="write the trace files here and keep them")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker)))
        return 0

    big_steps = args.steps or (40_000 if args.quick else 200_000)
    small_steps = args.small or big_steps // 4
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="forewarn-bench-")
    folder = Path(args.keep if tmp is None else tmp.name)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        files = {}
        for label, steps in (("small", small_steps), ("large", big_steps)):
            path = folder / f"household-{steps}.jsonl"
            started = time.perf_counter()
            n_runs, n_steps = C.write_jsonl(path, C.household_runs(steps, seed=args.seed))
            files[label] = path
            print(f"wrote {path.name}: {n_runs:,} runs, {n_steps:,} steps, {path.stat().st_size / 2**20:.0f} MiB "
                  f"in {time.perf_counter() - started:.1f} s", file=sys.stderr)

        whole = {label: run_worker(path) for label, path in files.items()}
        split = phases(files["large"])
        if args.profile:
            split["profile"] = profile_streaming(files["small"])
    finally:
        if tmp is not None:
            tmp.cleanup()

    print()
    rows = []
    for label in ("small", "large"):
        w = whole[label]
        rows.append([w["steps"], w["runs"], w["bytes"] / 2**20, w["states"], w["wall_s"], w["cpu_s"],
                     w["steps_per_s_wall"], w["steps_per_s_cpu"], w["cpu_s"] / w["wall_s"], w["rss_start_mib"],
                     w["rss_peak_mib"]])
    print(C.table(["steps", "runs", "MiB", "abstract states", "wall s", "CPU s", "steps/s (wall)", "steps/s (CPU)",
                   "CPU share", "RSS after imports MiB", "peak RSS MiB"], rows,
                  title="guard.learn_model on a JSONL file (fresh process each; 10 CEL predicates)"))
    growth = whole["large"]["rss_peak_mib"] - whole["small"]["rss_peak_mib"]
    factor = whole["large"]["steps"] / whole["small"]["steps"]
    print(f"  peak RSS grows by {growth:+.1f} MiB for {factor:.1f}x the steps "
          f"({whole['small']['bytes'] / 2**20:.0f} -> {whole['large']['bytes'] / 2**20:.0f} MiB of JSONL)")

    print()
    total_wall = sum(split["wall_s"].values())
    total_cpu = sum(split["cpu_s"].values())
    names = {"read_parse": "read + parse + validate (read_runs)", "abstraction": "abstraction (abstract_run: CEL + memo)",
             "counting": "counting (TransitionCounts.add)", "smoothing": "smoothing (learn_dtmc)",
             "check": "Storm check (check_dtmc, sound)", "pac": "PAC report (pac_report)",
             "digest": "SHA-256 of the file (provenance)"}
    rows = [[names[k], split["wall_s"][k], split["cpu_s"][k], split["cpu_s"][k] / total_cpu,
             split["steps"] / split["cpu_s"][k] if split["cpu_s"][k] > 0 else None] for k in names]
    rows.append(["total", total_wall, total_cpu, 1.0, split["steps"] / total_cpu])
    print(C.table(["phase", "wall s", "CPU s", "share (CPU)", "steps/s if alone (CPU)"], rows,
                  title=f"Phases on the large file ({split['steps']:,} steps, {split['runs']:,} runs, "
                        f"{split['states']} abstract states, {split['memo_entries']:,} memo entries)"))
    if split.get("profile"):
        print()
        print("cProfile of read + abstraction + counting on the small file (separate pass):")
        print(split["profile"])

    overall_wall = whole["large"]["steps_per_s_wall"]
    overall_cpu = whole["large"]["steps_per_s_cpu"]
    print()
    print(C.table(["target", "measured", "verdict"], [
        [">= 50,000 steps/s (learn_model, large file, CPU)", f"{overall_cpu:,.0f} steps/s",
         C.verdict(overall_cpu >= TARGET_STEPS_PER_S)],
        [">= 50,000 steps/s (learn_model, large file, wall)", f"{overall_wall:,.0f} steps/s",
         C.verdict(overall_wall >= TARGET_STEPS_PER_S)],
    ], title="Target"))

    split.pop("profile", None)
    C.write_json(args.json, {
        "benchmark": "learn_throughput",
        "config": {"steps": big_steps, "small": small_steps, "seed": args.seed, "quick": args.quick},
        "learn_model": whole, "phases": split, "rss_growth_mib": growth,
        "target_steps_per_s": TARGET_STEPS_PER_S,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
