"""Reading the logs people already have, as runs in the contract's shape.

The formats are a table of readers (:mod:`guard.ingest.formats`): each is one module — what it reads, why a
record does not fit it, how its records become runs, the options it is best read with — and one line below
registering it. ``auto`` (the default) picks, per file, the first format in that order that fits its first
records; when none fits, the error lists every format tried and why it did not fit.

* ``jsonl`` — the contract: one run a line, ``{"id", "steps": [{"state", "action", "t"}], "meta"}``
  (:mod:`guard.ingest.contract`).
* ``actions`` — action-only logs, replayed in a domain's world such as the embodied
  domain's symbolic household (:mod:`forewarn.guard.ingest.actions`).
* ``agentspec`` — AgentSpec's embodied logs as published, read with the household, the simulator's verdict and
  skipping by default, every unmapped field kept under ``meta`` (:mod:`guard.ingest.agentspec`).
* ``langchain`` — LangChain ``AgentExecutor`` / ReAct ``intermediate_steps``
  (:mod:`guard.ingest.langchain_log`).
* ``otel`` — OpenTelemetry GenAI spans as OTLP JSON, one run per trace (:mod:`guard.ingest.otel`).
* ``langgraph`` — LangGraph ``stream`` dumps, state snapshots and checkpoints of
  ``create_agent`` runs (:mod:`guard.ingest.langgraph`).
* ``columnar`` — one object of equal-length arrays per run (:mod:`guard.ingest.columnar`).

The agent formats become states through a state extractor (the one the guard
uses: :mod:`guard.ingest.agents`). Bad records stop the reading (``on_error="stop"``)
or are skipped and counted (``"skip"``) in an :class:`IngestSummary`, as are logged
facts an ``on_mismatch="simulator"`` reading rewrites.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from enum import Enum
from itertools import islice
from pathlib import Path

from ...errors import ForewarnError, InputError, TraceError
from ..read_summary import IngestSummary, OnError
from ..trace_files import list_trace_files, read_trace_file
from ..traces import Run, resample
from . import actions, agentspec, columnar, contract, langchain_log, langgraph, otel
from ._documents import Record, records
from .actions import read_actions
from .agents import Extractor, resolve_extractor
from .columnar import read_columnar
from .formats import AUTO, Defaults, LogFormat, Reading, format_names, formats, get_format, register, unregister
from .worlds import ActionWorld, OnMismatch, use_world

__all__ = ["InputFormat", "detect_format", "read_input", "read_actions", "read_columnar", "OnMismatch", "OnError",
           "IngestSummary", "resolve_extractor", "ActionWorld", "use_world", "LogFormat", "Defaults", "Reading",
           "register", "unregister", "get_format", "formats", "format_names", "on_error_of"]

# The formats, in the order `auto` tries them: the most specific first, the loosest (columnar) last.
register(contract.FORMAT)
register(actions.FORMAT)
register(agentspec.FORMAT)
register(langchain_log.FORMAT)
register(otel.FORMAT)
register(langgraph.FORMAT)
register(columnar.FORMAT)

_SNIFF = 20  # records looked at to recognise a file


class InputFormat(str, Enum):
    """The built-in formats' names, for code that names one (``InputFormat.langchain``). The registry is what
    ``--input-format`` takes and ``read_input`` reads: every name here, and any format registered later."""

    auto = "auto"
    jsonl = "jsonl"
    columnar = "columnar"
    actions = "actions"
    agentspec = "agentspec"
    langchain = "langchain"
    otel = "otel"
    langgraph = "langgraph"


def _named(name: str) -> InputFormat | str:
    """A built-in format as its :class:`InputFormat`, a registered one as its name."""
    try:
        return InputFormat(name)
    except ValueError:
        return name


def detect_format(path: str | Path) -> InputFormat | str:
    """The format of a file, from its first records (a format registered outside Forewarn: its name).

    Raises:
        TraceError: no format fits; the message says what each format expected.
    """
    found, _ = _detect(path)
    return _named(found.name)


def _detect(path: str | Path) -> tuple[LogFormat, bool]:
    """The format, and whether the file holds any record."""
    first: Record | None = None
    bad: list[TraceError] = []
    candidates = formats()
    contract_format = get_format(InputFormat.jsonl.value)
    try:
        sample = list(islice(records(path, on_bad=bad.append), _SNIFF))
    except TraceError as exc:
        if "cannot read" in exc.message:
            raise
        return contract_format, True  # not JSON at all: the contract's reader names the line
    for record in sample:
        first = first or record
        for candidate in candidates:
            if candidate.why_not(record.value) is None:
                return candidate, True
    if first is None:
        return contract_format, bool(bad)  # no valid line: the contract's reader names them
    tried = "; ".join(f"{f.name}: {f.why_not(first.value)}" for f in candidates)
    raise TraceError(f"no input format fits its first record (tried {tried}); pass --input-format",
                     source=first.source, line=first.line, field=first.where())


def read_input(paths: Sequence[str | Path], input_format: InputFormat | str = InputFormat.auto, *,
               period: float | None = None, time_column: str = "t", action_column: str = "action",
               on_mismatch: OnMismatch | None = None, on_error: OnError | None = None,
               summary: IngestSummary | None = None, extractor: Extractor | str | None = None,
               world: ActionWorld | None = None) -> Iterator[Run]:
    """Runs from files of any registered format, streamed, resampled to ``period`` seconds if given. A
    path may also be a folder of part files, a glob, or Parquet (:mod:`guard.trace_files`).

    Args:
        input_format: a registered format's name (or :class:`InputFormat`), or ``auto``: per file, the first
            format that fits its first records.
        on_mismatch, on_error, extractor: None takes each file's format's default (its ``defaults``: for
            ``agentspec`` ``simulator``, ``skip``, ``household``; for the others ``error``, ``stop``, the tool
            domain's extractor).
        on_error: ``stop`` raises the first bad record's error; ``skip`` counts it in
            ``summary`` and goes on.
        summary: filled with what was read, skipped and rewritten (see :class:`IngestSummary`).
        extractor: for the agent formats: a callable of a transcript, a name for
            :func:`resolve_extractor`, or None for the format's default; ``"household"``
            replays an embodied agent's AgentExecutor log in ``world``.
        world: where action-only logs (and ``extractor="household"``) are replayed; the one
            set with :func:`use_world` when None.

    Raises:
        TraceError: a malformed record (``on_error="stop"``), naming the file, line and field.
        ForewarnError: an unknown format or option value.
    """
    if period is not None and not period > 0:
        raise InputError(f"--period must be a positive number of seconds, got {period}")
    name = input_format.value if isinstance(input_format, InputFormat) else str(input_format)
    chosen = None if name == AUTO else get_format(name)  # an unknown name fails before any file is read
    tally = summary if summary is not None else IngestSummary()
    if on_error is not None:
        tally.handler(on_error)  # a bad value fails before any file is read
    resolved: dict[str | None, Extractor] = {}  # a user's extractor module is imported once for all files
    files = list_trace_files(paths)  # a folder of part files, a glob: the files in them
    several = len(files) > 1
    first_file: dict[str, str] = {}  # run id -> the file it came from first
    for file in files:
        path = file.path
        runs: Iterator[Run]
        if file.kind == "parquet":  # the contract's runs, one a row (guard.trace_files)
            if chosen is not None and chosen.name != InputFormat.jsonl.value:
                raise InputError(f"{file.name}: Parquet holds runs in the contract's shape, not "
                                    f"--input-format {chosen.name}")
            tally.formats[str(path)] = "parquet"
            handle = tally.handler(on_error or "stop")
            runs = read_trace_file(file, on_bad=handle)
        else:
            fmt = chosen
            if fmt is None:
                fmt, any_record = _detect(path)
                if not any_record:
                    tally.empty.append(str(path))
                    tally.formats[str(path)] = "empty"
                    continue
            tally.formats[str(path)] = fmt.name
            handle = tally.handler(on_error or fmt.defaults.on_error)
            reading = Reading(tally, handle,
                              on_mismatch=on_mismatch or fmt.defaults.on_mismatch,
                              extractor=extractor if extractor is not None else fmt.defaults.extractor,
                              world=world, time_column=time_column, action_column=action_column, resolved=resolved)
            if reading.household and not fmt.household:
                raise InputError(f"--extractor household reads LangChain AgentExecutor logs of an embodied "
                                    f"agent; {path} is {fmt.name}")
            runs = fmt.read(Path(path), reading)
        count, skipped = tally.runs, tally.skipped_count
        for run in runs:
            if period is not None:
                try:
                    run = resample(run, period)
                except TraceError as exc:
                    handle(exc)
                    continue
            tally.runs += 1
            yield _told_apart(run, str(path), first_file) if several else run
        if tally.runs == count and tally.skipped_count == skipped:
            tally.empty.append(str(path))


def on_error_of(path: str, summary: IngestSummary, on_error: OnError | None) -> OnError:
    """What a bad run of this file (read by :func:`read_input` into ``summary``) does: ``on_error`` when
    given, else its format's default (``stop`` for Parquet and files not read)."""
    if on_error is not None:
        return on_error
    name = summary.formats.get(path)
    try:
        return get_format(name).defaults.on_error if name is not None else "stop"
    except ForewarnError:  # parquet, empty
        return "stop"


def _told_apart(run: Run, path: str, first_file: dict[str, str]) -> Run:
    """A run read with others from several files: ``meta.source`` names its file (instead of the format, which
    ``meta.ingested_from`` keeps; a source the log itself gives is kept), and an id another file already used
    is prefixed with this file's name (``b.json:line-1``)."""
    own = run.meta.get("source") not in (None, run.meta.get("ingested_from"))
    meta = run.meta if own else {**run.meta, "source": path}
    run_id = run.id
    if first_file.setdefault(run_id, path) != path:
        base, n = f"{Path(path).name}:{run.id}", 1
        run_id = base
        while run_id in first_file:
            n += 1
            run_id = f"{base}#{n}"
        first_file[run_id] = path
    return run if (meta is run.meta and run_id == run.id) else replace(run, id=run_id, meta=meta)
