"""What every ``forewarn`` subcommand shares: consoles, output formats, JSON printing."""
from __future__ import annotations

import sys
from enum import Enum
from typing import Any

import orjson
from rich.console import Console

__all__ = ["Format", "out", "err", "print_json"]

out = Console()
err = Console(stderr=True)


class Format(str, Enum):
    table = "table"
    json = "json"


def print_json(value: Any) -> None:
    """Pretty JSON on stdout (numpy scalars and arrays included)."""
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
