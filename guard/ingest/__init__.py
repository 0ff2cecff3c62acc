"""Reading the logs people already have, as runs in the contract's shape.

Formats (:class:`InputFormat`):

* ``jsonl`` — the contract: one run a line, ``{"id", "steps": [{"state", "action", "t"}], "meta"}``.
* ``columnar`` — one object of equal-length arrays per run (:mod:`guard.ingest.columnar`).
* ``actions`` — action-only embodied logs, replayed on the symbolic household
  (:mod:`guard.ingest.actions`).
* ``auto`` — per file, from its first record: ``steps`` → jsonl, ``actions`` → actions,
  ``columns`` or only arrays → columnar; anything else is read as jsonl (whose errors
  then name the line and field).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from guard.ingest._documents import first_record
from guard.ingest.actions import OnMismatch, read_actions
from guard.ingest.columnar import read_columnar
from guard.traces import Run, read_runs, resample

__all__ = ["InputFormat", "detect_format", "read_input", "read_actions", "read_columnar", "OnMismatch"]


class InputFormat(str, Enum):
    auto = "auto"
    jsonl = "jsonl"
    columnar = "columnar"
    actions = "actions"


def detect_format(path: str | Path) -> InputFormat:
    """The format of a file, from its first record (``jsonl`` when in doubt)."""
    first: Any = first_record(path)
    if not isinstance(first, dict):
        return InputFormat.jsonl
    if "steps" in first:
        return InputFormat.jsonl
    if "actions" in first:
        return InputFormat.actions
    arrays = [v for k, v in first.items() if k not in ("id", "meta")]
    if "columns" in first or (arrays and all(isinstance(v, list) for v in arrays)):
        return InputFormat.columnar
    return InputFormat.jsonl


def read_input(paths: Sequence[str | Path], input_format: InputFormat = InputFormat.auto, *,
               period: float | None = None, time_column: str = "t", action_column: str = "action",
               on_mismatch: OnMismatch = "error") -> Iterator[Run]:
    """Runs from files of any supported format, streamed, resampled to ``period`` seconds if given.

    Raises:
        TraceError: a malformed record, naming the file, line and field.
    """
    for path in paths:
        kind = detect_format(path) if input_format is InputFormat.auto else input_format
        runs: Iterator[Run]
        if kind is InputFormat.columnar:
            runs = read_columnar(path, time_column=time_column, action_column=action_column)
        elif kind is InputFormat.actions:
            runs = read_actions(path, on_mismatch=on_mismatch)
        else:
            runs = read_runs(path)
        for run in runs:
            yield run if period is None else resample(run, period)
