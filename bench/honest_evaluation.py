"""Warned ahead against blocked at the step, and the bundle-matched baseline against the pooled one.

Cross-validates a spec on runs grouped by ``--group-by`` (the runs of a task stay in one fold), once as a
pooled model and once as a bundle by ``--bundle-by``, under look-ahead, and prints per θ:

* the old single figure (``detection``) beside its two parts, ``warned ahead`` (an alarm strictly before the
  violating step) and ``blocked at step`` (only the look-ahead on the violating step itself);
* for the bundle, the empirical-frequency baseline counted per member (what ``evaluate`` now reports) beside
  the same baseline counted over all runs (what it reported before), on the same folds.

Usage::

    python bench/honest_evaluation.py RUNS.jsonl --spec SPEC.yaml [--group-by none|meta.KEY] [--bundle-by meta.task]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from forewarn.guard.evaluation.baselines import EMPIRICAL, score_baselines, trace_run
from forewarn.guard.evaluation.evaluate import evaluate, scoring_of
from forewarn.guard.evaluation.folds import group_of, split_folds
from forewarn.guard.monitoring import build_monitors
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.replay import ReplayReport, summarize
from forewarn.guard.spec import load_spec
from forewarn.guard.traces import read_runs


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def row(label: str, report: ReplayReport, theta: float) -> str:
    t = next(x for x in report.thetas if x.theta == theta)
    return (f"| {label} | {theta:g} | {pct(t.detection_rate)} | {pct(t.warned_ahead_rate)} | "
            f"{pct(t.blocked_at_step_rate)} | {pct(t.false_alarm_rate)} | "
            f"{'–' if report.brier is None else f'{report.brier:.4f}'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", type=Path)
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--group-by", default="none", help="meta.KEY, or none (each run alone)")
    parser.add_argument("--bundle-by", default="meta.task")
    parser.add_argument("--min-group-runs", type=int, default=10)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--theta", default="0.3,0.5,0.7")
    args = parser.parse_args()
    thetas = [float(x) for x in args.theta.split(",")]
    if args.group_by == "none":  # every run alone: a task's runs spread over the folds, so its member is tested
        args.group_by = None
    spec = load_spec(args.spec)
    runs = list(read_runs(args.traces))
    print(f"{len(runs)} runs, {len({group_of(r, args.group_by) for r in runs})} groups by {args.group_by}, "
          f"{args.folds} folds, look-ahead", file=sys.stderr)
    pooled = evaluate(runs, spec, thetas, folds=args.folds, group_by=args.group_by)
    bundled = evaluate(runs, spec, thetas, folds=args.folds, group_by=args.group_by, bundle_by=args.bundle_by,
                       min_group_runs=args.min_group_runs)
    # the baseline as it was reported beside a bundle before: counted over all training runs, same folds
    predicates, monitors = PredicateSet(spec), build_monitors(spec)
    traced = [trace_run(r, predicates, monitors) for r in runs]
    groups = [group_of(r, args.group_by) for r in runs]
    assignment = split_folds(groups, [t.unsafe for t in traced], args.folds, seed=0, key=args.group_by)
    scoring = scoring_of(spec, "lookahead", None)
    replays_pooled_baseline = []
    for fold, test in zip(bundled.folds, assignment):
        held = set(test)
        train = [traced[i] for i in range(len(runs)) if i not in held]
        scored = score_baselines(fold.report.replays, thetas, predicates=predicates, monitors=monitors,
                                 train=train, **scoring)[EMPIRICAL]
        replays_pooled_baseline += scored.replays
    pooled_count = summarize(replays_pooled_baseline, thetas, **scoring)
    print("| risk source | θ | detection (old figure) | warned ahead | blocked at step | false alarms | Brier |")
    print("|---|---|---|---|---|---|---|")
    for theta in thetas:
        print(row("pooled model", pooled.pooled, theta))
        print(row("empirical frequency beside it (pooled)", pooled.pooled.baselines[EMPIRICAL], theta))
        print(row(f"bundle by {args.bundle_by}", bundled.pooled, theta))
        print(row("empirical frequency per member (now)", bundled.pooled.baselines[EMPIRICAL], theta))
        print(row("empirical frequency pooled beside the bundle (before)", pooled_count, theta))


if __name__ == "__main__":
    main()
