"""The input formats as a table of readers: each format is one module (what it reads, why a record does not fit
it, how its records become runs) and one line registering it (in ``guard/ingest/__init__.py``, or a user's own
code for a format of their own).

A format is a :class:`LogFormat`:

* ``why_not(record)`` — None when a record fits the format, else why not, in a few words (``"no 'steps'"``):
  ``auto`` picks the first registered format that fits a file's first records, and when none does the error
  lists every format with its reason;
* ``read(path, reading)`` — the file's runs; a bad record goes to ``reading.handle`` (which raises it or counts
  it, as ``--on-error`` says) and reading goes on;
* ``defaults`` — the format's own ``--extractor``, ``--on-mismatch`` and ``--on-error``, used when the command
  line (or the caller of :func:`guard.ingest.read_input`) gives none: a published log format knows how it is
  best read (``agentspec``: replayed on the household, the simulator's verdict kept, bad records skipped).

The order of registration is the order ``auto`` tries: the most specific formats first (``agentspec`` before
``langchain``, whose records it refines), the loosest last (``columnar``: any object of arrays).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ForewarnError, InputError, TraceError
from ..read_summary import IngestSummary, OnError
from ..traces import Run
from ._documents import kind_of
from .agents import Extractor, resolve_extractor
from .worlds import ActionWorld, OnMismatch, default_world

AUTO = "auto"  # not a format: per file, the first registered format that fits


@dataclass(frozen=True)
class Defaults:
    """What a format is read with when the caller says nothing (None: the built-in default)."""

    extractor: str | None = None     # "tools" (None), "household" or MODULE:NAME
    on_mismatch: OnMismatch = "error"
    on_error: OnError = "stop"


@dataclass
class Reading:
    """What a format's reader gets with each file: the caller's options, resolved for this file's format."""

    summary: IngestSummary
    handle: Callable[[ForewarnError], None]  # a bad record: raised (--on-error stop) or counted (skip)
    on_mismatch: OnMismatch = "error"
    extractor: Extractor | str | None = None
    world: ActionWorld | None = None
    time_column: str = "t"
    action_column: str = "action"
    # extractors resolved by name, shared by the files of one read: a user's module is imported once
    resolved: dict[str | None, Extractor] = field(default_factory=dict)

    @property
    def household(self) -> bool:
        """Whether the agent's calls are its actions, replayed in the world (``--extractor household``)."""
        return self.extractor == "household"

    def agent_extractor(self) -> Extractor:
        """The extractor agent logs' transcripts become states through (the tool domain's by default)."""
        if callable(self.extractor):
            return self.extractor
        name = self.extractor
        if name not in self.resolved:
            self.resolved[name] = resolve_extractor(name)
        return self.resolved[name]

    def actions_world(self) -> ActionWorld:
        """Where action-only logs are replayed: the one passed in, else the process's (:func:`use_world`)."""
        return self.world if self.world is not None else default_world()

    def bad(self, exc: TraceError) -> None:
        self.handle(exc)


Fits = Callable[[Any], "str | None"]
Reader = Callable[[Path, Reading], Iterator[Run]]


@dataclass(frozen=True)
class LogFormat:
    """One input format (see the module docstring).

    Attributes:
        name: the ``--input-format`` value.
        describe: what it reads, in a few words (``--input-format``'s help, ``auto``'s error).
        why_not: None when a record fits, else the reason it does not.
        read: the runs of one file.
        defaults: the options it is read with when the caller gives none.
        agent: its records are agent runs whose states an extractor makes (``--extractor`` applies).
        household: an embodied agent's calls can be replayed as actions (``--extractor household``).
    """

    name: str
    describe: str
    why_not: Fits
    read: Reader
    defaults: Defaults = Defaults()
    agent: bool = False
    household: bool = False


_FORMATS: dict[str, LogFormat] = {}


def register(fmt: LogFormat, *, before: str | None = None) -> None:
    """Add a format (``auto`` tries it after those registered earlier, or just before ``before``).

    Raises:
        ForewarnError: its name is taken (or is ``auto``), or ``before`` names no format.
    """
    if fmt.name == AUTO or fmt.name in _FORMATS:
        raise InputError(f"input format {fmt.name!r} is already registered")
    if not fmt.name or not fmt.name.replace("-", "").replace("_", "").isalnum():
        raise InputError(f"input format name {fmt.name!r}: expected letters, digits, '-' or '_'")
    if before is None:
        _FORMATS[fmt.name] = fmt
        return
    if before not in _FORMATS:
        raise InputError(f"register(before={before!r}): no such input format; known: {', '.join(_FORMATS)}")
    items = list(_FORMATS.items())
    at = [name for name, _ in items].index(before)
    _FORMATS.clear()
    _FORMATS.update([*items[:at], (fmt.name, fmt), *items[at:]])


def unregister(name: str) -> None:
    """Remove a format registered with :func:`register` (a test's, a plugin's)."""
    _FORMATS.pop(name, None)


def formats() -> list[LogFormat]:
    """The registered formats, in the order ``auto`` tries them."""
    return list(_FORMATS.values())


def format_names() -> list[str]:
    """``auto`` and every registered format's name: the values ``--input-format`` takes."""
    return [AUTO, *_FORMATS]


def get_format(name: str) -> LogFormat:
    """The format of this name.

    Raises:
        ForewarnError: no such format; the message lists the known ones.
    """
    try:
        return _FORMATS[name]
    except KeyError:
        raise InputError(f"--input-format: unknown format {name!r}; expected one of "
                            f"{', '.join(format_names())}") from None


def not_an_object(value: Any) -> str | None:
    """The reason a record that is not a JSON object fits no format made of objects (None for an object)."""
    return None if isinstance(value, dict) else f"a record is {kind_of(value)}, not an object"
