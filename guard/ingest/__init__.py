"""Reading the logs people already have, as runs in the contract's shape.

Formats (:class:`InputFormat`):

* ``jsonl`` — the contract: one run a line, ``{"id", "steps": [{"state", "action", "t"}], "meta"}``.
* ``columnar`` — one object of equal-length arrays per run (:mod:`guard.ingest.columnar`).
* ``actions`` — action-only logs, replayed in a domain's world such as the embodied
  domain's symbolic household (:mod:`forewarn.guard.ingest.actions`).
* ``langchain`` — LangChain ``AgentExecutor`` / ReAct ``intermediate_steps``
  (:mod:`guard.ingest.langchain_log`).
* ``otel`` — OpenTelemetry GenAI spans as OTLP JSON, one run per trace (:mod:`guard.ingest.otel`).
* ``langgraph`` — LangGraph ``stream`` dumps, state snapshots and checkpoints of
  ``create_agent`` runs (:mod:`guard.ingest.langgraph`).
* ``auto`` — per file, from its first records; when none fits, the error lists every
  format tried and why it did not fit.

The three agent formats become states through a state extractor (the one the guard
uses: :mod:`guard.ingest.agents`). Bad records stop the reading (``on_error="stop"``)
or are skipped and counted (``"skip"``) in an :class:`IngestSummary`, as are logged
facts an ``on_mismatch="simulator"`` reading rewrites.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from enum import Enum
from itertools import islice
from pathlib import Path
from typing import Any

from ...errors import ForewarnError, TraceError
from ..read_summary import IngestSummary, OnError
from ..trace_files import list_trace_files, read_trace_file
from ..traces import Run, read_runs, resample
from ._documents import Record, kind_of, records
from .actions import ActionWorld, OnMismatch, default_world, parse_actions, read_actions, use_world
from .agents import AgentLog, Extractor, resolve_extractor, to_run
from .columnar import parse_columnar, read_columnar

__all__ = ["InputFormat", "detect_format", "read_input", "read_actions", "read_columnar", "OnMismatch", "OnError",
           "IngestSummary", "resolve_extractor", "ActionWorld", "use_world"]

_SNIFF = 20  # records looked at to recognise a file


class InputFormat(str, Enum):
    auto = "auto"
    jsonl = "jsonl"
    columnar = "columnar"
    actions = "actions"
    langchain = "langchain"
    otel = "otel"
    langgraph = "langgraph"


def _why_not(value: Any) -> dict[InputFormat, str | None]:
    """For one record, each format's reason not to fit it (None: it fits)."""
    from .langgraph import is_langgraph

    if not isinstance(value, dict):
        shape = kind_of(value)
        reasons: dict[InputFormat, str | None] = {f: f"a record is {shape}, not an object" for f in InputFormat
                                                  if f is not InputFormat.auto}
        if is_langgraph(value):
            reasons[InputFormat.langgraph] = None
        return reasons
    arrays = [k for k, v in value.items() if k not in ("id", "meta")]
    not_array = next((k for k in arrays if not isinstance(value[k], list)), None)
    columnar = None if "columns" in value or (arrays and not_array is None) else (
        "no 'columns' and no arrays" if not arrays else f"{not_array!r} is {kind_of(value[not_array])}, not an array")
    return {
        InputFormat.jsonl: None if "steps" in value else "no 'steps'",
        InputFormat.actions: None if "actions" in value else "no 'actions'",
        InputFormat.langchain: None if "intermediate_steps" in value else "no 'intermediate_steps'",
        InputFormat.otel: None if "resourceSpans" in value else "no 'resourceSpans'",
        InputFormat.langgraph: None if is_langgraph(value) else
        "no 'messages', 'checkpoint', 'channel_values', 'chunks' or node updates ({\"model\": {\"messages\": ...}})",
        InputFormat.columnar: columnar,
    }


_ORDER = (InputFormat.jsonl, InputFormat.actions, InputFormat.langchain, InputFormat.otel, InputFormat.langgraph,
          InputFormat.columnar)


def detect_format(path: str | Path) -> InputFormat:
    """The format of a file, from its first records.

    Raises:
        TraceError: no format fits; the message says what each format expected.
    """
    found, _ = _detect(path)
    return found


def _detect(path: str | Path) -> tuple[InputFormat, bool]:
    """The format, and whether the file holds any record."""
    first: Record | None = None
    bad: list[TraceError] = []
    try:
        sample = list(islice(records(path, on_bad=bad.append), _SNIFF))
    except TraceError as exc:
        if "cannot read" in exc.message:
            raise
        return InputFormat.jsonl, True  # not JSON at all: the contract's reader names the line
    for record in sample:
        first = first or record
        reasons = _why_not(record.value)
        for candidate in _ORDER:
            if reasons[candidate] is None:
                return candidate, True
    if first is None:
        return InputFormat.jsonl, bool(bad)  # no valid line: the contract's reader names them
    reasons = _why_not(first.value)
    tried = "; ".join(f"{f.value}: {reasons[f]}" for f in _ORDER)
    raise TraceError(f"no input format fits its first record (tried {tried}); pass --input-format",
                     source=first.source, line=first.line, field=first.where())


def read_input(paths: Sequence[str | Path], input_format: InputFormat = InputFormat.auto, *,
               period: float | None = None, time_column: str = "t", action_column: str = "action",
               on_mismatch: OnMismatch = "error", on_error: OnError = "stop", summary: IngestSummary | None = None,
               extractor: Extractor | str | None = None, world: ActionWorld | None = None) -> Iterator[Run]:
    """Runs from files of any supported format, streamed, resampled to ``period`` seconds if given. A
    path may also be a folder of part files, a glob, or Parquet (:mod:`guard.trace_files`).

    Args:
        on_error: ``stop`` raises the first bad record's error; ``skip`` counts it in
            ``summary`` and goes on.
        summary: filled with what was read, skipped and rewritten (see :class:`IngestSummary`).
        extractor: for the agent formats: a callable of a transcript, a name for
            :func:`resolve_extractor`, or None for the tool domain's default; ``"household"``
            replays an embodied agent's AgentExecutor log in ``world``.
        world: where action-only logs (and ``extractor="household"``) are replayed; the one
            set with :func:`use_world` when None.

    Raises:
        TraceError: a malformed record (``on_error="stop"``), naming the file, line and field.
    """
    if period is not None and not period > 0:
        raise ForewarnError(f"--period must be a positive number of seconds, got {period}")
    tally = summary if summary is not None else IngestSummary()
    handle = tally.handler(on_error)
    resolved: Extractor | None = extractor if callable(extractor) else None
    files = list_trace_files(paths)  # a folder of part files, a glob: the files in them
    several = len(files) > 1
    first_file: dict[str, str] = {}  # run id -> the file it came from first
    for file in files:
        path = file.path
        runs: Iterator[Run]
        if file.kind == "parquet":  # the contract's runs, one a row (guard.trace_files)
            if input_format not in (InputFormat.auto, InputFormat.jsonl):
                raise ForewarnError(f"{file.name}: Parquet holds runs in the contract's shape, not "
                                    f"--input-format {input_format.value}")
            tally.formats[str(path)] = "parquet"
            runs = read_trace_file(file, on_bad=handle)
        else:
            kind = input_format
            if kind is InputFormat.auto:
                kind, any_record = _detect(path)
                if not any_record:
                    tally.empty.append(str(path))
                    tally.formats[str(path)] = "empty"
                    continue
            tally.formats[str(path)] = kind.value
            household = extractor == "household"
            if kind in (InputFormat.langchain, InputFormat.otel, InputFormat.langgraph) and resolved is None \
                    and not household:
                resolved = resolve_extractor(extractor if isinstance(extractor, str) else None)
            runs = _runs(path, kind, handle, tally, time_column=time_column, action_column=action_column,
                         on_mismatch=on_mismatch, extractor=resolved, household=household, world=world)
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


def _runs(path: str | Path, kind: InputFormat, handle: Callable[[ForewarnError], None], tally: IngestSummary, *,
          time_column: str, action_column: str, on_mismatch: OnMismatch, extractor: Extractor | None,
          household: bool = False, world: ActionWorld | None = None) -> Iterator[Run]:
    """The runs of one file in one format; bad records go to ``handle``."""
    def bad(exc: TraceError) -> None:
        handle(exc)

    if kind is InputFormat.jsonl:
        yield from _jsonl(path, handle)
        return
    if household:
        if kind is not InputFormat.langchain:
            raise ForewarnError(f"--extractor household reads LangChain AgentExecutor logs of an embodied agent; "
                                f"{path} is {kind.value}")
        yield from _household(path, bad, tally, on_mismatch, world if world is not None else default_world())
        return
    if kind in (InputFormat.langchain, InputFormat.otel, InputFormat.langgraph):
        assert extractor is not None
        for log in _agent_logs(path, kind, bad):
            try:
                yield to_run(log, extractor, kind.value)
            except TraceError as exc:
                handle(exc)
        return
    parse: Callable[[Record], Run]
    if kind is InputFormat.columnar:
        def parse(record: Record) -> Run:
            return parse_columnar(record, time_column=time_column, action_column=action_column)
    else:
        if on_mismatch not in ("error", "simulator"):
            raise ForewarnError(f"--on-mismatch: expected 'error' or 'simulator', got {on_mismatch!r}")
        actions_world = world if world is not None else default_world()

        def parse(record: Record) -> Run:
            return parse_actions(record, actions_world, on_mismatch=on_mismatch, on_rewrite=tally.mismatch)
    for record in records(path, on_bad=bad):
        try:
            yield parse(record)
        except TraceError as exc:
            handle(exc)


def _household(path: str | Path, bad: Callable[[TraceError], None], tally: IngestSummary,
               on_mismatch: OnMismatch, world: ActionWorld) -> Iterator[Run]:
    """AgentExecutor logs of an embodied agent, replayed in its world (the symbolic household)."""
    from .langchain_log import as_action_log

    for log in _agent_logs(path, InputFormat.langchain, bad):
        record = Record(as_action_log(log), log.source, line=log.line)
        try:
            run = parse_actions(record, world, on_mismatch=on_mismatch, on_rewrite=tally.mismatch)
        except TraceError as exc:
            bad(exc)
            continue
        run.meta["ingested_from"] = "langchain"
        yield run


def _agent_logs(path: str | Path, kind: InputFormat, bad: Callable[[TraceError], None]) -> Iterator[AgentLog]:
    source = records(path, on_bad=bad)
    if kind is InputFormat.otel:
        from .otel import read_otel_logs

        yield from read_otel_logs(source, bad)
    elif kind is InputFormat.langgraph:
        from .langgraph import read_langgraph_logs

        yield from read_langgraph_logs(source, bad)
    else:
        from .langchain_log import parse_intermediate_steps

        for record in source:
            try:
                yield parse_intermediate_steps(record)
            except TraceError as exc:
                bad(exc)


def _jsonl(path: str | Path, handle: Callable[[ForewarnError], None]) -> Iterator[Run]:
    """The contract's JSON Lines, line by line, each bad line handed to ``handle``."""
    return read_runs(path, on_bad=handle)
