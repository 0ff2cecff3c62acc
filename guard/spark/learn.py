"""Learning on Spark: the executors count, the driver smooths and checks.

Each partition compiles the spec's predicates once (:class:`~guard.predicates.PredicateSet`),
abstracts its runs (read by :mod:`guard.spark.read` with the single-process validation)
and fills a :class:`~guard.learning.TransitionCounts`. Its fields leave the partition as
keyed records, summed by ``reduceByKey``; only the sums reach the driver, which rebuilds a
``TransitionCounts`` and hands it to :func:`guard.pipeline.model_from_counts`. So the model
is the one the single-process learner writes: the same counts, the same floating-point
operations; only the provenance differs. With ``learning.memory`` the partitions count
chain states (runs encoded by the memory automaton); when a learning lever needs the
runs themselves (``shrink``, ``backoff: auto``), the distinct runs
travel too, summed by ``reduceByKey`` like the counts: they grow with the number of
distinct runs, not of steps.

Malformed runs follow the single-process rules: ``stop`` raises the first bad run in
reading order (files in the order given, lines in file order); ``skip`` leaves bad runs
out of the counts and reports each, in that order, to ``on_bad``.

With ``--group-by meta.KEY`` every run is counted twice, into the pooled counts and its
group's (records tagged with the group), and :func:`guard.bundle.bundle_from_counts`
learns the bundle as the single-process path does.
"""
from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ...errors import InputError, TraceError
from ..learning import TransitionCounts
from ..memory import run_actions
from ..predicates import PredicateSet, PythonPredicate
from ..spec import Spec
from ..traces import Run, abstract_run
from .read import ERROR, Place, errors_in_order, map_runs, place_error

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..bundle import GuardBundle
    from ..model import GuardModel
    from ..read_summary import IngestSummary

_WITHOUT, _KEY_SEEN = -2, -3  # record tags: runs without the --group-by key, and the meta keys they had
_PATH = -4  # record tag: a distinct counted run, for the learning levers that need the runs (guard/pipeline.py)


def count_transitions_spark(source: DataFrame | Sequence[str], spec: Spec, *, spark: SparkSession | None = None,
                            period: float | None = None, on_error: str = "stop",
                            on_bad: Callable[[TraceError], None] | None = None,
                            python_predicates: Mapping[str, PythonPredicate] | None = None,
                            split_bytes: int | None = None) -> tuple[TransitionCounts, list[dict[str, Any]]]:
    """Transition counts of runs read by Spark, and the inputs' provenance entries.

    Args:
        source: files, directories or a DataFrame (see :func:`guard.spark.read.map_runs`).
        on_error: ``stop`` raises the first malformed run; ``skip`` leaves malformed runs
            out and passes each error to ``on_bad``, in reading order.
        split_bytes: the largest block a task reads (``spark.sql.files.maxPartitionBytes``).
    """
    grouped, inputs = _count_groups(source, spec, None, spark=spark, period=period, on_error=on_error,
                                    on_bad=on_bad, python_predicates=python_predicates, split_bytes=split_bytes)
    return grouped.pooled, inputs


@dataclass
class _Grouped:
    """The driver's sums: the pooled counts, each group's, and what ``--group-by`` reports."""

    pooled: TransitionCounts
    groups: dict[str, TransitionCounts]
    without: int
    keys_seen: set[str]
    paths: Counter[tuple[int, ...]] = field(default_factory=Counter)  # distinct runs (when the spec's levers need them)
    group_paths: dict[str, Counter[tuple[int, ...]]] = field(default_factory=dict)


def _count_groups(source: DataFrame | Sequence[str], spec: Spec, group: tuple[str, ...] | None, *,
                  spark: SparkSession | None, period: float | None, on_error: str,
                  on_bad: Callable[[TraceError], None] | None,
                  python_predicates: Mapping[str, PythonPredicate] | None,
                  split_bytes: int | None) -> tuple[_Grouped, list[dict[str, Any]]]:
    if on_error not in ("stop", "skip"):
        raise InputError(f"on_error: expected 'skip' or 'stop', got {on_error!r}")
    from .session import spark_session

    session = spark or spark_session()
    counter = _Counter(spec, python_predicates, stop=on_error == "stop", group=group)
    records, inputs = map_runs(session, source, counter, period=period, split_bytes=split_bytes)
    errors = errors_in_order(records)
    if errors and on_error == "stop":
        raise errors[0]
    for error in errors:
        if on_bad is not None:
            on_bad(error)
    return _merge(records), inputs


def learn_model_spark(source: DataFrame | Sequence[str], spec: Spec, *, spark: SparkSession | None = None,
                      period: float | None = None, on_error: str = "stop",
                      on_bad: Callable[[TraceError], None] | None = None, split_bytes: int | None = None,
                      python_predicates: Mapping[str, PythonPredicate] | None = None,
                      summary: IngestSummary | None = None, **options: Any) -> GuardModel:
    """Learn and check a model from runs read by Spark (see :func:`count_transitions_spark`).

    ``options`` are those of :func:`guard.pipeline.model_from_counts` (``alpha``,
    ``method``, ``precision``, ``epsilon``, ``delta``, ``valid_transition``). ``summary`` is
    filled as :func:`guard.pipeline.learn_model` fills it: runs kept, and (``on_error="skip"``) the skipped runs by reason.
    """
    from ..pipeline import counting_plan, learning_bounds, model_from_counts, prepare
    from .session import spark_session

    learning_bounds(spec, options.get("epsilon"), options.get("delta"))  # bad input before Spark starts
    predicates, monitors = prepare(spec, python_predicates)
    session = spark or spark_session()
    started = time.perf_counter()
    grouped, inputs = _count_groups(source, spec, None, spark=session, period=period, on_error=on_error,
                                    on_bad=_reporter(on_bad, summary), python_predicates=predicates.python_functions,
                                    split_bytes=split_bytes)
    counts = grouped.pooled
    if summary is not None:
        summary.runs += counts.runs
    if counts.runs == 0:
        raise TraceError("no runs to learn from: the trace input is empty")
    wanted = counting_plan(spec, predicates)[1] is not None
    model = model_from_counts(counts, spec, predicates, monitors, learn_seconds=time.perf_counter() - started,
                              inputs=inputs, paths=grouped.paths if wanted else None, **options)
    _stamp(model, session, period)
    return model


def learn_bundle_spark(source: DataFrame | Sequence[str], spec: Spec, *, group_by: str,
                       min_group_runs: int | None = None, spark: SparkSession | None = None,
                       period: float | None = None, on_error: str = "stop",
                       on_bad: Callable[[TraceError], None] | None = None, split_bytes: int | None = None,
                       python_predicates: Mapping[str, PythonPredicate] | None = None,
                       summary: IngestSummary | None = None, **options: Any) -> GuardBundle:
    """:func:`guard.bundle.learn_bundle` on Spark: runs counted into the pooled counts and their group's."""
    from ..bundle import DEFAULT_MIN_GROUP_RUNS, bundle_from_counts, group_path
    from ..pipeline import counting_plan, learning_bounds, prepare
    from .session import spark_session

    path = group_path(group_by)
    min_group_runs = DEFAULT_MIN_GROUP_RUNS if min_group_runs is None else min_group_runs
    if isinstance(min_group_runs, bool) or not isinstance(min_group_runs, int) or min_group_runs < 1:
        raise InputError(f"--min-group-runs {min_group_runs!r}: expected a whole number of runs, at least 1")
    learning_bounds(spec, options.get("epsilon"), options.get("delta"))
    predicates, monitors = prepare(spec, python_predicates)
    session = spark or spark_session()
    started = time.perf_counter()
    grouped, inputs = _count_groups(source, spec, path, spark=session, period=period, on_error=on_error,
                                    on_bad=_reporter(on_bad, summary), python_predicates=predicates.python_functions,
                                    split_bytes=split_bytes)
    if summary is not None:
        summary.runs += grouped.pooled.runs
    wanted = counting_plan(spec, predicates)[1] is not None
    bundle = bundle_from_counts(grouped.pooled, grouped.groups, grouped.without, grouped.keys_seen, spec,
                                predicates, monitors, group_by=group_by, min_group_runs=min_group_runs,
                                inputs=inputs, learn_seconds=time.perf_counter() - started,
                                pooled_paths=grouped.paths if wanted else None,
                                group_paths=grouped.group_paths if wanted else None, **options)
    for model in [bundle.pooled, *bundle.members.values()]:
        _stamp(model, session, period)
    bundle.provenance["engine"] = bundle.pooled.provenance["engine"]
    if period is not None:
        bundle.provenance["period_seconds"] = period
    return bundle


def _reporter(on_bad: Callable[[TraceError], None] | None,
              summary: IngestSummary | None) -> Callable[[TraceError], None] | None:
    """Where a skipped run goes: the caller's function, and the summary's tally by reason."""
    if summary is None or on_bad is None:
        return on_bad if summary is None else summary.skip

    def both(error: TraceError) -> None:
        on_bad(error)
        summary.skip(error)

    return both


def _stamp(model: GuardModel, session: SparkSession, period: float | None) -> None:
    model.provenance["engine"] = {"name": "spark", "master": session.sparkContext.master,
                                  "spark_version": session.version}
    if period is not None:
        model.provenance["period_seconds"] = period


@dataclass(frozen=True)
class _Counter:
    """One partition's counting (pickled into each task: the spec, not compiled programs)."""

    spec: Spec
    python_predicates: Mapping[str, PythonPredicate] | None
    stop: bool
    group: tuple[str, ...] | None = None  # the meta path of --group-by

    def __call__(self, runs: Iterator[tuple[Place, Run | TraceError]]) -> Iterator[tuple[Any, Any]]:
        from ..bundle import group_value

        # CEL compiled once per partition
        predicates = PredicateSet(self.spec, self.python_predicates)
        from ..pipeline import counting_plan

        memory, paths = counting_plan(self.spec, predicates)  # as the single-process learner counts
        group_paths: dict[str, Counter[tuple[int, ...]]] = {}
        counts = TransitionCounts()
        groups: dict[str, TransitionCounts] = {}
        keys_seen: set[str] = set()
        without = 0
        errors = []
        was_enabled = gc.isenabled()
        gc.disable()  # as count_transitions: parsed JSON holds no cycles
        try:
            for place, run in runs:
                try:
                    if isinstance(run, TraceError):
                        raise run
                    abstract = abstract_run(run, predicates)
                except TraceError as exc:
                    errors.append(place_error(place, exc))
                    if self.stop:  # the driver raises the first error; nothing after it matters
                        break
                    continue
                if memory is not None:
                    abstract = memory.encode_run(abstract, run_actions(run.steps))
                counts.add(abstract, predicates)
                if paths is not None:
                    paths[tuple(abstract)] += 1
                if self.group is not None:
                    group = group_value(run.meta, self.group)
                    if group is None:
                        without += 1
                        if len(keys_seen) < 50:  # as learn_bundle_from_runs: a few, for the message
                            keys_seen.update(run.meta)
                    else:
                        groups.setdefault(group, TransitionCounts()).add(abstract, predicates)
                        if paths is not None:
                            group_paths.setdefault(group, Counter())[tuple(abstract)] += 1
        finally:
            if was_enabled:
                gc.enable()
        yield from _records(counts, None)
        for name, group_counts in groups.items():
            yield from _records(group_counts, name)
        for path, n in (paths or {}).items():
            yield (_PATH, path, None), n
        for name, counted in group_paths.items():
            for path, n in counted.items():
                yield (_PATH, path, name), n
        if without:
            yield (_WITHOUT, None, None), without
        for key in keys_seen:
            yield (_KEY_SEEN, key, None), 1
        yield from errors


def _records(counts: TransitionCounts, group: str | None) -> Iterator[tuple[Any, Any]]:
    """A ``TransitionCounts`` as (field index, key, group) → number records, summable by key.

    Every field is a Counter (summed per key), a set (kept as present) or an int (summed),
    so a field added to ``TransitionCounts`` travels without a change here.
    """
    for index, spec in enumerate(fields(counts)):
        value = getattr(counts, spec.name)
        if isinstance(value, Counter):
            for key, n in value.items():
                yield (index, key, group), n
        elif isinstance(value, (set, frozenset)):
            for key in value:
                yield (index, key, group), 1
        elif isinstance(value, int):
            if value:
                yield (index, None, group), value
        else:
            raise TypeError(f"TransitionCounts.{spec.name}: cannot sum a {type(value).__name__} across partitions")


def _merge(records: Iterable[tuple[Any, Any]]) -> _Grouped:
    """The driver's side of :func:`_records`: the pooled and group counts (error records are left out)."""
    out = _Grouped(TransitionCounts(), {}, 0, set())
    specs = fields(out.pooled)
    for key, value in records:
        if key[0] == ERROR:
            continue
        index, item, group = key
        if index == _WITHOUT:
            out.without = value
            continue
        if index == _KEY_SEEN:
            out.keys_seen.add(item)
            continue
        if index == _PATH:
            (out.paths if group is None else out.group_paths.setdefault(group, Counter()))[item] = value
            continue
        counts = out.pooled if group is None else out.groups.setdefault(group, TransitionCounts())
        target = getattr(counts, specs[index].name)
        if isinstance(target, Counter):
            target[item] = value
        elif isinstance(target, set):
            target.add(item)
        else:
            setattr(counts, specs[index].name, value)
    return out
