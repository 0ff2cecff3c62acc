"""What every ``forewarn`` subcommand shares: consoles, output formats, JSON printing, and
the checks of option values at the boundary (finite, in range), so a bad value is one
clear line and exit status 2, never a traceback, a hang or a silently useless result."""
from __future__ import annotations

import math
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import orjson
import typer
from rich.console import Console
from rich.markup import escape

from ...errors import ConfigError, ForewarnWarning, InputError

if TYPE_CHECKING:
    from ..evaluation.tune import Target

out = Console()
err = Console(stderr=True)

# Bounds that keep the mathematics meaningful (and the solvers finite):
MAX_ALPHA = 1e6          # Laplace α far above any count makes every row uniform and underflows nothing useful
MIN_PRECISION = 1e-15    # below double precision a solver never converges
MIN_PAC = 1e-9           # ε or δ smaller than this ask for more runs than a 64-bit count can hold


# Every command that writes a file: a missing parent folder is an error unless asked for.
MkdirOption = Annotated[bool, typer.Option("--mkdir", help="Create the output's missing parent folders "
                                                           "(without it, a missing folder is an error).")]


class Format(str, Enum):
    table = "table"
    json = "json"


class Engine(str, Enum):
    """``--engine``: count or replay in this process, or on Apache Spark."""
    local = "local"
    spark = "spark"


class OnError(str, Enum):
    """``--on-error``: a bad record stops the command, or is skipped and counted."""
    stop = "stop"
    skip = "skip"


def print_json(value: Any) -> None:
    """Pretty JSON on stdout (numpy scalars and arrays included)."""
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")


@contextmanager
def caught_warnings() -> Iterator[list[str]]:
    """Collect Forewarn's warnings raised inside into the yielded list, for a command to show once it
    succeeded (a failing command prints its one error line only); other warnings pass through."""
    lines: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ForewarnWarning)
        yield lines
    for w in caught:
        if issubclass(w.category, ForewarnWarning):
            lines.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def print_warnings(lines: list[str]) -> None:
    """One ``warning: ...`` line each on stderr."""
    for line in lines:
        err.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    """One warning line on stderr (never on stdout: tables and JSON stay clean)."""
    err.print(f"[yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True, markup=True)


def _finite(option: str, value: float) -> None:
    if not math.isfinite(value):
        raise ConfigError(f"{option}: expected a finite number, got {value}")


def check_alpha(value: float | None, option: str = "--alpha") -> None:
    """Laplace smoothing α: finite, 0 ≤ α ≤ 10⁶."""
    if value is None:
        return
    _finite(option, value)
    if not 0.0 <= value <= MAX_ALPHA:
        raise ConfigError(f"{option}: the smoothing α must lie in [0, {MAX_ALPHA:g}], got {value:g}")


def check_period(value: float | None, option: str = "--period") -> None:
    """A resampling period: a finite positive number of seconds (the step count is bounded on resampling)."""
    if value is None:
        return
    _finite(option, value)
    if not value > 0:
        raise ConfigError(f"{option}: expected a positive number of seconds, got {value:g}")


def check_precision(value: float, option: str = "--precision") -> None:
    """A solver precision: finite, in [10⁻¹⁵, 1)."""
    _finite(option, value)
    if not MIN_PRECISION <= value < 1.0:
        raise ConfigError(f"{option}: expected a precision in [{MIN_PRECISION:g}, 1), got {value:g}")


def check_probability(value: float | None, option: str) -> None:
    """PAC ε or δ: finite, in [10⁻⁹, 1)."""
    if value is None:
        return
    _finite(option, value)
    name = option.lstrip("-")
    if not 0.0 < value < 1.0:
        raise ConfigError(f"{option}: {name} must lie strictly between 0 and 1, got {value:g}")
    if value < MIN_PAC:  # the PAC sample size would not fit a count
        raise ConfigError(f"{option}: {name} must be at least {MIN_PAC:g}, got {value:g}")


def check_positive_int(value: int | None, option: str) -> None:
    if value is not None and value < 1:
        raise ConfigError(f"{option}: expected a positive whole number, got {value}")


def check_folds(folds: int) -> None:
    """``--folds`` of a cross-validating command (evaluate, discover, init)."""
    if folds < 2:
        raise InputError(f"--folds: cross-validation needs at least 2 folds, got {folds}")


def discovery_target(target: str, command: str) -> Target:
    """``--target`` of discovery (``false-alarms=X`` or ``detection=Y``), parsed: a target without an action."""
    from ..evaluation.tune import parse_target  # the tuning code loads only for commands that use it

    chosen = parse_target(target)
    if chosen.action is not None:
        raise InputError(f"--target {target!r}: {command} takes false-alarms=X or detection=Y, without an action")
    return chosen


def print_summary(summary: Any, verb: str) -> None:
    """An ingest summary (:class:`forewarn.guard.read_summary.IngestSummary`) on stderr: stdout stays for
    tables and JSON."""
    for i, line in enumerate(summary.lines(verb)):
        style = "yellow" if i and line.lstrip().startswith(("skipped", "rewritten", "warning")) else None
        err.print(line, style=style, highlight=False, markup=False, soft_wrap=True)


@contextmanager
def stdout_for_python_only(active: bool = True) -> Iterator[None]:
    """Send what native code (Storm) prints on file descriptor 1 to stderr, while Python's
    own ``sys.stdout`` keeps writing to the real standard output.

    Storm's C++ warnings are printed with ``std::cout``; without this they land in the
    middle of ``--format json``. Does nothing when ``sys.stdout`` is not the process's
    descriptor 1 (tests capturing output, an embedding application).
    """
    try:
        sys.stdout.flush()
        if not active or sys.stdout.fileno() != 1:
            raise OSError
        saved = os.dup(1)
    except (AttributeError, OSError, ValueError):
        yield
        return
    original: TextIO = sys.stdout
    python_out = os.fdopen(saved, "w", buffering=1, encoding=getattr(original, "encoding", None) or "utf-8",
                           errors="replace", closefd=False)
    os.dup2(2, 1)
    sys.stdout = python_out
    try:
        yield
    finally:
        python_out.flush()
        os.dup2(saved, 1)
        sys.stdout = original
        python_out.close()
        os.close(saved)
