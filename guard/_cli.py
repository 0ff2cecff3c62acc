"""What every ``forewarn`` subcommand shares: consoles, output formats, JSON printing."""
from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape

from guard.errors import ForewarnWarning

__all__ = ["Format", "out", "err", "print_json", "caught_warnings", "print_warnings"]

out = Console()
err = Console(stderr=True)


class Format(str, Enum):
    table = "table"
    json = "json"


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
