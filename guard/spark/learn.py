"""Learning on Spark: the executors count, the driver smooths and checks.

Each partition compiles the spec's predicates once (:class:`~guard.predicates.PredicateSet`),
abstracts its runs (read by :mod:`guard.spark.read` with the single-process validation)
and fills a :class:`~guard.learning.TransitionCounts`. Its fields leave the partition as
keyed records, summed by ``reduceByKey``; only the sums reach the driver, which rebuilds a
``TransitionCounts`` and hands it to :func:`guard.pipeline.model_from_counts`. So the model
is the one the single-process learner writes: the same counts, the same floating-point
operations; only the provenance differs.

Malformed runs follow the single-process rules: ``stop`` raises the first bad run in
reading order (files in the order given, lines in file order); ``skip`` leaves bad runs
out of the counts and reports each, in that order, to ``on_bad``.
"""
from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from guard.errors import ForewarnError, TraceError
from guard.learning import TransitionCounts
from guard.predicates import PredicateSet, PythonPredicate
from guard.spark.read import ERROR, Place, errors_in_order, map_runs, place_error
from guard.spec import Spec
from guard.traces import Run, abstract_run

if TYPE_CHECKING:
    from guard.model import GuardModel
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["learn_model_spark", "count_transitions_spark"]


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
    if on_error not in ("stop", "skip"):
        raise ForewarnError(f"on_error: expected 'skip' or 'stop', got {on_error!r}")
    from guard.spark.session import spark_session

    session = spark or spark_session()
    counter = _Counter(spec, python_predicates, stop=on_error == "stop")
    records, inputs = map_runs(session, source, counter, period=period, split_bytes=split_bytes)
    counts = _merge(records)
    errors = errors_in_order(records)
    if errors and on_error == "stop":
        raise errors[0]
    for error in errors:
        if on_bad is not None:
            on_bad(error)
    return counts, inputs


def learn_model_spark(source: DataFrame | Sequence[str], spec: Spec, *, spark: SparkSession | None = None,
                      period: float | None = None, on_error: str = "stop",
                      on_bad: Callable[[TraceError], None] | None = None, split_bytes: int | None = None,
                      python_predicates: Mapping[str, PythonPredicate] | None = None,
                      **options: Any) -> GuardModel:
    """Learn and check a model from runs read by Spark (see :func:`count_transitions_spark`).

    ``options`` are those of :func:`guard.pipeline.model_from_counts` (``alpha``,
    ``method``, ``precision``, ``epsilon``, ``delta``, ``valid_transition``).
    """
    from guard.pipeline import model_from_counts, prepare_learning
    from guard.spark.session import spark_session

    predicates = prepare_learning(spec, python_predicates)  # spec errors before Spark starts
    session = spark or spark_session()
    started = time.perf_counter()
    counts, inputs = count_transitions_spark(source, spec, spark=session, period=period, on_error=on_error,
                                             on_bad=on_bad, python_predicates=python_predicates,
                                             split_bytes=split_bytes)
    model = model_from_counts(counts, spec, predicates, learn_seconds=time.perf_counter() - started,
                              inputs=inputs, **options)
    model.provenance["engine"] = {"name": "spark", "master": session.sparkContext.master,
                                  "spark_version": session.version}
    if period is not None:
        model.provenance["period_seconds"] = period
    return model


@dataclass(frozen=True)
class _Counter:
    """One partition's counting (pickled into each task: the spec, not compiled programs)."""

    spec: Spec
    python_predicates: Mapping[str, PythonPredicate] | None
    stop: bool

    def __call__(self, runs: Iterator[tuple[Place, Run | TraceError]]) -> Iterator[tuple[Any, Any]]:
        predicates = PredicateSet(self.spec, self.python_predicates)  # CEL compiled once per partition
        counts = TransitionCounts()
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
                counts.add(abstract, predicates)
        finally:
            if was_enabled:
                gc.enable()
        yield from _records(counts)
        yield from errors


def _records(counts: TransitionCounts) -> Iterator[tuple[Any, Any]]:
    """A ``TransitionCounts`` as (field index, key) → number records, summable by key.

    Every field is a Counter (summed per key), a set (kept as present) or an int (summed),
    so a field added to ``TransitionCounts`` travels without a change here.
    """
    for index, spec in enumerate(fields(counts)):
        value = getattr(counts, spec.name)
        if isinstance(value, Counter):
            for key, n in value.items():
                yield (index, key), n
        elif isinstance(value, (set, frozenset)):
            for key in value:
                yield (index, key), 1
        elif isinstance(value, int):
            if value:
                yield (index, None), value
        else:
            raise TypeError(f"TransitionCounts.{spec.name}: cannot sum a {type(value).__name__} across partitions")


def _merge(records: Iterable[tuple[Any, Any]]) -> TransitionCounts:
    """The driver's side of :func:`_records`: one ``TransitionCounts`` (error records are left out)."""
    counts = TransitionCounts()
    specs = fields(counts)
    for (index, key), value in records:
        if index == ERROR:
            continue
        target = getattr(counts, specs[index].name)
        if isinstance(target, Counter):
            target[key] = value
        elif isinstance(target, set):
            target.add(key)
        else:
            setattr(counts, specs[index].name, value)
    return counts
