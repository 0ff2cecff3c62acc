"""Columnar runs: one object of equal-length arrays per run, as driving logs often are.

::

    {"id": "drive-7", "meta": {"driver": "late"},
     "columns": {"t": [0.0, 0.1, 0.2], "speed": [8.1, 8.0, 7.7], "light.color": ["green", "green", "yellow"]}}

The arrays may also sit at the top level beside ``id`` and ``meta`` (without
``columns``). Step ``i`` has the state ``{column: values[i]}``; a dotted column name
nests (``light.color`` → ``{"light": {"color": ...}}``). The time column (``t`` by
default) gives each step's ``t`` and the action column (``action``) its action; neither
goes into the state. A file holds one run a line (JSON Lines), or one document: a run
object or a list of them.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import TraceError
from ..traces import Run
from ._documents import Record, kind_of, records
from .formats import LogFormat, Reading, not_an_object

_RESERVED = ("id", "meta")


def read_columnar(path: str | Path, *, time_column: str = "t", action_column: str = "action") -> Iterator[Run]:
    """Yield the runs of a columnar file (see the module docstring).

    Raises:
        TraceError: naming the file, the line (or list index) and the column at fault.
    """
    for record in records(path):
        yield parse_columnar(record, time_column=time_column, action_column=action_column)


def parse_columnar(record: Record, *, time_column: str = "t", action_column: str = "action") -> Run:
    """One columnar run as a :class:`Run` in the contract's shape."""
    doc = record.value
    if not isinstance(doc, dict):
        raise record.error(f"a columnar run must be a JSON object, got {kind_of(doc)}")
    if "columns" in doc:
        columns = doc["columns"]
        prefix = "columns."
        if not isinstance(columns, dict):
            raise record.error(f"expected an object of arrays, got {kind_of(columns)}", "columns")
        extra = sorted(set(doc) - {"columns", *_RESERVED})
        if extra:
            raise record.error(f"unexpected key(s) {extra} beside 'columns'; put arrays inside 'columns'")
    else:
        columns = {k: v for k, v in doc.items() if k not in _RESERVED}
        prefix = ""
    if not columns:
        raise record.error("no columns: expected arrays of equal length, one entry per step")
    length = None
    first = ""
    for name, values in columns.items():
        if not isinstance(values, list):
            raise record.error(f"expected an array (one value per step), got {kind_of(values)}", prefix + name)
        if length is None:
            length, first = len(values), name
        elif len(values) != length:
            raise record.error(f"has {len(values)} values but column {first!r} has {length}; all columns "
                               "must have one value per step", prefix + name)
    if not length:
        raise record.error("a run needs at least one step; the columns are empty",
                           prefix + first if first else None)
    times = columns.get(time_column)
    if times is not None:
        for i, t in enumerate(times):
            if t is not None and (t.__class__ is bool or not isinstance(t, (int, float))):
                raise record.error(f"expected a number of seconds, got {kind_of(t)}", f"{prefix}{time_column}[{i}]")
    actions = columns.get(action_column)
    if actions is not None:
        for i, a in enumerate(actions):
            if a is not None and not isinstance(a, (str, dict)):
                raise record.error(f"expected a string or an object, got {kind_of(a)}",
                                   f"{prefix}{action_column}[{i}]")
    state_columns = [(name, name.split("."), values) for name, values in columns.items()
                     if name not in (time_column, action_column)]
    if not state_columns:
        raise record.error("only the time and action columns: no state column to build states from")
    _check_nesting(record, [name for name, _, _ in state_columns], prefix)
    steps: list[dict[str, Any]] = []
    for i in range(length):
        state: dict[str, Any] = {}
        for _, path, values in state_columns:
            node = state
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = values[i]
        step: dict[str, Any] = {"state": state}
        if times is not None and times[i] is not None:
            step["t"] = times[i]
        if actions is not None and actions[i] is not None:
            step["action"] = actions[i]
        steps.append(step)
    default_id = f"line-{record.line}" if record.index is None else f"run-{record.index}"
    run_id = doc.get("id", default_id)
    if not isinstance(run_id, (str, int)) or run_id.__class__ is bool:
        raise record.error(f"expected a string, got {kind_of(run_id)}", "id")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise record.error(f"expected an object, got {kind_of(meta)}", "meta")
    return Run(id=str(run_id), steps=steps, meta=meta, source=record.source, line=record.line or 0)


def _check_nesting(record: Record, names: list[str], prefix: str) -> None:
    """``a`` and ``a.b`` cannot both be columns: ``a`` would be a value and an object at once."""
    full = set(names)
    for name in names:
        if any(not part for part in name.split(".")):
            raise record.error("a column name must not have empty parts between dots", prefix + name)
        parts = name.split(".")
        for k in range(1, len(parts)):
            parent = ".".join(parts[:k])
            if parent in full:
                raise record.error(f"column {parent!r} is a value, so {name!r} cannot nest inside it",
                                   prefix + name)


def why_not(record: Any) -> str | None:
    """Fits an object with ``columns``, or whose fields besides ``id`` and ``meta`` are all arrays."""
    if not isinstance(record, dict):
        return not_an_object(record)
    if "columns" in record:
        return None
    arrays = [k for k in record if k not in _RESERVED]
    if not arrays:
        return "no 'columns' and no arrays"
    not_array = next((k for k in arrays if not isinstance(record[k], list)), None)
    return None if not_array is None else f"{not_array!r} is {kind_of(record[not_array])}, not an array"


def _read(path: Path, reading: Reading) -> Iterator[Run]:
    for record in records(path, on_bad=reading.bad):
        try:
            yield parse_columnar(record, time_column=reading.time_column, action_column=reading.action_column)
        except TraceError as exc:
            reading.handle(exc)


FORMAT = LogFormat("columnar", "equal-length arrays per run, as driving logs are", why_not, _read)
