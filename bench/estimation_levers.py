"""Estimation levers against counting: Brier score and detection at matched false alarms, per domain.

For each shipped domain (embodied household tasks, driving at a signalled junction, a
tool-using agent) the script generates logged runs with the domain's simulator and runs
grouped k-fold evaluation (guard/evaluation/evaluate.py) once per lever: a spec variant
whose ``learning:`` block switches one lever on. Beside them it scores the per-state
empirical frequency baseline that ``forewarn evaluate`` reports (fitted on the same
training folds).

Figures, pooled over every held-out run of every fold (and, for embodied, every task):

* **Brier**: per-step Brier score of p_unsafe against "the run goes on to violate",
  over the steps where *both* the lever and the empirical frequency give a risk (the
  frequency has none for a state it never saw); ``covered`` is the share of steps the
  row's method scores at all.
* **det@5%**, **det@20%**: detection at a matched false-alarm rate. θ is picked per
  target (no interpolation): the largest θ whose false-alarm rate on the held-out safe
  runs is at most the target; the rate reached is shown beside it. A run is flagged
  when p_safe < θ at some step strictly before its violation (``--enforcement observe``;
  with look-ahead every method would flag the violating step itself). A state without an estimate
  raises no alarm here, whatever the spec's ``unseen_state`` says: the table compares
  estimates, not the policy for states without data (which would flag a run the same
  way whichever estimate is used).
* With one model per task (embodied), also **det@5%/det@20%, θ per task**: each model
  read at its own θ (as ``forewarn tune`` picks per model), off its ROC curve at exactly
  the target rate (linear between the points thresholds reach), pooled weighted by
  violating runs; and the **start-risk error**, the mean over models of |mean risk at
  the first step − the model's held-out violation rate|. One θ shared by many models
  flags whole tasks by their start risk (bench/README.md, "estimation_levers.py").

Folds: driving and embodied group by run (every run is its own seeded simulation);
tools and the prompt-injection domain (``injection``, its hand-written spec, half of the runs attacked) group
by ``meta.task``, so a task's runs are never on both sides; AgentSpec's real logs
(``agentspec``: read from ``../shared/data/agentspec-embodied/`` as bench/discover_agentspec.py
reads them, with its generic spec; skipped when the data is absent) by the file a run came from,
one fold per file, as a new user holds out a log of their own.

After the tables, one summary: per domain the default's Brier beside counting's on the same steps,
and beside the previous release's default (0.3, measured with this script at commit 369987e;
:data:`PREVIOUS`), so a regression against either shows in one run.

    python bench/estimation_levers.py [--quick] [--domains embodied,driving,tools,injection,agentspec] [--json FILE]
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _common import ROOT, write_json
from forewarn.guard.evaluation.baselines import EMPIRICAL
from forewarn.guard.evaluation.evaluate import evaluate
from forewarn.guard.evaluation.folds import group_of
from forewarn.guard.replay import RunReplay
from forewarn.guard.spec import MemorySettings, Spec, load_spec
from forewarn.guard.storm import Method
from forewarn.guard.traces import Run, read_runs

TARGETS = (0.05, 0.20)
LEVERS: dict[str, dict[str, Any]] = {
    "chain (no lever)": {},
    "structure: observed": {"structure": "observed"},
    "memory: dwell 64": {"memory": {"dwell": 64}},
    "memory: previous": {"memory": {"previous": True}},
    "memory: dwell 64 + previous": {"memory": {"dwell": 64, "previous": True}},
    "shrink: auto": {"shrink": "auto"},
    "memory: actions 1": {"memory": {"actions": 1}},
    "memory: actions 2": {"memory": {"actions": 2}},
    "memory: actions 2, verb": {"memory": {"actions": 2, "action_class": "verb"}},
    "memory: actions 2 + dwell 64 + previous": {"memory": {"actions": 2, "dwell": 64, "previous": True}},
    "kinds: auto": {"kinds": "auto"},
    "kinds: 2": {"kinds": 2},
}


@dataclass
class Row:
    name: str
    brier: float
    covered: float
    detection: list[tuple[float, float]]  # per target: (detection, false-alarm rate reached)
    per_model: list[float]  # detection with each model (one per task) at its own θ, ROC-interpolated
    start_error: float  # mean over models of |mean start risk − the model's held-out violation rate|
    seconds: float
    reference_brier: float | None  # the empirical frequency's Brier on the same steps


def variant(spec: Spec, lever: dict[str, Any] | None) -> Spec:
    """The spec with no lever but the one given (its α kept); ``None``: the spec as the domain ships it."""
    if lever is None:
        return spec
    update: dict[str, Any] = {"shrink": "off", "memory": {}, **lever}
    update["memory"] = MemorySettings(**update["memory"])
    return spec.model_copy(update={"learning": spec.learning.model_copy(update=update)})


def detection_at(replays: Sequence[RunReplay], target: float, unseen_alarms: bool) -> tuple[float, float]:
    """(detection, false-alarm rate) at the largest θ whose false-alarm rate is at most ``target``."""
    # strictly before the violation (``observe`` enforcement): looking ahead, every method
    # would flag the violating step itself, whose risk is 1 whatever estimated it
    safe = np.sort([r.min_p_safe(unseen_alarms, lookahead=False) for r in replays if not r.unsafe])
    unsafe = np.array([r.min_p_safe(unseen_alarms, lookahead=False) for r in replays if r.unsafe])
    k = math.floor(target * len(safe) + 1e-9)
    theta = safe[k] if k < len(safe) else math.inf  # alarms where p_safe < θ: at most k safe runs
    return float((unsafe < theta).mean()), float((safe < theta).mean())


def detection_interpolated(replays: Sequence[RunReplay], target: float, unseen_alarms: bool) -> float:
    """Detection at false-alarm rate exactly ``target`` on the ROC curve, linear between the
    points thresholds reach: a θ drawn at random between two neighbouring ones (ties in the
    risk make the rates jump, so a fixed θ reaches few rates on a hundred runs)."""
    safe = np.array([r.min_p_safe(unseen_alarms, lookahead=False) for r in replays if not r.unsafe])
    unsafe = np.array([r.min_p_safe(unseen_alarms, lookahead=False) for r in replays if r.unsafe])
    if not len(safe) or not len(unsafe):
        return math.nan
    values = np.unique(np.concatenate([safe, unsafe]))
    values = values[np.isfinite(values)]
    fa = np.concatenate([[0.0], [(safe <= v).mean() for v in values], [1.0]])
    det = np.concatenate([[0.0], [(unsafe <= v).mean() for v in values], [1.0]])
    xs = np.unique(fa)
    return float(np.interp(target, xs, [det[fa == x].max() for x in xs]))


def detection_per_model(parts: Sequence[Sequence[RunReplay]], target: float, unseen_alarms: bool) -> float:
    """Detection pooled over models (weighted by violating runs), each model on its own ROC curve."""
    weights = [sum(r.unsafe for r in replays) for replays in parts]
    values = [detection_interpolated(replays, target, unseen_alarms) for replays in parts]
    pairs = [(w, v) for w, v in zip(weights, values) if not math.isnan(v)]
    return sum(w * v for w, v in pairs) / max(sum(w for w, _ in pairs), 1)


def start_error(parts: Sequence[Sequence[RunReplay]]) -> float:
    """Mean over models of |mean risk at the first step − share of held-out runs that violate|."""
    errors = [abs(float(np.mean([r.p_unsafe[0] for r in replays])) - float(np.mean([r.unsafe for r in replays])))
              for replays in parts if replays and all(r.p_unsafe and r.p_unsafe[0] is not None for r in replays)]
    return float(np.mean(errors)) if errors else math.nan


def paired_brier(model: Sequence[RunReplay], other: Sequence[RunReplay]) -> tuple[float, float, float, float]:
    """Brier of both over the steps both score; and each one's share of steps scored."""
    a_sum = b_sum = 0.0
    both = scored_a = scored_b = total = 0
    for a, b in zip(model, other):
        end = a.violation if a.violation is not None else len(a.p_unsafe)
        y = float(a.violation is not None)
        for pa, pb in zip(a.p_unsafe[:end], b.p_unsafe[:end]):
            total += 1
            scored_a += pa is not None
            scored_b += pb is not None
            if pa is not None and pb is not None:
                both += 1
                a_sum += (pa - y) ** 2
                b_sum += (pb - y) ** 2
    return a_sum / max(both, 1), b_sum / max(both, 1), scored_a / max(total, 1), scored_b / max(total, 1)


# -- domains: lists of (spec, runs, group_by) evaluated separately and pooled ------------------

def driving(quick: bool, work: Path) -> list[tuple[Spec, list[Run], str | None]]:
    from forewarn.domains.driving import spec_path
    from forewarn.domains.driving.episodes import generate_traces

    path = work / "drives.jsonl"
    generate_traces(300 if quick else 1000, 11, path)
    return [(load_spec(spec_path()), list(read_runs(path)), None)]


def tools(quick: bool, work: Path) -> list[tuple[Spec, list[Run], str | None]]:
    from forewarn.domains.tools.generator import generate_traces

    path = work / "tools.jsonl"
    generate_traces(300 if quick else 1200, 3, path)
    return [(load_spec(ROOT / "domains" / "tools" / "spec.yaml"), list(read_runs(path)), "meta.task")]


def embodied(quick: bool, work: Path) -> list[tuple[Spec, list[Run], str | None]]:
    from forewarn.domains.embodied import generate_traces, hazard_tasks, write_spec

    out: list[tuple[Spec, list[Run], str | None]] = []
    for task in hazard_tasks()[:10 if quick else None]:
        trace, spec = work / f"{task.id}.jsonl", work / f"{task.id}.yaml"
        generate_traces([task], 100 if quick else 150, 7, trace)
        write_spec(task, spec)
        out.append((load_spec(spec), list(read_runs(trace)), None))
    return out


def injection(quick: bool, work: Path) -> list[tuple[Spec, list[Run], str | None]]:
    from forewarn.domains.injection import SPEC_PATH, generate_runs

    # meta keeps the task only (the attack's labels are no guard's to know); folds hold out whole tasks
    runs = [Run(id=r["id"], steps=r["steps"], meta={"task": r["meta"]["task"]}, source="<generated>", line=0)
            for r in generate_runs(400 if quick else 1200, 5)]
    return [(load_spec(SPEC_PATH), runs, "meta.task")]


def agentspec(quick: bool, work: Path) -> list[tuple[Spec, list[Run], str | None]]:
    import discover_agentspec as logs

    from forewarn.guard.spec import parse_spec

    if not logs.DATA.exists():
        return []
    runs = [Run(id=r.id, steps=r.steps, meta={**r.meta, "file": r.source}, source=r.source, line=r.line)
            for r in logs.load(logs.DATA)]
    return [(parse_spec(logs.GENERIC_SPEC), runs, "meta.file")]


DOMAINS: dict[str, Callable[[bool, Path], list[tuple[Spec, list[Run], str | None]]]] = {
    "embodied": embodied, "driving": driving, "tools": tools, "injection": injection, "agentspec": agentspec}

# The previous release's default (0.3, commit 369987e) and counting, measured with this script: per mode, per
# domain, (default's Brier, counting's on the same steps).
PREVIOUS: dict[str, dict[str, tuple[float, float]]] = {
    "quick": {"driving": (0.0749, 0.0754), "tools": (0.0811, 0.0793), "embodied": (0.1594, 0.1732),
              "agentspec": (0.0663, 0.0641)},
    "full": {},
}


def run_domain(parts: list[tuple[Spec, list[Run], str | None]], folds: int,
               levers: dict[str, dict[str, Any]] | None = None) -> tuple[list[Row], int, int]:
    """One row per lever (all of :data:`LEVERS` by default), then the default and the empirical
    frequency; and the runs and violating runs."""
    rows = []
    reference: Row | None = None
    unseen_alarms = False  # estimates are compared, not the policy for states without data
    runs = unsafe = 0
    for name, lever in [*(LEVERS if levers is None else levers).items(), ("default: the shipped spec", None)]:
        started = time.perf_counter()
        model: list[RunReplay] = []
        empirical: list[RunReplay] = []
        model_parts: list[list[RunReplay]] = []
        empirical_parts: list[list[RunReplay]] = []
        for spec, part, group_by in parts:
            groups = len({group_of(r, group_by) for r in part})  # one fold per group at most (agentspec's files)
            report = evaluate(part, variant(spec, lever), [0.5], folds=min(folds, groups), group_by=group_by,
                              method=Method.TOPOLOGICAL)
            model_parts.append(list(report.pooled.replays))
            empirical_parts.append(list(report.pooled.baselines[EMPIRICAL].replays))
            model += model_parts[-1]
            empirical += empirical_parts[-1]
        seconds = time.perf_counter() - started
        brier, brier_empirical, covered, covered_empirical = paired_brier(model, empirical)
        rows.append(Row(name, brier, covered, [detection_at(model, t, unseen_alarms) for t in TARGETS],
                        [detection_per_model(model_parts, t, unseen_alarms) for t in TARGETS],
                        start_error(model_parts), seconds, brier_empirical))
        if reference is None:  # the frequency is fitted on the same folds whatever the lever
            runs, unsafe = len(model), sum(r.unsafe for r in model)
            reference = Row("empirical frequency", brier_empirical, covered_empirical,
                            [detection_at(empirical, t, unseen_alarms) for t in TARGETS],
                            [detection_per_model(empirical_parts, t, unseen_alarms) for t in TARGETS],
                            start_error(empirical_parts), 0.0, None)
        print(f"  {name:<28} {seconds:6.1f} s", file=sys.stderr, flush=True)
    assert reference is not None
    return rows + [reference], runs, unsafe


def print_table(domain: str, rows: list[Row], runs: int, unsafe: int, models: int) -> None:
    print(f"\n{domain}: {runs} runs ({unsafe} violate), {models} model(s), grouped {FOLDS}-fold")
    per_model = models > 1  # one model per task: also each model at its own θ
    extra = " det@5%, θ per task | det@20%, θ per task | start-risk error |" if per_model else ""
    print("| lever | Brier | frequency's Brier, same steps | steps scored | det@5% (FA) | det@20% (FA) |" + extra)
    print("| --- | --- | --- | --- | --- | --- |" + " --- | --- | --- |" * bool(per_model))
    for r in rows:
        ref = "" if r.reference_brier is None else f"{r.reference_brier:.4f}"
        dets = " | ".join(f"{d:.3f} ({fa:.3f})" for d, fa in r.detection)
        if per_model:
            dets += " | " + " | ".join(f"{d:.3f}" for d in r.per_model) + f" | {r.start_error:.4f}"
        print(f"| {r.name} | {r.brier:.4f} | {ref} | {r.covered:.3f} | {dets} |")


def print_summary(results: dict[str, Any], previous: dict[str, tuple[float, float]]) -> None:
    """The default beside counting (same steps) and beside the previous release's default, per domain."""
    print("\nsummary: the default estimator against counting and against the previous release (0.3)")
    print("| domain | default's Brier | counting's, same steps | default − counting | 0.3 default (counting) |")
    print("| --- | --- | --- | --- | --- |")
    for domain, result in results.items():
        default = next(r for r in result["rows"] if r["name"] == "default: the shipped spec")
        before = previous.get(domain)
        was = "not measured" if before is None else f"{before[0]:.4f} ({before[1]:.4f})"
        print(f"| {domain} | {default['brier']:.4f} | {default['reference_brier']:.4f} | "
              f"{default['brier'] - default['reference_brier']:+.4f} | {was} |")


FOLDS = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs and tasks")
    parser.add_argument("--domains", default="embodied,driving,tools,injection,agentspec")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--levers", help="semicolon-separated lever names to run (default: all); e.g. "
                        "'chain (no lever);memory: actions 2'")
    args = parser.parse_args()
    chosen = None if args.levers is None else {name: LEVERS[name] for name in args.levers.split(";")}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for domain in args.domains.split(","):
            started = time.perf_counter()
            parts = DOMAINS[domain](args.quick, Path(tmp))
            if not parts:
                print(f"{domain}: no runs (data absent), skipped", file=sys.stderr)
                continue
            print(f"{domain}: runs generated in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            rows, runs, unsafe = run_domain(parts, FOLDS, chosen)
            print_table(domain, rows, runs, unsafe, len(parts))
            results[domain] = {"runs": runs, "rows": [r.__dict__ for r in rows]}
    print_summary(results, PREVIOUS["quick" if args.quick else "full"])
    if args.json:
        write_json(args.json, {"folds": FOLDS, "targets": TARGETS, "results": results})


if __name__ == "__main__":
    main()
