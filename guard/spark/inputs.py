"""The trace files behind the paths a user gives Spark: files, directories or globs on any Hadoop file system.

Listing goes through Hadoop's ``FileSystem`` (in the driver's JVM), so ``s3a://``,
``hdfs://`` and local paths are read alike, by the rule the local engine follows
(:mod:`guard.trace_files`): inside a directory, files whose names begin with ``_`` or ``.``
(``_SUCCESS``, checksums) are skipped, as Spark skips them; a path that does not exist but
has glob characters is a pattern; files ending in ``.parquet`` are Parquet, every other
file is JSONL.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ...errors import TraceError
from ..trace_files import is_skipped, kind_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class SparkInput:
    """One trace file: the name errors show (as the user wrote it), Spark's URI, its format and size."""

    name: str
    uri: str
    kind: str  # "jsonl" or "parquet"
    size: int


def list_inputs(spark: SparkSession, paths: list[str]) -> list[SparkInput]:
    """The files of ``paths`` in order (a directory's files sorted by path).

    Raises:
        TraceError: a path that does not exist, or a directory without trace files.
    """
    jvm: Any = spark.sparkContext._jvm  # py4j's gateway: untyped
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    out: list[SparkInput] = []
    for given in paths:
        path = jvm.org.apache.hadoop.fs.Path(given)
        try:
            fs = path.getFileSystem(conf)
            if not fs.exists(path) and any(c in given for c in "*?["):
                matches = sorted(str(s.getPath().toString()) for s in (fs.globStatus(path) or []))
                if not matches:
                    raise TraceError("cannot read traces: no file matches the pattern", source=given)
                out += list_inputs(spark, matches)
                continue
            status = fs.getFileStatus(path)
        except TraceError:
            raise
        except Exception as exc:  # py4j wraps FileNotFoundException, UnsupportedFileSystemException, …
            raise TraceError(f"cannot read traces: {_java_reason(exc)}", source=given) from exc
        if not status.isDirectory():
            out.append(_input(given, fs.makeQualified(path).toString(), status.getLen()))
            continue
        root = fs.makeQualified(path).toString().rstrip("/")
        found = []
        listing = fs.listFiles(path, True)
        while listing.hasNext():
            entry = listing.next()
            uri = entry.getPath().toString()
            relative = uri[len(root):].lstrip("/")
            if is_skipped(relative):
                continue
            found.append((uri, relative, entry.getLen()))
        if not found:
            raise TraceError("cannot read traces: the directory holds no trace files", source=given)
        for uri, relative, size in sorted(found):
            out.append(_input(f"{given.rstrip('/')}/{unquote(relative)}", uri, size))
    return out


def _input(name: str, uri: str, size: int) -> SparkInput:
    return SparkInput(name=name, uri=uri, kind=kind_of(uri), size=int(size))


def _java_reason(exc: Any) -> str:
    """The Java exception's own message, without py4j's stack (e.g. 'File … does not exist')."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        name = java.getClass().getSimpleName()
        if name == "FileNotFoundException":
            return "No such file or directory"
        return f"{name}: {java.getMessage()}"
    return str(exc).splitlines()[0]
