"""``forewarn ingest``: agent logs (LangChain, OpenTelemetry, LangGraph), columnar or action-only logs into
the contract's JSONL, with a summary of what was read, skipped and rewritten."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer

from ...errors import InputError, TraceError, UsageError
from ..ingest import on_error_of, read_input
from ..output_files import check_output, open_output
from ..read_summary import IngestSummary
from ._options import Format, MkdirOption, check_period, err, print_json, print_summary
from ._replay_options import (
    ExtractorOption,
    InputFormatOption,
    OnErrorOption,
    OnMismatchOption,
    error_policy,
    mismatch_policy,
)

DEFAULT_MAX_SKIPPED = 0.5  # with --on-error skip: more than half the runs skipped fails the ingest


def ingest(
    inputs: Annotated[list[Path], typer.Argument(help="Log files to convert.", metavar="LOGS...")],
    output: Annotated[Path, typer.Option("--output", "-o", help="JSONL trace file to write.")],
    input_format: InputFormatOption = "auto",
    on_error: OnErrorOption = None,
    extractor: ExtractorOption = None,
    period: Annotated[float | None, typer.Option(help="Resample runs to PERIOD seconds per step.")] = None,
    time_column: Annotated[str, typer.Option(help="Columnar logs: the column with each step's seconds.")] = "t",
    action_column: Annotated[str, typer.Option(help="Columnar logs: the column with each step's action.")]
    = "action",
    on_mismatch: OnMismatchOption = None,
    format: Annotated[Format, typer.Option("--format", help="The summary on stderr (table) or as JSON on stdout.")]
    = Format.table,
    max_skipped: Annotated[float, typer.Option(
        "--max-skipped", help="With --on-error skip: the largest share of runs that may be skipped; above it the "
                              "ingest fails with the reasons and writes nothing.")] = DEFAULT_MAX_SKIPPED,
    mkdir: MkdirOption = False,
) -> None:
    """Convert agent logs (LangChain, OpenTelemetry, LangGraph), columnar or action-only logs into the
    contract's JSONL (for `forewarn learn`), with a summary of what was read, skipped and rewritten."""
    check_period(period)
    if not 0.0 <= max_skipped <= 1.0:  # NaN fails this too
        raise UsageError(f"--max-skipped: expected a share in [0, 1], got {max_skipped:g}")
    check_output(output, inputs=inputs, mkdir=mkdir)
    summary = IngestSummary()
    with open_output(output) as stream:
        for r in read_input(inputs, input_format, period=period, time_column=time_column,
                            action_column=action_column, on_mismatch=mismatch_policy(on_mismatch),
                            on_error=error_policy(on_error), summary=summary, extractor=extractor):
            try:
                line = orjson.dumps({"id": r.id, "steps": r.steps, "meta": r.meta}, default=str)
            except orjson.JSONEncodeError as exc:  # e.g. a state nested deeper than JSON writers go
                error = TraceError(f"cannot write this run as JSON ({exc})", source=r.source, line=r.line)
                if on_error_of(str(r.source), summary, error_policy(on_error)) == "stop":
                    raise error from exc
                summary.runs -= 1
                summary.skip(error)
                continue
            stream.write(line + b"\n")
        refuse_poor_ingest(summary, max_skipped)  # raised inside: nothing is written
    if format is Format.json:
        print_json({"output": str(output), "written": summary.runs, **summary.to_dict()})
        return
    print_summary(summary, "read")
    err.print(f"wrote {summary.runs} runs to {output}", highlight=False, markup=False, soft_wrap=True)


def refuse_poor_ingest(summary: IngestSummary, max_skipped: float) -> None:
    """An ingest that kept no run, or skipped more than ``max_skipped`` of them, fails with the reasons."""
    total = summary.runs + summary.skipped_count
    reasons = "; ".join(line.strip() for line in summary.lines("read")[1:] if not line.lstrip().startswith("kept"))
    why = f" ({reasons})" if reasons else ""
    if summary.runs == 0:
        formats = ", ".join(f"{p} as {f}" for p, f in summary.formats.items()) or "no input"
        raise InputError(f"ingest found no run to write in {formats}{why}; nothing was written")
    if summary.skipped_count > max_skipped * total:
        raise InputError(f"ingest skipped {summary.skipped_count} of {total} runs, more than --max-skipped "
                            f"{max_skipped:g}{why}; nothing was written")


def register(app: typer.Typer) -> None:
    """Add ``ingest`` to the ``forewarn`` app."""
    app.command("ingest")(ingest)
