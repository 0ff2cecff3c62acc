"""Cross-validated evaluation: learn on some runs, replay the others, k times.

Each fold's model is learned (and checked with Storm) from the runs outside the fold
and replayed on the runs inside it, with the baselines fitted on the same training
runs. Every run is tested exactly once, so the pooled figures are over all runs; the
spread over folds shows how much they depend on which runs a model happened to see.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...errors import InputError
from ..bundle import DEFAULT_MIN_GROUP_RUNS, group_path, group_value, learn_bundle_from_runs
from ..bundle_guard import BundleGuard
from ..constant_predicates import ConstantPredicate, constant_in_traced
from ..pac import bounds
from ..pipeline import learn_model_from_runs
from ..predicates import PredicateSet, PythonPredicate
from ..replay import (
    Enforcement,
    ReplayReport,
    RunReplay,
    Spread,
    horizon_of,
    min_increase_of,
    replay_run,
    summarize,
)
from ..results import TightPAC
from ..runtime import Guard
from ..spec import Action, Spec, Trigger
from ..storm import Method
from ..traces import Run, remembered_abstractions
from .baselines import score_baselines, trace_run
from .folds import group_of, split_folds

__all__ = ["FoldResult", "EvaluationReport", "evaluate", "FOLD_METRICS", "scoring_of", "fold_result", "finish"]

# Per-θ figures whose spread over folds is reported: (name, getter).
FOLD_METRICS: tuple[tuple[str, Callable[[Any], float | None]], ...] = (
    ("detection_rate", lambda t: t.detection_rate),
    ("warned_ahead_rate", lambda t: t.warned_ahead_rate),
    ("blocked_at_step_rate", lambda t: t.blocked_at_step_rate),
    ("false_alarm_rate", lambda t: t.false_alarm_rate),
    ("mean_advance_steps", lambda t: t.mean_advance_steps),
    ("mean_advance_seconds", lambda t: t.mean_advance_seconds),
    ("stop_unsafe_rate", lambda t: None if t.stop is None else t.stop.unsafe_rate),
    ("stop_completion_rate", lambda t: None if t.stop is None else t.stop.completion_rate),
)


@dataclass(frozen=True)
class FoldResult:
    """One fold: what its model was learned from, its PAC status, and its replay of the held-out runs."""

    index: int
    train_runs: int
    test_runs: int
    test_groups: list[str]
    states: int
    pac: dict[str, Any]
    report: ReplayReport


@dataclass(frozen=True)
class EvaluationReport:
    folds: list[FoldResult]
    pooled: ReplayReport  # every run replayed once, by the model that did not see it
    thetas: list[float]
    group_by: str | None
    groups: int
    seed: int
    spec: str
    notes: list[str] = field(default_factory=list)
    bundle_by: str | None = None  # each fold's model was a bundle grouped by this key
    # predicates with one value on every step of the runs (guard/constant_predicates.py): a warning each
    constant_predicates: list[ConstantPredicate] = field(default_factory=list)

    def over_folds(self, theta: float, metric: str) -> Spread | None:
        """The spread over folds of one per-θ figure (folds where it is undefined are left out)."""
        getter = dict(FOLD_METRICS)[metric]
        values = []
        for fold in self.folds:
            t = next(x for x in fold.report.thetas if x.theta == theta)
            value = getter(t)
            if value is not None:
                values.append(value)
        return Spread.of(values)

    def calibration_over_folds(self) -> dict[str, Spread | None]:
        def collect(pick: Callable[[ReplayReport], float | None]) -> Spread | None:
            return Spread.of([v for v in (pick(f.report) for f in self.folds) if v is not None])

        return {
            "brier": collect(lambda r: r.brier),
            "ece": collect(lambda r: None if r.calibration_step is None else r.calibration_step.ece),
            "brier_run": collect(lambda r: None if r.calibration_run is None else r.calibration_run.brier),
            "ece_run": collect(lambda r: None if r.calibration_run is None else r.calibration_run.ece),
        }

    def to_dict(self) -> dict[str, Any]:
        entries = self.pooled.theta_entries()
        for entry, theta in zip(entries, self.thetas):
            entry["over_folds"] = {name: _spread_dict(self.over_folds(theta, name)) for name, _ in FOLD_METRICS}
        return {
            "spec": self.spec, "folds": len(self.folds), "group_by": self.group_by, "groups": self.groups,
            "bundle_by": self.bundle_by,
            "seed": self.seed, "runs": self.pooled.runs, "enforcement": self.pooled.enforcement.value,
            "trigger": self.pooled.trigger, "min_increase": self.pooled.min_increase,
            "thetas": entries,
            "calibration": {**self.pooled.to_dict()["calibration"],  # type: ignore[dict-item]
                            "over_folds": {k: _spread_dict(v) for k, v in self.calibration_over_folds().items()}},
            "pooled": self.pooled.to_dict(),
            "fold_details": [{"fold": f.index, "train_runs": f.train_runs, "test_runs": f.test_runs,
                              "test_groups": f.test_groups, "states": f.states, "pac": f.pac,
                              "report": f.report.to_dict()} for f in self.folds],
            "notes": list(self.notes),
            "constant_predicates": [{**c.to_dict(), "message": c.message()} for c in self.constant_predicates],
        }


def _spread_dict(spread: Spread | None) -> dict[str, Any] | None:
    return None if spread is None else spread.__dict__.copy()


def evaluate(runs: Sequence[Run], spec: Spec, thetas: Sequence[float], *, folds: int = 5,
             group_by: str | None = None, seed: int = 0, method: Method = Method.SOUND,
             alpha: float | None = None, python_predicates: Mapping[str, PythonPredicate] | None = None,
             enforcement: Enforcement | str = Enforcement.LOOKAHEAD, trigger: Trigger | str | None = None,
             on_progress: Callable[[str, int], None] | None = None, bundle_by: str | None = None,
             min_group_runs: int = DEFAULT_MIN_GROUP_RUNS,
             fold_spec: Callable[[list[Run], int], Spec] | None = None) -> EvaluationReport:
    """K-fold cross-validation of learning a guard from ``spec`` on ``runs``.

    Args:
        runs: the runs (held in memory: every fold reads them again).
        spec: the spec to learn with; its guard policy decides whether unseen states alarm.
        thetas: thresholds on p_safe.
        folds: number of folds (at least 2, at most the number of groups).
        group_by: a dotted path such as ``meta.task``; runs sharing its value stay in one
            fold. ``None``: every run is its own group.
        seed: for the assignment of equal-sized groups to folds.
        method: Storm's method for each fold's model.
        enforcement: ``lookahead`` or ``observe`` (see :mod:`guard.replay`), as ``forewarn replay``.
        trigger: ``level`` or ``increase`` (with the spec's ``min_increase``); by default the
            spec's ``guard.trigger``, else ``level``.
        on_progress: called with a phase ("learn", "replay") and the fold number.
        bundle_by: ``meta.KEY``: learn each fold's model as a bundle grouped by this key
            (as ``forewarn learn --group-by``); held-out runs are replayed on their group's
            member, or on the pooled model when their group has none in that fold.
        min_group_runs: runs a group needs, within a fold's training runs, for a member.
        fold_spec: called with a fold's training runs and the fold's number, the spec that fold learns
            with (discovery nested in the folds: no held-out run informs the predicates it is scored by);
            the fold's baselines count over that spec's abstraction. ``None``: ``spec`` in every fold.

    Raises:
        ForewarnError: too few groups for the folds, a run without the grouping key, a
            bad spec or trace.
    """
    if bundle_by is not None:  # a bad key fails before any fold is learned, naming the option and all the runs
        path = group_path(bundle_by, "--bundle-by")
        if runs and all(group_value(run.meta, path) is None for run in runs):
            keys = sorted({k for run in runs[:1000] for k in run.meta})
            raise InputError(f"--bundle-by {bundle_by}: none of the {len(runs)} runs has it in its metadata "
                                f"(keys the runs have: {', '.join(f'meta.{k}' for k in keys[:8]) or 'none'})")
    with remembered_abstractions():  # every fold abstracts the same runs again: once per run is enough
        return _evaluate(runs, spec, thetas, folds=folds, group_by=group_by, seed=seed, method=method, alpha=alpha,
                         python_predicates=python_predicates, enforcement=enforcement, trigger=trigger,
                         on_progress=on_progress, bundle_by=bundle_by, min_group_runs=min_group_runs,
                         fold_spec=fold_spec)


def _evaluate(runs: Sequence[Run], spec: Spec, thetas: Sequence[float], *, folds: int, group_by: str | None,
              seed: int, method: Method, alpha: float | None,
              python_predicates: Mapping[str, PythonPredicate] | None, enforcement: Enforcement | str,
              trigger: Trigger | str | None, on_progress: Callable[[str, int], None] | None,
              bundle_by: str | None, min_group_runs: int,
              fold_spec: Callable[[list[Run], int], Spec] | None) -> EvaluationReport:
    from ..monitoring import build_monitors

    predicates = PredicateSet(spec, python_predicates)
    monitors = build_monitors(spec)
    traced = [trace_run(run, predicates, monitors) for run in runs]
    groups = [group_of(run, group_by) for run in runs]
    assignment = split_folds(groups, [t.unsafe for t in traced], folds, seed=seed, key=group_by)
    scoring = scoring_of(spec, enforcement, trigger)
    results: list[tuple[FoldResult, list[RunReplay]]] = []
    for index, test in enumerate(assignment, start=1):
        held_out = set(test)
        train = [i for i in range(len(runs)) if i not in held_out]
        learned_with, fold_predicates, fold_monitors = spec, predicates, monitors
        if fold_spec is not None:
            learned_with = fold_spec([runs[i] for i in train], index)
            if learned_with is not spec:
                fold_predicates = PredicateSet(learned_with, python_predicates)
                fold_monitors = build_monitors(learned_with)
        train_traced = ([traced[i] for i in train] if fold_predicates is predicates
                        else [trace_run(runs[i], fold_predicates, fold_monitors) for i in train])
        if on_progress is not None:
            on_progress("learn", index)
        guard: Guard | BundleGuard
        member_of: Callable[[RunReplay], str | None] | None = None
        if bundle_by is None:
            model = learn_model_from_runs((runs[i] for i in train), learned_with, alpha=alpha, method=method,
                                          python_predicates=python_predicates)
            guard = Guard(model, python_predicates=python_predicates)
        else:
            bundle = learn_bundle_from_runs((runs[i] for i in train), learned_with, group_by=bundle_by,
                                            min_group_runs=min_group_runs, python_predicates=python_predicates,
                                            alpha=alpha, method=method)
            bundled = guard = BundleGuard(bundle, predicates=fold_predicates)
            model = bundle.pooled  # the fold's PAC figures below are the pooled model's
            member_of = lambda r, bundled=bundled: bundled.member_name(r.meta)  # noqa: E731
        if on_progress is not None:
            on_progress("replay", index)
        replays = [replay_run(guard, runs[i]) for i in test]
        results.append((fold_result(index, model, replays, train_traced,
                                    sorted({groups[i] for i in test}), thetas, fold_predicates, fold_monitors,
                                    scoring, member_of=member_of),
                        replays))
    return finish(results, thetas, scoring, group_by=group_by, groups=len(set(groups)), seed=seed,
                  spec=spec.name, bundle_by=bundle_by, constant=constant_in_traced(traced, predicates))


def scoring_of(spec: Spec, enforcement: Enforcement | str, trigger: Trigger | str | None) -> dict[str, Any]:
    """How replays are scored (``summarize``'s options), as the spec and the options say."""
    return {"unseen_alarms": spec.guard.unseen_state is not Action.ALLOW,
            "horizon": horizon_of(spec.guard.effective_properties()[0].query), "enforcement": enforcement,
            "min_increase": min_increase_of(trigger or spec.guard.trigger, spec.guard.min_increase)}


def fold_result(index: int, model: Any, replays: list[RunReplay], train: list[RunReplay], test_groups: list[str],
                thetas: Sequence[float], predicates: PredicateSet, monitors: Sequence[Any],
                scoring: Mapping[str, Any], *,
                member_of: Callable[[RunReplay], str | None] | None = None) -> FoldResult:
    """One fold's figures from its model, its held-out replays and its traced training runs (baselines).

    Shared by the single-process and the Spark evaluation, so their figures are the same. ``member_of``:
    for a bundle, the member deciding a run, so that the baseline is counted per member as well.
    """
    report = summarize(replays, thetas, **scoring)
    baselines = score_baselines(replays, thetas, predicates=predicates, monitors=monitors, train=train,
                                member_of=member_of, **scoring)
    report = replace(report, baselines=baselines)
    pac = model.pac
    worst = pac.worst
    return FoldResult(
        index=index, train_runs=len(train), test_runs=len(replays),
        test_groups=test_groups, states=model.provenance["chain_states"],
        pac={"satisfied": pac.satisfied, "states_satisfied": pac.satisfied_count, "states": len(pac.states),
             "epsilon": pac.epsilon, "delta": pac.delta, "amplification": pac.amplification,
             "worst": None if worst is None else {"state": worst.state, "visits": worst.visits,
                                                  "required": worst.required},
             "runs_factor": pac.runs_factor,  # the paper's bound as a multiple of the training runs
             # each registered bound (guard/pac/registry.py), None where not computed
             **{kind.name: _bound_summary(pac.bounds.get(kind.name)) for kind in bounds()}},
        report=report)


def _bound_summary(bound: TightPAC | None) -> dict[str, Any] | None:
    """A per-state PAC bound in a fold's details: met or not, worst and start bounds, runs factors."""
    def finite(value: float) -> float | None:
        return value if math.isfinite(value) else None
    return None if bound is None else {
        "satisfied": bound.satisfied, "worst_bound": finite(bound.worst_bound), "runs_factor": bound.runs_factor,
        "initial_bound": finite(bound.initial_bound), "initial_runs_factor": bound.initial_runs_factor}


def finish(folds: list[tuple[FoldResult, list[RunReplay]]], thetas: Sequence[float], scoring: Mapping[str, Any], *,
           group_by: str | None, groups: int, seed: int, spec: str,
           bundle_by: str | None = None, constant: list[ConstantPredicate] | None = None) -> EvaluationReport:
    """The pooled figures (every run replayed once) and the notes, from each fold's result and raw replays."""
    results = [fold for fold, _ in folds]
    pooled_model: list[RunReplay] = []
    pooled_baselines: dict[str, list[RunReplay]] = {}
    for fold, replays in folds:
        pooled_model += replays
        for name, b in (fold.report.baselines or {}).items():
            pooled_baselines.setdefault(name, []).extend(b.replays)
    pooled = summarize(pooled_model, thetas, **scoring)
    pooled = replace(pooled, baselines={name: summarize(rs, thetas, **scoring)
                                        for name, rs in pooled_baselines.items()})
    notes = []
    if not any(f.pac["satisfied"] or (f.pac["tight"] or {}).get("satisfied") for f in results):
        notes.append("No fold's model reached the PAC guarantee (neither the paper's bound nor the tighter one): "
                     "its risks rest on states visited fewer times than (ε, δ) requires; treat the figures as "
                     "estimates from little data.")
    if bundle_by is not None:
        notes.append(f"Each fold's model was a bundle by {bundle_by}: the empirical-frequency baseline was "
                     "counted per member on the same fold's training runs (over all of them for runs the pooled "
                     "model decided), so the model and the baseline see the same data.")
    return EvaluationReport(folds=results, pooled=pooled, thetas=list(thetas), group_by=group_by,
                            groups=groups, seed=seed, spec=spec, notes=notes, bundle_by=bundle_by,
                            constant_predicates=list(constant or ()))
