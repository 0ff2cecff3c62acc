"""Progress of long commands on stderr: a bar on a terminal, and elsewhere (CI, a notebook, a log file) a line
every few seconds with the stage, done/total, the time elapsed and an estimate of the time left.

A bar redraws in place, which a log file cannot; a silent command that runs for minutes looks hung. So off a
terminal a ticker thread prints a line every ``FOREWARN_PROGRESS_SECONDS`` seconds (10 by default): it keeps
printing while the command sits in one long call (Storm, a Spark job) that reports nothing. Nothing is printed
by a command that ends within the first period, and stdout is never touched (tables and JSON stay clean).
"""
from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ...errors import ConfigError
from ._options import err

PERIOD_VARIABLE = "FOREWARN_PROGRESS_SECONDS"
DEFAULT_PERIOD = 10.0


def progress_seconds() -> float:
    """The seconds between two progress lines off a terminal: ``FOREWARN_PROGRESS_SECONDS``, else 10."""
    text = os.environ.get(PERIOD_VARIABLE, "").strip()
    if not text:
        return DEFAULT_PERIOD
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{PERIOD_VARIABLE}={text!r}: expected a positive number of seconds")
    return value


def _duration(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class _Lines:
    """What the bar would show, kept for the ticker; the estimate extrapolates the pace since the total was
    last set (a stage with a total of its own starts its own estimate)."""

    def __init__(self, label: str, total: int | None, unit: str) -> None:
        self.label, self.description, self.total, self.unit = label, label, total, unit
        self.completed = 0
        self.started = self.counted_from = time.monotonic()
        self.lock = threading.Lock()

    def update(self, **fields: Any) -> None:
        with self.lock:
            if "total" in fields and fields["total"] != self.total:
                self.total, self.counted_from = fields["total"], time.monotonic()
            if "completed" in fields:
                self.completed = int(fields["completed"])
            if "advance" in fields:
                self.completed += int(fields["advance"])
            if "description" in fields:
                self.description = str(fields["description"])

    def line(self) -> str:
        with self.lock:
            now = time.monotonic()
            stage = self.label if self.description == self.label else f"{self.label}: {self.description}"
            elapsed = f"{_duration(now - self.started)} elapsed"
            if not self.total:  # a stage that counts nothing yet (or has nothing to count) shows its time alone
                count = f"{self.completed} {self.unit} so far, " if self.completed else ""
                return f"{stage}: {count}{elapsed}, no estimate (total not known)"
            done = min(self.completed, self.total)
            if done <= 0:
                estimate = "no estimate yet"
            else:
                left = (now - self.counted_from) * (self.total - done) / done
                estimate = "finishing" if done >= self.total else f"about {_duration(left)} left"
            return f"{stage}: {done}/{self.total} {self.unit}, {elapsed}, {estimate}"


@contextmanager
def progress(label: str, total: int | None = None, *, unit: str = "done",
             period: float | None = None) -> Iterator[Callable[..., None]]:
    """Progress on stderr; yields ``update(completed=..., total=..., advance=..., description=...)``.

    Args:
        label: the command's stage (``discovering``, ``cross-validation``).
        total: how many units make the whole, when known (else the count so far is shown).
        unit: what is counted, for the lines off a terminal (``runs``, ``steps``).
        period: seconds between lines off a terminal (default: :func:`progress_seconds`).
    """
    if err.is_terminal:
        columns = [TextColumn("{task.description}"), BarColumn(),
                   MofNCompleteColumn() if total else TextColumn(f"{{task.completed}} {unit}"), TimeElapsedColumn()]
        with Progress(*columns, console=err, transient=True) as bar:
            task = bar.add_task(label, total=total)

            def update(**fields: Any) -> None:
                bar.update(task, **fields)

            yield update
        return
    state = _Lines(label, total, unit)
    every = progress_seconds() if period is None else period
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(every):
            err.print(state.line(), highlight=False, markup=False, soft_wrap=True)

    ticker = threading.Thread(target=tick, name=f"forewarn progress: {label}", daemon=True)
    ticker.start()
    try:
        yield state.update
    finally:
        stop.set()
        ticker.join()
