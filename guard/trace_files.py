"""The trace files behind the paths a user gives: a file, a folder of part files, a glob, Parquet.

One rule for every engine (the Spark engine lists through Hadoop by the same rule,
:mod:`guard.spark.inputs`): a directory is read recursively, its files sorted by path,
skipping those with a part of their path below it that begins with ``_`` or ``.``
(``_SUCCESS``, ``.part-0.crc``), as Spark skips them; a path that does not exist but has
glob characters (``*``, ``?``, ``[``) is a pattern, its matches sorted; a file whose name
ends in ``.parquet`` is Parquet (one run a row, :func:`row_document`), every other file
is JSONL (one run a line). Parquet needs pyarrow (the ``parquet`` extra) in this process;
Spark reads it in its JVM.
"""
from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from ..errors import TraceError
from ._extras import require
from .traces import Run, parse_document, parse_run, read_runs

Kind = Literal["jsonl", "parquet"]
_GLOB = ("*", "?", "[")
_META = ("_file", "_line")  # columns Spark's reader adds beside a run's own: never part of the run


@dataclass(frozen=True)
class TraceFile:
    """One trace file: the name errors show (as the user wrote it, plus the path below a directory),
    where it is, its format and size."""

    name: str
    path: Path
    kind: Kind
    size: int


def kind_of(name: str) -> Kind:
    return "parquet" if name.endswith(".parquet") else "jsonl"


def is_skipped(relative: str) -> bool:
    """Whether a file at ``relative`` below a given directory is left out (Spark's rule)."""
    return any(part.startswith(("_", ".")) for part in relative.split("/"))


def list_trace_files(paths: Sequence[str | Path]) -> list[TraceFile]:
    """The files of ``paths`` in order (a directory's files, or a pattern's matches, sorted by path).

    Raises:
        TraceError: a path that does not exist (nor matches anything), a directory without trace files,
            or a file listed twice (see :func:`refuse_repeats`).
    """
    return refuse_repeats(_listed(paths))


def refuse_repeats(files: Sequence[TraceFile]) -> list[TraceFile]:
    """``files`` unchanged, unless one file comes twice (the same path, another path, a link to it, a
    folder holding it): its runs would count twice, 50 runs learnt as 100 without a word.

    Raises:
        TraceError: naming the file and the second name it was given by.
    """
    seen: dict[tuple[int, int] | str, str] = {}
    for file in files:
        try:
            status = file.path.stat()
            key: tuple[int, int] | str = (status.st_dev, status.st_ino)
        except OSError:  # gone since it was listed: reading it says so
            key = os.path.realpath(file.path)
        first = seen.get(key)
        if first is not None:
            again = "" if first == file.name else f" (also as {file.name})"
            raise TraceError(f"the same trace file is given twice{again}; its runs would count twice",
                             source=first)
        seen[key] = file.name
    return list(files)


def _listed(paths: Sequence[str | Path]) -> list[TraceFile]:
    out: list[TraceFile] = []
    for item in paths:
        given = str(item)
        path = Path(given)
        if not path.exists() and any(c in given for c in _GLOB):
            matches = sorted(glob.glob(given, recursive=True))
            if not matches:
                raise TraceError("cannot read traces: no file matches the pattern", source=given)
            out += _listed(matches)
            continue
        if not path.is_dir():
            out.append(_file(given, path))
            continue
        found = []
        for folder, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
            for name in files:
                relative = Path(folder, name).relative_to(path).as_posix()
                if not is_skipped(relative):
                    found.append(relative)
        if not found:
            raise TraceError("cannot read traces: the directory holds no trace files", source=given)
        for relative in sorted(found):
            out.append(_file(f"{given.rstrip('/')}/{relative}", path / relative))
    return out


def _file(name: str, path: Path) -> TraceFile:
    try:
        size = path.stat().st_size
    except OSError as exc:  # a user error (wrong path), not a crash
        raise TraceError(f"cannot read traces: {exc.strerror}", source=name) from exc
    return TraceFile(name, path, kind_of(name), size)


def read_trace_file(file: TraceFile, *, digest: Any = None,
                    on_bad: Callable[[TraceError], None] | None = None) -> Iterator[Run]:
    """The runs of one trace file, streamed (``digest`` and ``on_bad`` as :func:`guard.traces.read_runs`)."""
    if file.kind == "jsonl":
        return read_runs(file.path, digest=digest, on_bad=on_bad, source=file.name)
    return _parquet_runs(file, digest, on_bad)


def _parquet_runs(file: TraceFile, digest: Any, on_bad: Callable[[TraceError], None] | None) -> Iterator[Run]:
    """One run a row, numbered from 1 as the Spark engine numbers them (its row index in the file)."""
    require("parquet", f"reading Parquet traces ({file.name})", ("pyarrow",))
    import pyarrow.parquet as pq

    if digest is not None:
        with open(file.path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    try:
        parquet = pq.ParquetFile(file.path)
    except Exception as exc:  # pyarrow's own errors (not Parquet, truncated): the user's file
        raise TraceError(f"cannot read traces: not a Parquet file ({exc})", source=file.name) from exc
    line = 0
    for batch in parquet.iter_batches():
        for values in batch.to_pylist(maps_as_pydicts="strict"):
            line += 1
            try:
                yield _run_of(row_document(values), file.name, line)
            except TraceError as exc:
                if on_bad is None:
                    raise
                on_bad(exc)


def _run_of(document: Any, source: str, line: int) -> Run:
    if isinstance(document, BadColumn):
        raise TraceError(document.message, source=source, line=line, field=document.column)
    if isinstance(document, dict):
        return parse_document(document, source=source, line=line)
    return parse_run(document, source=source, line=line)


@dataclass(frozen=True)
class BadColumn:
    """A row whose ``steps`` or ``meta`` column is a string but not JSON: the run's error, once placed."""

    column: str
    message: str


def row_document(values: Mapping[str, Any]) -> Any:
    """A table row (column → plain value) as a run: the JSON text of a ``value`` column (without a
    ``steps`` column), else the document of its columns (JSON string ``steps``/``meta`` decoded,
    null columns but ``steps`` left out); or a :class:`BadColumn`."""
    if "value" in values and "steps" not in values:
        return values["value"]
    document = {}
    for name, value in values.items():
        if name in _META or (value is None and name != "steps"):
            continue
        if isinstance(value, (str, bytes)) and name in ("steps", "meta"):
            try:
                value = orjson.loads(value)
            except orjson.JSONDecodeError as exc:
                return BadColumn(name, f"not valid JSON ({exc})")
        document[name] = value
    return document
