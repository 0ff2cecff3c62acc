"""Predicates that read ``meta``, and bundles: per-step cost against the workaround they replace.

What it does
------------
1. Generates household runs (``_common.household_runs``) and gives each a task: run k
   is task ``t{k mod TASKS}``, and tasks 0–2 have ``hazard: "stove"`` in their ``meta``.
2. Learns three guards from the same runs:

   a. *baseline* — the workaround users had: the task's hazard copied into every step's
      state (``state.hazard``), the bench spec plus ``stove_task: state.hazard == "stove"``;
   b. *meta* — the same predicate reading the run's metadata, ``meta.hazard == "stove"``;
   c. *bundle* — the meta spec learned with ``--group-by meta.task`` (one model per task
      and a pooled one); sessions open on their task's member.

3. Times ``session.observe(state)`` one call at a time (garbage collector off, after a
   warm-up) over a fresh stream of runs (another seed), one session per run, in the
   realistic regime of ``decision_latency.py`` (read fields repeat, so most steps hit
   the predicate memo), and the time to open a session (``guard.session(metadata=...)``).
   The baseline's states carry the hazard field (built before timing).

Nothing is asserted. Target: the project's p99 ≤ 100 µs per decision, and meta or a
bundle within 1.25× the baseline's p50.

Run: ``python bench/meta_bundles.py [--quick] [--samples N] [--json FILE]``
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C
from forewarn.guard import Guard, learn_model, parse_spec
from forewarn.guard.bundle import learn_bundle
from forewarn.guard.bundle_guard import BundleGuard

TASKS = 8
TARGET_P99_US = 100.0
TARGET_RATIO = 1.25


def spec_reading(root: str) -> str:
    return C.SPEC_YAML.replace("predicates:\n", f"predicates:\n  stove_task: '{root}.hazard == \"stove\"'\n", 1)


def tasked(runs: Any) -> list[dict[str, Any]]:
    out = []
    for k, run in enumerate(runs):
        task = k % TASKS
        run["meta"] = {**run["meta"], "task": f"t{task}", "hazard": "stove" if task < 3 else "none"}
        out.append(run)
    return out


def copied(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The workaround: the hazard copied into every state."""
    return [{**run, "steps": [{**s, "state": {**s["state"], "hazard": run["meta"]["hazard"]}} for s in run["steps"]]}
            for run in runs]


def time_sessions(guard: Any, runs: list[dict[str, Any]], warmup: int, samples: int) -> tuple[list[int], list[int]]:
    clock = time.perf_counter_ns
    steps: list[int] = []
    opens: list[int] = []
    seen = 0
    with C.gc_paused():
        for run in runs:
            t0 = clock()
            session = guard.session(metadata=run["meta"])
            opens.append(clock() - t0)
            observe = session.observe
            for step in run["steps"]:
                state = step["state"]
                if seen < warmup:
                    observe(state)
                    seen += 1
                    continue
                t0 = clock()
                observe(state)
                steps.append(clock() - t0)
                if len(steps) >= samples:
                    return steps, opens
    return steps, opens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--samples", type=int, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    train_steps = 20_000 if args.quick else 60_000
    samples = args.samples or (5_000 if args.quick else 20_000)
    warmup = samples // 5
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        runs = tasked(C.household_runs(train_steps, seed=1))
        C.write_jsonl(folder / "meta.jsonl", iter(runs))
        C.write_jsonl(folder / "copied.jsonl", iter(copied(runs)))
        meta_spec, state_spec = parse_spec(spec_reading("meta")), parse_spec(spec_reading("state"))
        started = time.perf_counter()
        baseline = Guard(learn_model([folder / "copied.jsonl"], state_spec))
        learn_baseline = time.perf_counter() - started
        started = time.perf_counter()
        with_meta = Guard(learn_model([folder / "meta.jsonl"], meta_spec))
        learn_meta = time.perf_counter() - started
        started = time.perf_counter()
        bundle = BundleGuard(learn_bundle([folder / "meta.jsonl"], meta_spec, group_by="meta.task", min_group_runs=5))
        learn_bundle_s = time.perf_counter() - started
    fresh = tasked(C.household_runs(warmup + samples + 2_000, seed=2))
    rows = []
    results: dict[str, Any] = {}
    for name, guard, stream, learn_s in (("baseline: state.hazard (copied)", baseline, copied(fresh), learn_baseline),
                                         ("meta.hazard", with_meta, fresh, learn_meta),
                                         (f"bundle by meta.task ({len(bundle.bundle.members)} members)", bundle, fresh,
                                          learn_bundle_s)):
        steps, opens = time_sessions(guard, stream, warmup, samples)
        s, o = C.summarize_ns(steps), C.summarize_ns(opens)
        results[name] = {"observe": s, "session_open": o, "learn_seconds": learn_s}
        rows.append([name, s["p50_us"], s["p99_us"], s["mean_us"], o["p50_us"], learn_s])
    base_p50 = results["baseline: state.hazard (copied)"]["observe"]["p50_us"]
    print(C.table(["guard", "observe p50 µs", "p99 µs", "mean µs", "session open p50 µs", "learn s"], rows,
                  title=f"per-step decisions, {samples} timed steps each (machine load {C.machine()['loadavg']})"))
    for name, r in results.items():
        ratio = r["observe"]["p50_us"] / base_p50
        print(f"{name}: p50 {ratio:.2f}× the baseline (target ≤ {TARGET_RATIO}×) {C.verdict(ratio <= TARGET_RATIO)}; "
              f"p99 {r['observe']['p99_us']:.1f} µs (target ≤ {TARGET_P99_US}) "
              f"{C.verdict(r['observe']['p99_us'] <= TARGET_P99_US)}")
    C.write_json(args.json, {"machine": C.machine(), "samples": samples, "results": results})


if __name__ == "__main__":
    main()
