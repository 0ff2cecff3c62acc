"""How long ``forewarn discover`` takes on 10,000 runs × 20 steps with 200 candidate fields.

The runs are generated in memory (seeded): each state has 200 fields — 100 numbers, 50
Booleans, 40 strings of 2–8 values and 10 short lists — of which two matter (a run with
``f_num_0 > 0.8`` at its start, or whose ``f_str_0`` becomes ``"v3"``, goes on to violate
more often); the spec has one predicate, ``state.crashed``, which is the violation.

Printed: the wall time of each phase of :func:`forewarn.guard.discovery.discover.discover`
(tracing with the spec, reading the fields into columns, proposing candidates, the
search) with the confirmation by the real learner timed apart, against the target of
60 s for the discovery on this 2-core machine (and the process's CPU time: the machine is shared,
and under load the wall time is several times the CPU time), where the wall time went (the share
of a core the process got, its involuntary and voluntary context switches, major page faults and
peak memory), and what was found.

    python bench/discover_scale.py [--runs 10000] [--steps 20] [--fields 200] [--confirm] [--json FILE]
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import time
from typing import Any

from _common import write_json
from forewarn.guard.discovery.discover import discover
from forewarn.guard.evaluation.tune import parse_target
from forewarn.guard.spec import parse_spec
from forewarn.guard.traces import Run

SPEC = """\
name: scale
predicates:
  crashed: 'state.crashed'
unsafe: 'crashed'
"""
TARGET_SECONDS = 60.0


def make_runs(runs: int, steps: int, fields: int, seed: int = 1) -> list[Run]:
    rng = random.Random(seed)
    numbers, bools, strings = fields // 2, fields // 4, fields // 5
    lists = fields - numbers - bools - strings
    out = []
    for r in range(runs):
        base: dict[str, Any] = {f"f_num_{i}": round(rng.random(), 3) for i in range(numbers)}
        base.update({f"f_bool_{i}": rng.random() < 0.3 for i in range(bools)})
        base.update({f"f_str_{i}": f"v{rng.randrange(2 + i % 7)}" for i in range(strings)})
        base.update({f"f_list_{i}": [f"e{rng.randrange(5)}" for _ in range(rng.randrange(3))] for i in range(lists)})
        risky = base["f_num_0"] > 0.8
        length = steps
        state_steps = []
        violated = False
        for k in range(length):
            state = dict(base)
            state["f_num_1"] = round(rng.random(), 3)  # changes every step
            state["f_bool_1"] = rng.random() < 0.5
            if rng.random() < 0.05:
                state["f_str_0"] = "v3"
                base["f_str_0"] = "v3"
            p = 0.02 + (0.08 if risky else 0.0) + (0.08 if base["f_str_0"] == "v3" else 0.0)
            violated = violated or (k > 2 and rng.random() < p)
            state["crashed"] = violated  # once violated, stays so (the learner reads up to the first)
            state_steps.append({"state": state, "action": f"act{rng.randrange(4)} o{rng.randrange(3)}"})
        out.append(Run(id=f"run-{r}", steps=state_steps, meta={"task": f"t{r % 50}"}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--fields", type=int, default=200)
    parser.add_argument("--confirm", action="store_true", help="also confirm with the real learner (timed apart)")
    parser.add_argument("--json")
    args = parser.parse_args()
    started = time.perf_counter()
    runs = make_runs(args.runs, args.steps, args.fields)
    steps = sum(len(r.steps) for r in runs)
    print(f"generated {len(runs)} runs, {steps} steps, {args.fields} fields in {time.perf_counter() - started:.1f} s")
    phases: list[tuple[str, float]] = []
    last = [time.perf_counter()]

    def progress(text: str) -> None:
        now = time.perf_counter()
        phases.append((text, now - last[0]))
        last[0] = now

    spec = parse_spec(SPEC)
    cpu = time.process_time()
    started = time.perf_counter()
    report = discover(runs, spec, target=parse_target("false-alarms=0.1"), folds=5, group_by="meta.task",
                      confirm=args.confirm, on_progress=progress, time_limit=3600)
    total = time.perf_counter() - started
    cpu = time.process_time() - cpu
    progress("end")
    confirm_seconds = phases[-1][1] if args.confirm else 0.0
    seconds = total - confirm_seconds
    print("phase times (each line: the phase that ended there):")
    for (name, _), (_, took) in zip([("start", 0.0)] + phases[:-1], phases):
        print(f"  {took:7.2f} s  {name}")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"discover: {seconds:.1f} s wall (target ≤ {TARGET_SECONDS:.0f} s: "
          f"{'MET' if seconds <= TARGET_SECONDS else 'NOT MET'}), {cpu:.1f} s CPU of this process "
          f"(CPU ≤ {TARGET_SECONDS:.0f} s: {'MET' if cpu <= TARGET_SECONDS else 'NOT MET'}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
          + (f"; confirmation by the real learner {confirm_seconds:.1f} s more (wall)" if args.confirm else ""))
    # where the wall time goes: a single process (no pool), so wall ≈ CPU / the share of a core it was given;
    # waiting on I/O would show as voluntary switches and major faults, preemption as involuntary switches
    print(f"where the wall time went: {cpu / max(total, 1e-9):.0%} of a core while it ran; "
          f"{usage.ru_nivcsw} involuntary context switches (preempted by other processes), {usage.ru_nvcsw} "
          f"voluntary (waits on I/O or locks), {usage.ru_majflt} major page faults, peak RSS "
          f"{usage.ru_maxrss / 1024:.0f} MiB")
    print(f"{report.fields} fields, {report.candidates} candidates, skipped: {report.skipped.total}; "
          f"stopped: {report.stopped}")
    for name, s in zip(report.names, report.added):
        print(f"  added {name}: {s.cel}  Brier {s.before.brier:.4f} → {s.after.brier:.4f}, "
              f"detection {s.before.detection:.1%} → {s.after.detection:.1%}")
    if args.json:
        write_json(args.json, {"runs": len(runs), "steps": steps, "fields": args.fields, "seconds": seconds,
                               "cpu_seconds": cpu, "load_average": os.getloadavg()[0],
                               "confirm_seconds": confirm_seconds, "target_seconds": TARGET_SECONDS,
                               "added": [s.cel for s in report.added]})


if __name__ == "__main__":
    main()
