"""What an ingest (or a learn) read: runs kept, records skipped by reason, rewrites by kind.

Nothing is dropped or rewritten silently: a reader that skips a record (``--on-error
skip``) or rewrites a logged fact (``--on-mismatch simulator``) reports it here, and
the CLI prints the summary at the end. Skips are grouped by *reason*, the error message
with its particulars (indices, quoted values, numbers) blanked, so thirty failures of
the same kind read as one line with its first few places.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ForewarnError, InputError, TraceError

OnError = Literal["skip", "stop"]
_FIRST = 5  # places kept per reason
_INDEX = re.compile(r"\[\d+\]")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(\.\d+)?(e-?\d+)?")


def reason_of(exc: ForewarnError) -> str:
    """The kind of an error: its field and message without the particulars."""
    text = exc.message
    if isinstance(exc, TraceError):
        prefix = f"{exc.source or '<traces>'}" + ("" if exc.line is None else f":{exc.line}") + ": "
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = _INDEX.sub("[]", text)
    text = _QUOTED.sub("'…'", text)
    text = _NUMBER.sub("N", text)
    return text if len(text) <= 120 else text[:119] + "…"


def _place(exc: ForewarnError) -> str:
    if isinstance(exc, TraceError):
        where = exc.source or "<traces>"
        return where if exc.line is None else f"{where}:{exc.line}"
    return "?"


@dataclass
class _Tally:
    count: int = 0
    places: list[str] = field(default_factory=list)

    def add(self, place: str) -> None:
        self.count += 1
        if len(self.places) < _FIRST:
            self.places.append(place)


@dataclass
class IngestSummary:
    """Counts of one ingest: see the module docstring.

    Attributes:
        runs: runs read and kept.
        skipped: by reason, each with its count and first places (``file:line``).
        mismatches: logged facts rewritten, by kind, with count and first places.
        empty: input files that held no record at all.
        formats: the format each file was read as.
        kept: record fields a format does not map that were kept under the runs' ``meta``, with the number of
            runs that kept each (``agentspec``: ``risk_category``, ``output``, …).
        cut: values kept under ``meta`` that were cut to size (long texts, long lists).
    """

    runs: int = 0
    skipped: dict[str, _Tally] = field(default_factory=dict)
    mismatches: dict[str, _Tally] = field(default_factory=dict)
    empty: list[str] = field(default_factory=list)
    formats: dict[str, str] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)
    cut: int = 0

    @property
    def skipped_count(self) -> int:
        return sum(t.count for t in self.skipped.values())

    @property
    def mismatch_count(self) -> int:
        return sum(t.count for t in self.mismatches.values())

    def skip(self, exc: ForewarnError) -> None:
        self.skipped.setdefault(reason_of(exc), _Tally()).add(_place(exc))

    def mismatch(self, kind: str, place: str) -> None:
        self.mismatches.setdefault(kind, _Tally()).add(place)

    def keep(self, names: Iterable[str], cut: int = 0) -> None:
        """A run was written with these record fields under its ``meta``, ``cut`` of their values cut to size."""
        for name in names:
            self.kept[name] = self.kept.get(name, 0) + 1
        self.cut += cut

    def handler(self, on_error: OnError) -> Callable[[ForewarnError], None]:
        """What to do with a bad record: raise it (``stop``) or count it (``skip``)."""
        if on_error not in ("skip", "stop"):
            raise InputError(f"--on-error: expected 'skip' or 'stop', got {on_error!r}")

        def handle(exc: ForewarnError) -> None:
            if on_error == "stop":
                raise exc
            self.skip(exc)

        return handle

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "skipped": self.skipped_count,
            "skipped_by_reason": [{"reason": r, "count": t.count, "first": t.places}
                                  for r, t in self.skipped.items()],
            "mismatches": self.mismatch_count,
            "mismatches_by_kind": [{"kind": k, "count": t.count, "first": t.places}
                                   for k, t in self.mismatches.items()],
            "empty_files": list(self.empty),
            "formats": dict(self.formats),
            **({"kept_in_meta": dict(self.kept), "cut_in_meta": self.cut} if self.kept else {}),
        }

    def lines(self, verb: str = "read") -> list[str]:
        """The summary in words, one line per fact (for stderr)."""
        total = self.runs + self.skipped_count
        head = f"{verb} {self.runs} of {total} runs" if self.skipped else f"{verb} {self.runs} runs"
        kinds = sorted(set(self.formats.values()) - {"empty"})
        if kinds:
            head += f" ({', '.join(kinds)})"
        out = [head + (f"; skipped {self.skipped_count}" if self.skipped else "; skipped none")
               + (f"; {self.mismatch_count} logged facts rewritten" if self.mismatches else "")]
        if self.kept:
            fields = sorted(self.kept.items(), key=lambda kv: (-kv[1], kv[0]))
            out.append("  kept under meta: " + ", ".join(f"{name} ({n})" for name, n in fields)
                       + (f"; {self.cut} long values cut to size" if self.cut else ""))
        for reason, tally in sorted(self.skipped.items(), key=lambda kv: -kv[1].count):
            out.append(f"  skipped {tally.count}: {reason} (first at {', '.join(tally.places)})")
        for kind, tally in sorted(self.mismatches.items(), key=lambda kv: -kv[1].count):
            out.append(f"  rewritten {tally.count}: {kind} (first at {', '.join(tally.places)})")
        for path in self.empty:
            out.append(f"  warning: {path} holds no runs")
        return out
