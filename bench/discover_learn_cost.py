"""What discovery on learning costs (issue 39, item 7): ``learn`` with discovery on 10,000 runs × 20 steps,
beside ``learn`` without it, and the discovered spec's decision latency beside the spec's own.

The runs are :mod:`discover_scale`'s (seeded, in memory): ``--fields`` fields a state, two of which tell
whether a run goes on to violate (``f_num_0 > 0.8`` at its start, ``f_str_0`` turning ``"v3"``), and a
text action a step; the spec has one predicate, the violation itself (``state.crashed``).

Printed, in one process:

* ``learn`` without discovery: the model learned from the spec (wall and CPU seconds);
* ``learn`` with discovery (``discover: auto``, ``--discover``): discovery on the same runs, confirmation by
  the real learner included (:func:`forewarn.guard.discovery.auto.discover_for_learning`), then the model
  learned from the spec it wrote; its total against the target of 2 minutes on 2 cores;
* the decision latency of each model (``Session.observe`` with the step's action, one call at a time,
  :func:`decision_latency.time_observe`, on a fresh stream of runs of another seed): p50 and p99 against the
  target p99 ≤ 100 µs.

The machine is shared: the CPU seconds say what the process itself spent (the wall time is several times that
under load). Nothing is asserted.

    python bench/discover_learn_cost.py [--runs 10000] [--steps 20] [--fields 40] [--samples 20000] [--json FILE]
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any

from decision_latency import TARGET_P99_US, time_observe
from discover_scale import SPEC, make_runs

from _common import write_json
from forewarn.guard.discovery.auto import discover_for_learning
from forewarn.guard.pipeline import learn_model_from_runs
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import Spec, parse_spec
from forewarn.guard.storm import Method
from forewarn.guard.traces import Run

TARGET_SECONDS = 120.0


def timed(work: Any) -> tuple[Any, float, float]:
    """``work()``, its wall and CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def percentile(samples: list[int], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e3  # µs


def latency(spec: Spec, runs: list[Run], fresh: list[Run], samples: int) -> tuple[float, float, int]:
    """p50 and p99 (µs) of one decision with the model of ``spec`` learned on ``runs``, and the chain's states."""
    model = learn_model_from_runs(runs, spec, method=Method.TOPOLOGICAL)
    stream = [[(step["state"], step.get("action")) for step in run.steps] for run in fresh]
    ns, _ = time_observe(Guard(model), stream, warmup=min(2000, samples // 4), samples=samples, actions=True)
    return percentile(ns, 0.5), percentile(ns, 0.99), int(model.provenance["chain_states"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--fields", type=int, default=40)
    parser.add_argument("--samples", type=int, default=20_000, help="decisions timed per model")
    parser.add_argument("--json")
    args = parser.parse_args()
    runs = make_runs(args.runs, args.steps, args.fields)
    fresh = make_runs(max(args.samples // args.steps + 200, 200), args.steps, args.fields, seed=2)
    spec = parse_spec(SPEC)
    print(f"{len(runs)} runs × {args.steps} steps, {args.fields} fields; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores")
    _, plain_wall, plain_cpu = timed(lambda: learn_model_from_runs(runs, spec, method=Method.TOPOLOGICAL))
    print(f"learn without discovery: {plain_wall:.1f} s wall, {plain_cpu:.1f} s CPU")
    found, disc_wall, disc_cpu = timed(lambda: discover_for_learning(runs, spec, group_by="meta.task",
                                                                     time_limit=3600))
    _, learn_wall, learn_cpu = timed(lambda: learn_model_from_runs(runs, found.spec, method=Method.TOPOLOGICAL))
    wall, cpu = disc_wall + learn_wall, disc_cpu + learn_cpu
    verdict = "MET" if wall <= TARGET_SECONDS else ("MET in CPU" if cpu <= TARGET_SECONDS else "NOT MET")
    print(f"learn with discovery: {wall:.1f} s wall, {cpu:.1f} s CPU (discovery {disc_wall:.1f} s wall, "
          f"{disc_cpu:.1f} s CPU; then learning {learn_wall:.1f} s); target ≤ {TARGET_SECONDS:.0f} s: {verdict}; "
          f"{wall / max(plain_wall, 1e-9):.1f}× learn without discovery")
    print(f"  {found.line()}")
    own50, own99, own_states = latency(spec, runs, fresh, args.samples)
    new50, new99, new_states = latency(found.spec, runs, fresh, args.samples)
    print(f"decision, the spec's own ({own_states} chain states): p50 {own50:.1f} µs, p99 {own99:.1f} µs")
    print(f"decision, the discovered spec ({new_states} chain states): p50 {new50:.1f} µs, p99 {new99:.1f} µs; "
          f"target p99 ≤ {TARGET_P99_US:.0f} µs: {'MET' if new99 <= TARGET_P99_US else 'NOT MET'}")
    if args.json:
        write_json(args.json, {"runs": len(runs), "steps": args.steps, "fields": args.fields,
                               "learn": {"wall": plain_wall, "cpu": plain_cpu},
                               "learn_with_discovery": {"wall": wall, "cpu": cpu, "discovery_wall": disc_wall,
                                                        "discovery_cpu": disc_cpu},
                               "target_seconds": TARGET_SECONDS, "discovery": found.line(),
                               "decision_us": {"own": {"p50": own50, "p99": own99},
                                               "discovered": {"p50": new50, "p99": new99}},
                               "target_p99_us": TARGET_P99_US, "load_average": os.getloadavg()[0]})


if __name__ == "__main__":
    main()
