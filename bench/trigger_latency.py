"""Decision latency under the increase trigger, next to the level trigger, in one process.

Under ``trigger: increase`` a decision depends on the product state *and* on the run's
current risk, so decisions are cached per (state, risk) pair instead of per state, and
``observe`` also records the committed step's risk. This script measures what that costs.

What it does: learns the household model of ``decision_latency.py`` (``_common``), then
times ``session.observe(state)`` one call at a time (``perf_counter_ns``, GC off, after a
warm-up) over the same fresh stream of household runs, one session per run, three ways:
level (the baseline: what every guard did before), increase with ``min_increase`` 0, and
increase with 0.05. It prints p50/p90/p99 per row, the decision-cache size, and whether
p99 stays within the 100 µs target. Nothing is asserted.

Run: ``python bench/trigger_latency.py [--quick] [--samples N] [--json FILE]``
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C
from forewarn.guard import Guard, Policy, learn_model, parse_spec

TARGET_P99_US = 100.0


def time_observe(guard: Guard, runs: list[list[dict[str, Any]]], warmup: int, samples: int) -> list[int]:
    clock = time.perf_counter_ns
    out: list[int] = []
    seen = 0
    with C.gc_paused():
        for run in runs:
            observe = guard.session().observe
            for state in run:
                if seen < warmup:
                    observe(state)
                    seen += 1
                    continue
                t0 = clock()
                observe(state)
                out.append(clock() - t0)
                if len(out) >= samples:
                    return out
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a few seconds)")
    parser.add_argument("--samples", type=int, help="timed observe() calls per row (default 20000)")
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    samples = args.samples or (4000 if args.quick else 20000)
    train_steps = 10000 if args.quick else 30000

    spec = parse_spec(C.SPEC_YAML)
    with tempfile.TemporaryDirectory(prefix="forewarn-bench-") as tmp:
        traces = Path(tmp) / "train.jsonl"
        C.write_jsonl(traces, C.household_runs(train_steps, seed=args.seed))
        model = learn_model([traces], spec)
    stream = [[step["state"] for step in run["steps"]]
              for run in C.household_runs(args.warmup + samples + 500, seed=args.seed + 1000)]
    base = Policy.from_settings(model.spec.guard)
    rows, results = [], {}
    for name, policy in [("level (baseline)", base.with_overrides({"trigger": "level"})),
                         ("increase, min_increase 0", base.with_overrides({"trigger": "increase"})),
                         ("increase, min_increase 0.05", base.with_overrides({"trigger": "increase",
                                                                              "min_increase": 0.05}))]:
        guard = Guard(model, policy=policy)
        figures = C.summarize_ns(time_observe(guard, stream, args.warmup, samples))
        figures["decision_cache_entries"] = len(guard._decisions)
        results[name] = figures
        rows.append([name, figures["p50_us"], figures["p90_us"], figures["p99_us"], figures["max_us"],
                     figures["decision_cache_entries"], C.verdict(figures["p99_us"] <= TARGET_P99_US)])
    print(f"model: {model.dtmc.size} states; {samples} timed observe() calls per row")
    print(C.table(["trigger", "p50 µs", "p90 µs", "p99 µs", "max µs", "cached decisions", "p99 ≤ 100 µs"], rows))
    C.write_json(args.json, {"samples": samples, "results": results, "target_p99_us": TARGET_P99_US})
    return 0


if __name__ == "__main__":
    sys.exit(main())
