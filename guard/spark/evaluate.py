"""Cross-validation on Spark: the executors trace, count and replay; the driver learns and scores.

Three passes over the runs, each on the executors:

1. **trace** — each run's group (:func:`guard.evaluation.folds.group_of`) and its product
   states up to the first violation (:func:`guard.evaluation.baselines.trace_run`). The
   driver assigns groups to folds with :func:`guard.evaluation.folds.split_folds`, the
   single-process rule, and keeps the traced runs for the baselines.
2. **count** — each run's transitions counted into its own fold's counts (records keyed
   by fold, summed by ``reduceByKey``); a fold's training counts are the sum of the other
   folds', and :func:`guard.pipeline.model_from_counts` — what
   :func:`guard.pipeline.learn_model_from_runs` calls — learns and checks its model on the
   driver.
3. **replay** — the k models are broadcast; each run is replayed
   (:func:`guard.replay.replay_run`) on the model of the fold that held it out.

The driver then scores the folds with :func:`guard.evaluation.evaluate.fold_result` and
:func:`~guard.evaluation.evaluate.finish`, the single-process code, so every figure —
baselines included — is the single-process one. The driver holds, per replayed step, the
risk and the product state (as the single-process evaluation does), so one driver
bounds the size of the evaluation at some 10⁸ steps.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import orjson

from ...errors import ForewarnError, InputError, TraceError
from ..learning import TransitionCounts
from ..memory import run_actions
from ..predicates import PredicateSet, PythonPredicate
from ..spec import Spec, Trigger
from ..storm import Method
from ..traces import Run, abstract_run
from .learn import _PATH, _merge, _records
from .read import ERROR, Place, errors_in_order, map_runs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..evaluation.evaluate import EvaluationReport
    from ..replay import Enforcement


def evaluate_spark(source: DataFrame | Sequence[str], spec: Spec, thetas: Sequence[float], *, folds: int = 5,
                   group_by: str | None = None, seed: int = 0, method: Method = Method.SOUND,
                   alpha: float | None = None, python_predicates: Mapping[str, PythonPredicate] | None = None,
                   enforcement: Enforcement | str = "lookahead", trigger: Trigger | str | None = None,
                   spark: SparkSession | None = None, period: float | None = None, split_bytes: int | None = None,
                   on_progress: Callable[[str, int], None] | None = None) -> EvaluationReport:
    """:func:`guard.evaluation.evaluate.evaluate` on runs read by Spark; the same figures.

    Raises:
        ForewarnError: the first malformed run in reading order, a run without the grouping
            key, too few groups for the folds (as the single-process evaluation).
    """
    from ..constant_predicates import constant_in_traced
    from ..evaluation.evaluate import finish, fold_result, scoring_of
    from ..evaluation.folds import split_folds
    from ..pipeline import counting_plan, model_from_counts, prepare
    from .session import spark_session

    predicates, monitors = prepare(spec, python_predicates)
    session = spark or spark_session()
    python_predicates = predicates.python_functions  # resolved here: the workers need not register them
    # 1. groups and traced runs, in reading order
    records, inputs = map_runs(session, source, _Tracer(spec, python_predicates, group_by),
                               period=period, split_bytes=split_bytes, sum_by_key=False)
    _raise_first(records)
    ordered = sorted(records, key=lambda record: record[0])
    groups = [group for _, (group, _) in ordered]
    traced = [t for _, (_, t) in ordered]
    if not traced:
        raise InputError("no runs to evaluate: the trace input is empty")
    assignment = split_folds(groups, [t.unsafe for t in traced], folds, seed=seed, key=group_by)
    fold_of = {groups[i]: f for f, test in enumerate(assignment) for i in test}  # whole groups per fold
    # 2. each fold's counts, summed; a fold trains on the others'
    if on_progress is not None:
        on_progress("learn", 1)
    started = time.perf_counter()
    records, _ = map_runs(session, source, _FoldCounter(spec, python_predicates, group_by, fold_of),
                          period=period, split_bytes=split_bytes)
    _raise_first(records)
    grouped = _merge(records)
    wanted = counting_plan(spec, predicates)[1] is not None
    models = []
    for f in range(len(assignment)):
        if on_progress is not None and f:
            on_progress("learn", f + 1)
        others = [str(g) for g in range(len(assignment)) if g != f]
        counts = _sum_counts([grouped.groups.get(g, TransitionCounts()) for g in others])
        paths: Counter[tuple[int, ...]] | None = None
        if wanted:
            paths = Counter()
            for g in others:
                paths.update(grouped.group_paths.get(g, Counter()))
        models.append(model_from_counts(counts, spec, predicates, monitors, alpha=alpha, method=method,
                                        inputs=inputs, learn_seconds=time.perf_counter() - started, paths=paths))
    # 3. every run replayed on the model that did not see it
    if on_progress is not None:
        on_progress("replay", len(assignment))
    broadcast = session.sparkContext.broadcast([orjson.dumps(m.to_document()) for m in models])
    try:
        records, _ = map_runs(session, source, _FoldReplayer(broadcast, python_predicates, group_by, fold_of),
                              period=period, split_bytes=split_bytes, sum_by_key=False)
    finally:
        broadcast.destroy()
    _raise_first(records)
    replays = [r for _, r in sorted(records, key=lambda record: record[0])]
    scoring = scoring_of(spec, enforcement, trigger)
    results = []
    for f, test in enumerate(assignment):
        held_out = set(test)
        train = [traced[i] for i in range(len(traced)) if i not in held_out]
        fold_replays = [replays[i] for i in test]
        results.append((fold_result(f + 1, models[f], fold_replays, train, sorted({groups[i] for i in test}),
                                    thetas, predicates, monitors, scoring), fold_replays))
    return finish(results, thetas, scoring, group_by=group_by, groups=len(set(groups)), seed=seed, spec=spec.name,
                  constant=constant_in_traced(traced, predicates))


def _raise_first(records: list[tuple[Any, Any]]) -> None:
    errors = errors_in_order(records)
    if errors:
        raise errors[0]


def _sum_counts(parts: Sequence[TransitionCounts]) -> TransitionCounts:
    """Several folds' counts as one (Counters and ints summed, sets united)."""
    total = TransitionCounts()
    for part in parts:
        for spec in fields(total):
            mine, theirs = getattr(total, spec.name), getattr(part, spec.name)
            if isinstance(mine, Counter):
                mine.update(theirs)
            elif isinstance(mine, set):
                mine |= theirs
            else:
                setattr(total, spec.name, mine + theirs)
    return total


def _error(place: Place, exc: ForewarnError) -> tuple[Any, Any]:
    """An error record for any ForewarnError (its text, already naming the file and line)."""
    return (ERROR, place), (exc.message, None, None, None)


@dataclass(frozen=True)
class _Tracer:
    """Pass 1: each run's group and its traced product states."""

    spec: Spec
    python_predicates: Mapping[str, PythonPredicate] | None
    group_by: str | None

    def __call__(self, runs: Iterator[tuple[Place, Run | TraceError]]) -> Iterator[tuple[Any, Any]]:
        from ..evaluation.baselines import trace_run
        from ..evaluation.folds import group_of
        from ..monitoring import build_monitors

        predicates = PredicateSet(self.spec, self.python_predicates)
        monitors = build_monitors(self.spec)
        for place, run in runs:
            try:
                if isinstance(run, TraceError):
                    raise run
                yield place, (group_of(run, self.group_by), trace_run(run, predicates, monitors))
            except ForewarnError as exc:
                yield _error(place, exc)
                return  # the driver raises the first error


@dataclass(frozen=True)
class _FoldCounter:
    """Pass 2: each run's transitions, into its fold's counts (as ``learn_model_from_runs`` counts)."""

    spec: Spec
    python_predicates: Mapping[str, PythonPredicate] | None
    group_by: str | None
    fold_of: Mapping[str, int]

    def __call__(self, runs: Iterator[tuple[Place, Run | TraceError]]) -> Iterator[tuple[Any, Any]]:
        from ..evaluation.folds import group_of
        from ..pipeline import counting_plan

        predicates = PredicateSet(self.spec, self.python_predicates)
        memory, paths = counting_plan(self.spec, predicates)
        counts: dict[str, TransitionCounts] = {}
        fold_paths: dict[str, Counter[tuple[int, ...]]] = {}
        for place, run in runs:
            try:
                if isinstance(run, TraceError):
                    raise run
                fold = str(self.fold_of[group_of(run, self.group_by)])
                abstract = abstract_run(run, predicates)
            except ForewarnError as exc:
                yield _error(place, exc)
                return
            if memory is not None:
                abstract = memory.encode_run(abstract, run_actions(run.steps))
            counts.setdefault(fold, TransitionCounts()).add(abstract, predicates)
            if paths is not None:
                fold_paths.setdefault(fold, Counter())[tuple(abstract)] += 1
        for fold, fold_counts in counts.items():
            yield from _records(fold_counts, fold)
        for fold, counted in fold_paths.items():
            for path, n in counted.items():
                yield (_PATH, path, fold), n


@dataclass(frozen=True)
class _FoldReplayer:
    """Pass 3: each run replayed on its fold's model (the k models rebuilt once per partition)."""

    models: Any  # a Broadcast of the k model files' bytes
    python_predicates: Mapping[str, PythonPredicate] | None
    group_by: str | None
    fold_of: Mapping[str, int]

    def __call__(self, runs: Iterator[tuple[Place, Run | TraceError]]) -> Iterator[tuple[Any, Any]]:
        from ..evaluation.folds import group_of
        from ..model import GuardModel
        from ..replay import replay_run
        from ..runtime import Guard

        guards: dict[int, Guard] = {}
        for place, run in runs:
            try:
                if isinstance(run, TraceError):
                    raise run
                fold = self.fold_of[group_of(run, self.group_by)]
                if fold not in guards:
                    model = GuardModel.from_document(orjson.loads(self.models.value[fold]), source="<broadcast model>")
                    guards[fold] = Guard(model, python_predicates=self.python_predicates)
                yield place, replay_run(guards[fold], run)
            except ForewarnError as exc:
                yield _error(place, exc)
                return
