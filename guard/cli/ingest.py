"""``forewarn ingest``: agent logs (LangChain, OpenTelemetry, LangGraph), columnar or action-only logs into
the contract's JSONL, with a summary of what was read, skipped and rewritten."""
from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Annotated

import orjson
import typer

from ...errors import ForewarnError, TraceError
from ..ingest import InputFormat, read_input
from ._options import Format, OnError, check_period, err, print_json, print_summary
from ._replay_options import ExtractorOption

__all__ = ["register", "ingest"]


class MismatchOption(str, Enum):
    error = "error"
    simulator = "simulator"


def ingest(
    inputs: Annotated[list[Path], typer.Argument(help="Log files to convert.", metavar="LOGS...")],
    output: Annotated[Path, typer.Option("--output", "-o", help="JSONL trace file to write.")],
    input_format: Annotated[InputFormat, typer.Option(
        "--input-format", help="Format of the input files; auto says which formats it tried when none fits.")]
    = InputFormat.auto,
    on_error: Annotated[OnError, typer.Option(
        "--on-error", help="A malformed record stops the ingest, or is skipped and counted in the summary.")]
    = OnError.stop,
    extractor: ExtractorOption = None,
    period: Annotated[float | None, typer.Option(help="Resample runs to PERIOD seconds per step.")] = None,
    time_column: Annotated[str, typer.Option(help="Columnar logs: the column with each step's seconds.")] = "t",
    action_column: Annotated[str, typer.Option(help="Columnar logs: the column with each step's action.")]
    = "action",
    on_mismatch: Annotated[MismatchOption, typer.Option(
        help="Action logs: a logged success the symbolic household forbids is an error, or the simulator wins "
             "(each rewrite is counted in the summary).")]
    = MismatchOption.error,
    format: Annotated[Format, typer.Option("--format", help="The summary on stderr (table) or as JSON on stdout.")]
    = Format.table,
) -> None:
    """Convert agent logs (LangChain, OpenTelemetry, LangGraph), columnar or action-only logs into the
    contract's JSONL (for `forewarn learn`), with a summary of what was read, skipped and rewritten."""
    from ..ingest import IngestSummary

    check_period(period)
    summary = IngestSummary()
    temporary = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, "wb") as stream:
            for r in read_input(inputs, input_format, period=period, time_column=time_column,
                                action_column=action_column, on_mismatch=on_mismatch.value, on_error=on_error.value,
                                summary=summary, extractor=extractor):
                try:
                    line = orjson.dumps({"id": r.id, "steps": r.steps, "meta": r.meta}, default=str)
                except orjson.JSONEncodeError as exc:  # e.g. a state nested deeper than JSON writers go
                    error = TraceError(f"cannot write this run as JSON ({exc})", source=r.source, line=r.line)
                    if on_error is OnError.stop:
                        raise error from exc
                    summary.runs -= 1
                    summary.skip(error)
                    continue
                stream.write(line + b"\n")
        os.replace(temporary, output)  # nothing is half-written: a bad record leaves no output
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise ForewarnError(f"{output}: cannot write: {exc.strerror}") from exc
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if format is Format.json:
        print_json({"output": str(output), "written": summary.runs, **summary.to_dict()})
        return
    print_summary(summary, "read")
    err.print(f"wrote {summary.runs} runs to {output}", highlight=False, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``ingest`` to the ``forewarn`` app."""
    app.command("ingest")(ingest)
