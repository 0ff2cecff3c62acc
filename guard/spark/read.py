"""Runs read by Spark executors, each with the file and line the single-process reader would name.

:func:`map_runs` hands every partition's runs, parsed and validated by
:mod:`guard.traces` (resampled if asked), to a function that turns them into records;
the records, summed by key or not, come back to the driver.

Line numbers: a JSONL file is split into blocks read by different tasks. A first pass,
in the JVM only, counts the lines of every block; line ``k`` of a block is then line
``lines before the block + k`` of its file, which the executors know before parsing, so
errors and id-less runs (``line-N``) read exactly as in the single-process reader. A
Parquet row is numbered by its row index in its file (from 1); a row of a user's
DataFrame by its partition and its place there.
"""
from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote

from ...errors import TraceError
from ..trace_files import BadColumn, row_document
from ..traces import Run, parse_document, parse_run, resample
from .inputs import list_inputs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ERROR = -1  # the key tag of an error record: (ERROR, place); keys are int-tagged so they hash alike everywhere

Place = tuple[int, int]  # (file in the order given — or DataFrame partition —, line or row from 1)
Process = Callable[[Iterator[tuple[Place, "Run | TraceError"]]], Iterable[tuple[Any, Any]]]


@dataclass(frozen=True)
class _Reading:
    """What every partition needs to read its runs (pickled into each task, small)."""

    process: Process
    period: float | None
    names: tuple[str, ...]  # display name per file order (DataFrame input: empty)

    def name(self, file: int) -> str:
        return self.names[file] if self.names else f"<dataframe partition {file}>"


def map_runs(spark: SparkSession, source: DataFrame | Sequence[str], process: Process, *,
             period: float | None = None, split_bytes: int | None = None,
             sum_by_key: bool = True) -> tuple[list[tuple[Any, Any]], list[dict[str, Any]]]:
    """``process`` over every partition's runs; its records (summed by key, or as they are) and the inputs.

    Args:
        source: JSONL or Parquet files or directories (any Hadoop file system URI), or a
            DataFrame with one run per row: a string column ``value`` holding the run's JSON,
            or columns ``steps`` (and optionally ``id``, ``meta``), each a JSON string or
            nested Spark values (where absent fields read as null).
        process: gets ``(place, run or its TraceError)`` in reading order, yields records.
        split_bytes: the largest block a task reads (``spark.sql.files.maxPartitionBytes``).
        sum_by_key: sum the records' values by key (``reduceByKey``), else collect them.
    """
    def gather(rdd: Any) -> list[tuple[Any, Any]]:
        if sum_by_key:  # one partition per core: the records are few (one per distinct key)
            return list(rdd.reduceByKey(operator.add, max(1, spark.sparkContext.defaultParallelism)).collect())
        return list(rdd.collect())

    if isinstance(source, (str, bytes)) or not hasattr(source, "rdd"):
        inputs = list_inputs(spark, [str(p) for p in source])
        reading = _Reading(process, period, tuple(i.name for i in inputs))
        order = {i.uri: k for k, i in enumerate(inputs)}
        with _max_split(spark, split_bytes):  # the split size applies when the scans run: inside
            rdd = _file_runs(spark, [i.uri for i in inputs if i.kind == "jsonl"],
                             [i.uri for i in inputs if i.kind == "parquet"], reading, order)
            records = gather(rdd)
        return records, [{"path": i.name, "sha256": None, "bytes": i.size} for i in inputs]
    reading = _Reading(process, period, ())
    rdd = source.rdd.mapPartitionsWithIndex(partial(_dataframe_partition, reading=reading,
                                                    columns=tuple(cast("DataFrame", source).columns)))
    return gather(rdd), [{"dataframe": True, "partitions": rdd.getNumPartitions()}]


def _file_runs(spark: SparkSession, jsonl: list[str], parquet: list[str], reading: _Reading,
               order: Mapping[str, int]) -> Any:
    from pyspark.sql import functions as F

    parts = []
    if jsonl:
        lines = (spark.read.option("lineSep", "\n").text(jsonl)
                 .select(F.col("_metadata.file_path").alias("_file"),
                         F.col("_metadata.file_block_start").alias("_block"), "value"))
        first = _first_lines(lines.groupBy("_file", "_block").count().collect())  # JVM only: no Python
        parts.append(lines.rdd.mapPartitions(partial(_lines_partition, reading=reading, order=order, first=first)))
    if parquet:
        table = spark.read.parquet(*parquet)
        columns = tuple(table.columns)
        rows = table.select(F.col("_metadata.file_path").alias("_file"),
                            (F.col("_metadata.row_index") + 1).alias("_line"), *columns)
        parts.append(rows.rdd.mapPartitions(partial(_rows_partition, reading=reading, order=order,
                                                    columns=columns)))
    return parts[0] if len(parts) == 1 else spark.sparkContext.union(parts)


class _max_split:
    """Set ``spark.sql.files.maxPartitionBytes`` (and the open cost) for a block, then restore."""

    def __init__(self, spark: SparkSession, size: int | None) -> None:
        self.conf, self.size = spark.conf, size
        self.saved: dict[str, str | None] = {}

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


def _file_order(order: Mapping[str, int], path: str) -> int:
    """The position of Spark's ``_metadata.file_path`` (URL-encoded) among the inputs."""
    found = order.get(path)
    return order[unquote(path)] if found is None else found


def _lines_partition(rows: Iterator[Any], *, reading: _Reading, order: Mapping[str, int],
                     first: Mapping[tuple[str, int], int]) -> Iterable[tuple[Any, Any]]:
    """One partition of JSONL lines (file, block start, text)."""
    def payloads() -> Iterator[tuple[Place, Any]]:
        block = None
        line = 0
        for path, start, text in rows:
            if (path, start) != block:
                block = (path, start)
                line = first[block]
                file = _file_order(order, path)
            line += 1
            if text and not text.isspace():
                yield (file, line), text

    return reading.process(_runs(payloads(), reading))


def _rows_partition(rows: Iterator[Any], *, reading: _Reading, order: Mapping[str, int],
                    columns: tuple[str, ...]) -> Iterable[tuple[Any, Any]]:
    """One partition of Parquet rows (file, row number, the run's columns)."""
    payloads = (((_file_order(order, row[0]), row[1]), _document(row, 2, columns)) for row in rows)
    return reading.process(_runs(payloads, reading))


def _dataframe_partition(index: int, rows: Iterator[Any], *, reading: _Reading,
                         columns: tuple[str, ...]) -> Iterable[tuple[Any, Any]]:
    payloads = (((index, number), _document(row, 0, columns)) for number, row in enumerate(rows, start=1))
    return reading.process(_runs(payloads, reading))


def _runs(payloads: Iterable[tuple[Place, Any]], reading: _Reading) -> Iterator[tuple[Place, Run | TraceError]]:
    """Each payload as a validated (and resampled) run, or the error the local reader would raise."""
    for place, payload in payloads:
        source, line = reading.name(place[0]), place[1]
        try:
            if isinstance(payload, BadColumn):
                raise TraceError(payload.message, source=source, line=line, field=payload.column)
            if isinstance(payload, dict):
                run = parse_document(payload, source=source, line=line)
            else:
                run = parse_run(payload, source=source, line=line)
            yield place, run if reading.period is None else resample(run, reading.period)
        except TraceError as exc:
            yield place, exc


def _document(row: Any, skip: int, columns: tuple[str, ...]) -> Any:
    """A row as the run's JSON text or decoded document, as the local engine reads a Parquet row."""
    return row_document(dict(zip(columns, (_plain(v) for v in list(row)[skip:]))))


def _plain(value: Any) -> Any:
    """Spark Rows (structs) as dicts, recursively, like a decoded JSON document."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def place_error(place: Place, exc: TraceError) -> tuple[Any, Any]:
    """A record carrying an executor's error to the driver (its text exactly)."""
    return (ERROR, place), (exc.message, exc.source, exc.line, exc.field)


def errors_in_order(records: Iterable[tuple[Any, Any]]) -> list[TraceError]:
    """The errors among the records, in reading order, as the driver raises or reports them."""
    found = []
    for key, value in records:
        if key[0] == ERROR:
            message, source, line, field = value
            error = TraceError("", source=source, line=line, field=field)
            error.message = message
            found.append((key[1], error))
    found.sort(key=lambda item: item[0])
    return [error for _, error in found]
