"""Hand-written spec, discovered spec and counting side by side, on the same grouped folds.

What ``forewarn demo`` prints under its enforcement table. For each (spec, runs) part, an
outer k-fold split (``forewarn evaluate``'s folds) scores on every held-out fold:

* the hand-written spec: learned on the training folds, replayed on the held-out one;
* counting: the per-state frequency over the hand-written spec's abstract states, fitted on
  the same training folds (``evaluate``'s ``empirical`` baseline);
* discovered, nested: ``discover`` extends the hand-written spec from the training folds only
  (its own inner folds choose what to add), and that spec is learned there and replayed.

Replays are pooled over parts and folds. Figures: the per-step Brier score before the
violation, and detection strictly before the violation at the largest θ whose false-alarm
rate on the held-out safe runs is at most 5 % and 20 % (a state without an estimate raises
no alarm here: the rows compare estimates). Only ``meta.task`` of each run is kept: a
simulator writes each run's outcome into its meta, a label discovery would otherwise find.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from ..errors import ForewarnError
from ..guard.discovery.discover import Figures, discover, held_out_figures
from ..guard.evaluation.baselines import EmpiricalFrequency, trace_run
from ..guard.evaluation.folds import group_of, split_folds
from ..guard.evaluation.tune import parse_target
from ..guard.monitoring import build_monitors
from ..guard.pipeline import learn_model_from_runs
from ..guard.predicates import PredicateSet
from ..guard.replay import RunReplay, replay_run
from ..guard.runtime import Guard
from ..guard.spec import Spec, parse_spec
from ..guard.storm import Method
from ..guard.traces import Run

FALSE_ALARM_TARGETS = (0.05, 0.20)
ROWS = ("hand-written spec", "discovered spec (nested)", "counting (hand-written states)")


@dataclass(frozen=True)
class SpecRow:
    """One row: a spec's (or counting's) pooled held-out figures, one per false-alarm target."""

    name: str
    figures: tuple[Figures, ...]

    @property
    def brier(self) -> float | None:
        return self.figures[0].brier


def _known_at_start(runs: Sequence[Run]) -> list[Run]:
    return [Run(id=r.id, steps=r.steps, meta={k: v for k, v in r.meta.items() if k == "task"}, source=r.source,
                line=r.line) for r in runs]


def _replays(spec: Spec, train: Sequence[Run], test: Sequence[Run]) -> list[RunReplay]:
    guard = Guard(learn_model_from_runs(train, spec, method=Method.TOPOLOGICAL))
    return [replay_run(guard, r) for r in test]


def compare_specs(parts: Sequence[tuple[Spec, Sequence[Run]]], *, folds: int = 5, group_by: str | None = None,
                  seed: int = 0, discover_folds: int = 4, max_predicates: int = 4) -> list[SpecRow]:
    """The three rows of :data:`ROWS`, pooled over ``parts`` (see the module's doc).

    Args:
        parts: (hand-written spec, its runs); e.g. one per task, where each task has its own model.
        folds, group_by, seed: the outer folds, as ``forewarn evaluate``'s.
        discover_folds, max_predicates: ``discover``'s inner folds and how much it may add.

    A training fold ``discover`` refuses (its runs all end the same way) keeps the hand-written spec.

    Raises:
        ForewarnError: as ``evaluate`` does (fewer runs than folds, a spec that cannot read the runs).
    """
    target = parse_target("false-alarms=0.2")
    pooled: dict[str, list[RunReplay]] = {name: [] for name in ROWS}
    for spec, given in parts:
        runs = _known_at_start(given)
        predicates, monitors = PredicateSet(spec), build_monitors(spec)
        traced = [trace_run(r, predicates, monitors) for r in runs]
        groups = [group_of(r, group_by) for r in runs]
        for test in split_folds(groups, [t.unsafe for t in traced], folds, seed=seed, key=group_by):
            held = set(test)
            train = [runs[i] for i in range(len(runs)) if i not in held]
            tested = [runs[i] for i in test]
            hand = _replays(spec, train, tested)
            pooled[ROWS[0]] += hand
            counting = EmpiricalFrequency().fit(traced[i] for i in range(len(runs)) if i not in held)
            pooled[ROWS[2]] += [counting.score(r) for r in hand]
            try:
                found = discover(train, spec, target=target, folds=discover_folds, group_by=group_by, seed=seed,
                                 max_predicates=max_predicates, confirm=False)
                extended = parse_spec(found.text) if found.changed else spec
            except ForewarnError:  # e.g. no training run of this fold violates: nothing to discover from
                extended = spec
            pooled[ROWS[1]] += _replays(extended, train, tested)
    return [SpecRow(name, tuple(held_out_figures(pooled[name], parse_target(f"false-alarms={t}"),
                                                 unseen_alarms=False) for t in FALSE_ALARM_TARGETS))
            for name in ROWS]


def print_comparison(console: Console, rows: Sequence[SpecRow], *, title: str) -> None:
    """The rows as a table: Brier, then detection (false alarms reached) per target."""
    table = Table(title=title, caption="detection strictly before the violation, at the largest θ whose false "
                                       "alarms on held-out safe runs are at most the target")
    table.add_column("spec", justify="left")
    table.add_column("Brier", justify="right")
    for t in FALSE_ALARM_TARGETS:
        table.add_column(f"detection @ ≤{t:.0%} FA", justify="right")
    for row in rows:
        table.add_row(row.name, "–" if row.brier is None else f"{row.brier:.4f}",
                      *(f"{f.detection:.1%} ({f.false_alarms:.1%})" for f in row.figures))
    console.print(table)
