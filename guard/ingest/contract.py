"""The contract's own JSON Lines as an input format (``jsonl``): one run a line, ``{"id", "steps": [{"state",
"action", "t"}], "meta"}``, read by :func:`guard.traces.read_runs`."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..traces import Run, read_runs
from .formats import LogFormat, Reading, not_an_object


def why_not(record: Any) -> str | None:
    return not_an_object(record) or (None if "steps" in record else "no 'steps'")


def read(path: Path, reading: Reading) -> Iterator[Run]:
    """Line by line, each bad line handed to ``reading.handle``."""
    return read_runs(path, on_bad=reading.handle)


FORMAT = LogFormat("jsonl", "the contract: one run a line", why_not, read)
