"""Reading a file of JSON records: JSON Lines, or one JSON document (an object or a list)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from ...errors import TraceError


@dataclass(frozen=True)
class Record:
    """One record and where it is: ``line`` in a JSON Lines file, or ``index`` in a JSON list."""

    value: Any
    source: str
    line: int | None = None
    index: int | None = None

    def where(self, field: str | None = None) -> str | None:
        """The field path, prefixed with the list index for records of a JSON list."""
        if self.index is None:
            return field
        return f"[{self.index}]" + ("" if field is None else ("" if field.startswith("[") else ".") + field)

    def error(self, message: str, field: str | None = None) -> TraceError:
        return TraceError(message, source=self.source, line=self.line, field=self.where(field))


def _open(path: str | Path) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as exc:
        raise TraceError(f"cannot read traces: {exc.strerror}", source=str(path)) from exc


def records(path: str | Path, on_bad: Callable[[TraceError], None] | None = None) -> Iterator[Record]:
    """The records of a file, streamed: JSON Lines when its first line is a JSON value,
    else one document (read whole). A list yields its items; an object yields itself.

    Args:
        on_bad: called with the error of a JSON Lines line that is not valid JSON, and
            reading goes on; None raises it.

    Raises:
        TraceError: a line or document that is not valid JSON.
    """
    source = str(path)
    with _open(path) as handle:
        number, raw = 0, b""
        for number, raw in enumerate(handle, start=1):  # noqa: B007 - `number` is read after the loop
            if raw.strip():
                break
        else:
            return
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            # a pretty-printed document spreads over lines: read it whole
            rest = raw + handle.read()
            try:
                document = orjson.loads(rest)
            except orjson.JSONDecodeError as exc:
                error = TraceError(f"neither JSON Lines nor one JSON document ({exc})", source=source, line=number)
                if on_bad is None:
                    raise error from exc
                # tolerant: read it as JSON Lines whose first line is bad
                yield from _lines(rest.splitlines(keepends=True), source, number, on_bad)
                return
            if isinstance(document, list):
                for index, item in enumerate(document):
                    yield Record(item, source, index=index)
            else:
                yield Record(document, source, line=number)
            return
        if isinstance(value, list):  # a JSON list on one line
            for index, item in enumerate(value):
                yield Record(item, source, index=index)
        else:
            yield Record(value, source, line=number)
        for number, raw in enumerate(handle, start=number + 1):  # noqa: B020 - start is read once
            if not raw.strip():
                continue
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                error = TraceError(f"not valid JSON ({exc})", source=source, line=number)
                if on_bad is None:
                    raise error from exc
                on_bad(error)
                continue
            yield Record(value, source, line=number)


def _lines(lines: list[bytes], source: str, first: int, on_bad: Callable[[TraceError], None]) -> Iterator[Record]:
    for number, raw in enumerate(lines, start=first):
        if not raw.strip():
            continue
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            on_bad(TraceError(f"not valid JSON ({exc})", source=source, line=number))
            continue
        if isinstance(value, list) and number == first:
            for index, item in enumerate(value):
                yield Record(item, source, index=index)
        else:
            yield Record(value, source, line=number)


def first_record(path: str | Path) -> Any:
    """The first record of a file, or None when it is empty or not JSON (the caller decides)."""
    try:
        for record in records(path):
            return record.value
    except TraceError:
        return None
    return None


def kind_of(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
             int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)
