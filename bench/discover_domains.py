"""Discovered against hand-written specs on the shipped domains: Brier and detection at 5 % and 20 % false alarms.

For each shipped domain (embodied household tasks — one spec and model per task —, driving at a
signalled junction, a tool-using agent) the domain's simulator generates runs (seeded), and an outer
grouped 5-fold cross-validation scores, on the same folds (the prompt-injection domain is tested on
tasks, attack goals and phrasings never seen in training instead: bench/_injection.py):

* the domain's hand-written spec (learned and checked with Storm);
* counting: the per-state frequency baseline over that spec's abstraction;
* discovered, nested: in each outer training fold, ``discover`` (4 inner folds, target false-alarms=0.2)
  extends the hand-written spec from those runs only, and the extended spec is learned there and
  replayed on the outer test fold.

Detection counts alarms strictly before the violation (observe enforcement) at the largest θ whose
false-alarm rate on the held-out safe runs is at most 5 % / 20 %; a state without an estimate raises
no alarm here (the table compares estimates, as bench/estimation_levers.py does). Folds: driving and
embodied group by run, tools by ``meta.task``. The runs' ``meta`` keeps the task only: the simulators
also write each run's outcome there (a label discovery would otherwise find, and did).

    python bench/discover_domains.py [--quick] [--domains embodied,driving,tools,injection] [--json FILE]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import _injection
from discover_agentspec import cross_validate, discovered, row

from _common import ROOT, write_json
from forewarn.guard.replay import RunReplay
from forewarn.guard.spec import Spec, load_spec
from forewarn.guard.traces import Run, read_runs

Part = tuple[Spec, list[Run], str | None]
# The simulators write each run's outcome into its meta (outcome, success, hazard_intent, violations,
# hazards) and which simulated driver drove it: labels and hidden causes no guard knows when a run
# starts. Only the task is kept.
KNOWN_AT_START = ("task",)


def known(runs: list[Run]) -> list[Run]:
    return [Run(id=r.id, steps=r.steps, meta={k: v for k, v in r.meta.items() if k in KNOWN_AT_START},
                source=r.source, line=r.line) for r in runs]


def driving(quick: bool, work: Path) -> list[Part]:
    from forewarn.domains.driving import spec_path
    from forewarn.domains.driving.episodes import generate_traces

    path = work / "drives.jsonl"
    generate_traces(300 if quick else 600, 11, path)
    return [(load_spec(spec_path()), known(list(read_runs(path))), None)]


def tools(quick: bool, work: Path) -> list[Part]:
    from forewarn.domains.tools.generator import generate_traces

    path = work / "tools.jsonl"
    generate_traces(300 if quick else 1200, 3, path)
    return [(load_spec(ROOT / "domains" / "tools" / "spec.yaml"), known(list(read_runs(path))), "meta.task")]


def embodied(quick: bool, work: Path) -> list[Part]:
    from forewarn.domains.embodied import generate_traces, hazard_tasks, write_spec

    out: list[Part] = []
    for task in hazard_tasks()[:4 if quick else 10]:
        trace, spec = work / f"{task.id}.jsonl", work / f"{task.id}.yaml"
        generate_traces([task], 150, 7, trace)
        write_spec(task, spec)
        out.append((load_spec(spec), known(list(read_runs(trace))), None))
    return out


DOMAINS: dict[str, Callable[[bool, Path], list[Part]]] = {"embodied": embodied, "driving": driving, "tools": tools}


def _discovered(train: list[Run], *, spec: Spec, group_by: str | None) -> Spec:
    return discovered(train, spec, group_by)


def run_domain(parts: list[Part]) -> tuple[list[dict[str, Any]], list[str]]:
    pooled: dict[str, list[RunReplay]] = {"hand-written spec": [], "counting (hand-written abstraction)": [],
                                          "discovered (nested)": [], "counting (discovered abstraction)": []}
    notes: list[str] = []
    for spec, runs, group_by in parts:
        model, counting = cross_validate(runs, spec, None, [], group_by)
        pooled["hand-written spec"] += model
        pooled["counting (hand-written abstraction)"] += counting
        added: list[str] = []
        model, counting = cross_validate(runs, spec, partial(_discovered, spec=spec, group_by=group_by), added,
                                         group_by)
        pooled["discovered (nested)"] += model
        pooled["counting (discovered abstraction)"] += counting
        notes += [f"{spec.name} {line}" for line in added]
    return [row(name, replays) for name, replays in pooled.items()], notes


def _injection_table(quick: bool, started: float, group_by: str, folds: int, target: str, seed: int
                     ) -> dict[str, Any]:
    rows, notes, runs = _injection.run(quick, group_by, folds, target, seed)
    print(f"\ninjection: {runs} runs, 4 rotations, each tested on two tasks, two attack goals and two phrasings "
          f"never seen in training ({time.perf_counter() - started:.0f} s)")
    print("| spec | Brier | warned ahead @ ≤20% benign FA (FA; resisted runs flagged) "
          "| warned ahead @ ≤5% benign FA (FA; resisted runs flagged) |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        brier = "–" if r["brier"] is None else f"{r['brier']:.4f}"
        cells = " | ".join(f"{d:.1%} ({fa:.1%}; {res:.1%})" for d, fa, res in r["detection"].values())
        print(f"| {r['name']} | {brier} | {cells} |")
    for line in notes:
        print(f"  {line}")
    sys.stdout.flush()
    return {"runs": runs, "rows": rows, "notes": notes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs and tasks")
    parser.add_argument("--domains", default="embodied,driving,tools,injection")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--injection-group-by", default=_injection.GROUP_BY,
                        help="discovery's inner grouping on the injection domain")
    parser.add_argument("--injection-folds", type=int, default=3, help="discovery's inner folds there")
    parser.add_argument("--injection-target", default=_injection.TARGET, help="discovery's target there")
    parser.add_argument("--injection-seed", type=int, default=0, help="added to the injection runs' seeds")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for domain in args.domains.split(","):
            started = time.perf_counter()
            if domain == "injection":
                results[domain] = _injection_table(args.quick, started, args.injection_group_by, args.injection_folds,
                                                   args.injection_target, args.injection_seed)
                continue
            parts = DOMAINS[domain](args.quick, Path(tmp))
            rows, notes = run_domain(parts)
            runs = sum(len(p[1]) for p in parts)
            print(f"\n{domain}: {runs} runs, {len(parts)} spec(s), grouped 5-fold "
                  f"({time.perf_counter() - started:.0f} s)")
            rates = list(rows[0]["detection"]) if rows else []
            print("| spec | Brier | " + " | ".join(f"det @ ≤{rate} FA" for rate in rates) + " |")
            print("| --- | --- | " + " | ".join("---" for _ in rates) + " |")
            for r in rows:
                brier = "–" if r["brier"] is None else f"{r['brier']:.4f}"
                cells = " | ".join(f"{d:.1%} ({fa:.1%})" for d, fa in r["detection"].values())
                print(f"| {r['name']} | {brier} | {cells} |")
            for line in notes:
                print(f"  {line}")
            sys.stdout.flush()
            results[domain] = {"runs": runs, "rows": rows, "notes": notes}
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
