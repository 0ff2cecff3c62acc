"""Learning on Spark: the executors count, the driver smooths and checks.

Each partition compiles the spec's predicates once (:class:`~guard.predicates.PredicateSet`),
validates and abstracts its runs with the single-process code (:mod:`guard.traces`) and
fills a :class:`~guard.learning.TransitionCounts`. Its fields leave the partition as
keyed records, summed by ``reduceByKey``; only the summed counts reach the driver, which
rebuilds a ``TransitionCounts`` and hands it to :func:`guard.pipeline.model_from_counts`.
So the model is the one the single-process learner writes: the same counts, the same
floating-point operations (only the provenance differs).

Line numbers: a JSONL file is split into blocks read by different tasks. A first pass,
in the JVM only, counts the lines of every block; line ``k`` of a block is then line
``lines before the block + k`` of its file, which the executors know before parsing, so
errors and id-less runs (``line-N``) read exactly as in the single-process learner.
A Parquet row is numbered by its row index in its file (from 1).

Malformed runs follow the same rules as the single-process learner: ``stop`` raises the
first bad run in reading order (files in the order given, lines in file order);
``skip`` leaves bad runs out of the counts and reports each, in that order, to ``on_bad``.
"""
from __future__ import annotations

import gc
import operator
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import orjson

from guard.errors import ForewarnError, TraceError
from guard.learning import TransitionCounts
from guard.predicates import PredicateSet, PythonPredicate
from guard.spark.inputs import SparkInput, list_inputs
from guard.spec import Spec
from guard.traces import abstract_run, parse_document, parse_run, resample

if TYPE_CHECKING:
    from guard.model import GuardModel
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["learn_model_spark", "count_transitions_spark"]

_ERROR = -1  # record tag of a bad run: key (_ERROR, (file order, line)), value (message, field)
_META = ("_file", "_line")  # columns the readers add beside a run's own


@dataclass(frozen=True)
class _Job:
    """What every partition needs (pickled into each task, small)."""

    spec: Spec
    python_predicates: Mapping[str, PythonPredicate] | None
    period: float | None
    stop: bool
    names: tuple[str, ...]  # display name per file order (DataFrame input: empty)


def count_transitions_spark(source: DataFrame | Sequence[str], spec: Spec, *, spark: SparkSession | None = None,
                            period: float | None = None, on_error: str = "stop",
                            on_bad: Callable[[TraceError], None] | None = None,
                            python_predicates: Mapping[str, PythonPredicate] | None = None,
                            split_bytes: int | None = None) -> tuple[TransitionCounts, list[dict[str, Any]]]:
    """Transition counts of runs read by Spark, and the inputs' provenance entries.

    Args:
        source: JSONL or Parquet files or directories (any Hadoop file system URI), or a
            DataFrame with one run per row: a string column ``value`` holding the run's JSON,
            or columns ``steps`` (and optionally ``id``, ``meta``), each a JSON string or
            nested Spark values.
        on_error: ``stop`` raises the first malformed run; ``skip`` leaves malformed runs
            out and passes each error to ``on_bad``, in reading order.
        split_bytes: the largest block a task reads (``spark.sql.files.maxPartitionBytes``).
    """
    if on_error not in ("stop", "skip"):
        raise ForewarnError(f"on_error: expected 'skip' or 'stop', got {on_error!r}")
    from guard.spark.session import spark_session

    if isinstance(source, (str, bytes)) or not hasattr(source, "rdd"):
        session = spark or spark_session()
        inputs = list_inputs(session, [str(p) for p in source])
        job = _Job(spec, python_predicates, period, on_error == "stop", tuple(i.name for i in inputs))
        records = _file_records(session, inputs, job, split_bytes)
        provenance = [{"path": i.name, "sha256": None, "bytes": i.size} for i in inputs]
    else:
        job = _Job(spec, python_predicates, period, on_error == "stop", ())
        rdd = source.rdd.mapPartitionsWithIndex(partial(_count_dataframe, job=job, columns=tuple(source.columns)))
        records = rdd.reduceByKey(operator.add, _reducers(source.sparkSession)).collect()
        provenance = [{"dataframe": True, "partitions": rdd.getNumPartitions()}]
    counts, errors = _merge(records)
    if errors:
        if job.stop:
            raise errors[0]
        for error in errors:
            if on_bad is not None:
                on_bad(error)
    return counts, provenance


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


def _file_records(spark: SparkSession, inputs: list[SparkInput], job: _Job,
                  split_bytes: int | None) -> list[tuple[Any, Any]]:
    """The summed count records of JSONL and Parquet files (a distributed group-by; the sums come back)."""
    from pyspark.sql import functions as F

    order = {i.uri: k for k, i in enumerate(inputs)}
    parts = []
    with _max_split(spark, split_bytes):
        jsonl = [i.uri for i in inputs if i.kind == "jsonl"]
        if jsonl:
            lines = (spark.read.option("lineSep", "\n").text(jsonl)
                     .select(F.col("_metadata.file_path").alias("_file"),
                             F.col("_metadata.file_block_start").alias("_block"), "value"))
            first = _first_lines(lines.groupBy("_file", "_block").count().collect())  # JVM only: no Python
            parts.append(lines.rdd.mapPartitions(partial(_count_lines, job=job, order=order, first=first)))
        parquet = [i.uri for i in inputs if i.kind == "parquet"]
        if parquet:
            table = spark.read.parquet(*parquet)
            columns = tuple(table.columns)
            rows = table.select(F.col("_metadata.file_path").alias("_file"),
                                (F.col("_metadata.row_index") + 1).alias("_line"), *columns)
            parts.append(rows.rdd.mapPartitions(partial(_count_rows, job=job, order=order, columns=columns)))
        rdd = parts[0] if len(parts) == 1 else spark.sparkContext.union(parts)
        return rdd.reduceByKey(operator.add, _reducers(spark)).collect()  # inside: the split size applies when the scan runs


def _reducers(spark: SparkSession) -> int:
    """Partitions of the group-by: the records are few (one per distinct transition), one per core suffices."""
    return max(1, spark.sparkContext.defaultParallelism)


class _max_split:
    """Set ``spark.sql.files.maxPartitionBytes`` (and the open cost) for a block, then restore."""

    def __init__(self, spark: SparkSession, size: int | None) -> None:
        self.conf, self.size, self.saved = spark.conf, size, {}

    def __enter__(self) -> None:
        if self.size is None:
            return
        for key in ("spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes"):
            self.saved[key] = self.conf.get(key, None)
            self.conf.set(key, str(self.size))

    def __exit__(self, *exc: object) -> None:
        for key, value in self.saved.items():
            if value is None:
                self.conf.unset(key)
            else:
                self.conf.set(key, value)


def _first_lines(block_counts: Iterable[Any]) -> dict[tuple[str, int], int]:
    """Per (file, block start): the number of lines of the file before the block."""
    by_file: dict[str, list[tuple[int, int]]] = {}
    for row in block_counts:
        by_file.setdefault(row["_file"], []).append((row["_block"], row["count"]))
    first: dict[tuple[str, int], int] = {}
    for path, blocks in by_file.items():
        before = 0
        for start, count in sorted(blocks):
            first[path, start] = before
            before += count
    return first


def _count_lines(rows: Iterator[Any], *, job: _Job, order: Mapping[str, int],
                 first: Mapping[tuple[str, int], int]) -> Iterator[tuple[Any, Any]]:
    """One partition of JSONL lines (file, block start, text) → keyed count records."""
    def runs() -> Iterator[tuple[int, int, Any]]:
        block = None
        line = 0
        for path, start, text in rows:
            if (path, start) != block:
                block = (path, start)
                line = first[block]
            line += 1
            if text and not text.isspace():
                yield _file_order(order, path), line, text

    return _count(runs(), job)


def _count_rows(rows: Iterator[Any], *, job: _Job, order: Mapping[str, int],
                columns: tuple[str, ...]) -> Iterator[tuple[Any, Any]]:
    """One partition of Parquet rows (file, row number, run columns) → keyed count records."""
    return _count(((_file_order(order, row[0]), row[1], _document(row, 2, columns)) for row in rows), job)


def _file_order(order: Mapping[str, int], path: str) -> int:
    """The position of Spark's ``_metadata.file_path`` (URL-encoded) among the inputs."""
    found = order.get(path)
    return order[unquote(path)] if found is None else found


def _count_dataframe(index: int, rows: Iterator[Any], *, job: _Job,
                     columns: tuple[str, ...]) -> Iterator[tuple[Any, Any]]:
    """One partition of a user's DataFrame: rows are numbered within their partition."""
    return _count(((index, number, _document(row, 0, columns)) for number, row in enumerate(rows, start=1)), job,
                  source=lambda file: f"<dataframe partition {file}>")


def _document(row: Any, skip: int, columns: tuple[str, ...]) -> Any:
    """A row as the run's JSON text or decoded document (JSON string columns are decoded)."""
    values = dict(zip(columns, (_plain(v) for v in list(row)[skip:])))
    if "value" in values and "steps" not in values:
        return values["value"]
    document = {}
    for name, value in values.items():
        if name in _META or value is None and name != "steps":
            continue
        if isinstance(value, (str, bytes)) and name in ("steps", "meta"):
            try:
                value = orjson.loads(value)
            except orjson.JSONDecodeError as exc:
                return _BadColumn(name, f"not valid JSON ({exc})")
        document[name] = value
    return document


def _plain(value: Any) -> Any:
    """Spark Rows (structs) as dicts, recursively, like a decoded JSON document."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class _BadColumn:
    column: str
    message: str


def _count(runs: Iterable[tuple[int, int, Any]], job: _Job,
           source: Callable[[int], str] | None = None) -> Iterator[tuple[Any, Any]]:
    """Count (file order, line, JSON text or document) runs; yield fields and errors as records."""
    predicates = PredicateSet(job.spec, job.python_predicates)  # CEL compiled once per partition
    counts = TransitionCounts()
    errors: list[tuple[Any, Any]] = []
    name = source or (lambda file: job.names[file])
    was_enabled = gc.isenabled()
    gc.disable()  # as count_transitions: parsed JSON holds no cycles
    try:
        for file, line, payload in runs:
            try:
                if isinstance(payload, _BadColumn):
                    raise TraceError(payload.message, source=name(file), line=line, field=payload.column)
                if isinstance(payload, dict):
                    run = parse_document(payload, source=name(file), line=line)
                else:
                    run = parse_run(payload, source=name(file), line=line)
                if job.period is not None:
                    run = resample(run, job.period)
                abstract = abstract_run(run, predicates)
            except TraceError as exc:
                errors.append(((_ERROR, (file, line)), (exc.message, exc.source, exc.line, exc.field)))
                if job.stop:  # the driver raises the first error; nothing after it matters
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


def _merge(records: Iterable[tuple[Any, Any]]) -> tuple[TransitionCounts, list[TraceError]]:
    """The driver's side of :func:`_records`: one ``TransitionCounts``, and the errors in reading order."""
    counts = TransitionCounts()
    specs = fields(counts)
    found: list[tuple[Any, TraceError]] = []
    for (index, key), value in records:
        if index == _ERROR:
            message, source, line, field = value
            error = TraceError("", source=source, line=line, field=field)
            error.message = message  # exactly the executor's text
            found.append((key, error))
            continue
        target = getattr(counts, specs[index].name)
        if isinstance(target, Counter):
            target[key] = value
        elif isinstance(target, set):
            target.add(key)
        else:
            setattr(counts, specs[index].name, value)
    found.sort(key=lambda item: item[0])
    return counts, [error for _, error in found]
