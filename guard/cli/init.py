"""``forewarn init``: a starting spec from runs and the one thing a new user knows, what is unsafe (issue 39).

The spec it writes has one predicate, the unsafe condition as given, and ``unsafe`` on it; discovery
(:mod:`..discovery.auto`) then adds what it finds in the runs that tells, ahead of time, the runs that
reach that condition from those that do not. Runs discovery cannot learn from (all safe, too few) give
the starting spec as it is, with the line saying why.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ...errors import InputError
from ..ingest import read_input
from ..output_files import check_output, write_output
from ..read_summary import IngestSummary
from ._options import Format, MkdirOption, check_folds, check_positive_int, discovery_target, err, print_json
from ._replay_options import (
    ExtractorOption,
    FormatOption,
    InputFormatOption,
    OnErrorOption,
    OnMismatchOption,
    error_policy,
    mismatch_policy,
)
from ._replay_output import progress, report_skipped

PREDICATE = "violation"  # the unsafe condition's predicate in the starting spec


def starting_spec(unsafe: str, name: str, runs: int) -> str:
    """The starting spec's YAML: the condition as its one predicate (a JSON string is a YAML scalar)."""
    return (f"# forewarn init: a starting spec from {runs} run(s) and the unsafe condition given\n"
            f"name: {json.dumps(name)}\n"
            "predicates:\n"
            f"  {PREDICATE}:\n"
            f"    cel: {json.dumps(unsafe)}\n"
            "    description: the unsafe condition (forewarn init --unsafe)\n"
            f"unsafe: '{PREDICATE}'\n")


def init(
    traces: Annotated[list[Path], typer.Argument(help="Trace files (JSONL, or any --input-format).")],
    unsafe: Annotated[str, typer.Option(
        "--unsafe", help="What a violation is, in CEL over state, action and meta (e.g. "
                         "'state.objects.Pot.isDirty').")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the spec (YAML).")],
    name: Annotated[str | None, typer.Option(help="The spec's name (default: the output file's stem).")] = None,
    target: Annotated[str, typer.Option(
        "--target", help="What discovery measures detection at: false-alarms=X or detection=Y.")]
    = "false-alarms=0.1",
    folds: Annotated[int, typer.Option(help="Discovery's folds (fewer groups than folds: one fold per group).")]
    = 5,
    group_by: Annotated[str | None, typer.Option(
        "--group-by", help="Dotted path whose runs stay together in discovery's folds, e.g. meta.task.")] = None,
    seed: Annotated[int, typer.Option(help="Seed for assigning equal-sized groups to folds.")] = 0,
    period: Annotated[float | None, typer.Option(help="Resample runs to PERIOD seconds per step.")] = None,
    format: FormatOption = Format.table,
    input_format: InputFormatOption = "auto",
    extractor: ExtractorOption = None,
    on_mismatch: OnMismatchOption = None,
    on_error: OnErrorOption = None,
    mkdir: MkdirOption = False,
) -> None:
    """Write a starting spec from runs and an unsafe condition: the condition, and what discovery finds."""
    from ..discovery.auto import discover_for_learning
    from ..predicates import PredicateSet
    from ..spec import parse_spec

    chosen = discovery_target(target, "init")
    check_positive_int(folds, "--folds")
    check_folds(folds)
    if not unsafe.strip():
        raise InputError("--unsafe: expected a CEL expression, e.g. 'state.objects.Pot.isDirty'")
    check_output(output, inputs=traces, mkdir=mkdir)
    summary = IngestSummary()
    runs = list(read_input(traces, input_format, period=period, extractor=extractor, summary=summary,
                           on_error=error_policy(on_error), on_mismatch=mismatch_policy(on_mismatch)))
    report_skipped(summary)
    if not runs:
        raise InputError("no runs to start a spec from: the trace input is empty")
    text = starting_spec(unsafe, name or output.stem, len(runs))
    spec = parse_spec(text, source="--unsafe")
    PredicateSet(spec)  # a condition that is no CEL is one line naming --unsafe, before any run is traced
    with progress("discovering") as update:
        result = discover_for_learning(runs, spec, group_by=group_by, folds=folds, seed=seed, target=chosen,
                                       on_progress=lambda line: update(description=line, completed=0, total=None),
                                       on_count=lambda done, total: update(completed=done, total=total))
    written = result.report.text if result.report.changed else text
    parse_spec(written, source=str(output))  # what is written loads
    write_output(output, written)
    if format is Format.json:
        print_json({"output": str(output), "runs": result.report.runs, "unsafe_runs": result.report.unsafe_runs,
                    "changed": result.report.changed, "predicates": list(result.spec.predicates),
                    "discovery": result.line(), "notes": result.report.notes})
        return
    err.print(result.line(), highlight=False, markup=False, soft_wrap=True)
    err.print(f"wrote {output}: {len(result.spec.predicates)} predicate(s); learn with "
              f"`forewarn learn ... -s {output}`", highlight=False, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``init`` to the ``forewarn`` app."""
    app.command("init")(init)
