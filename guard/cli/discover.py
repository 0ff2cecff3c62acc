"""``forewarn discover``: a spec with predicates found in the runs (the method is :mod:`..discovery`)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ...errors import InputError
from ..ingest import read_input
from ..output_files import check_output, write_output
from ..read_summary import IngestSummary
from ._options import Format, MkdirOption, check_folds, check_positive_int, discovery_target, err, out, print_json, warn
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


def discover(
    traces: Annotated[list[Path], typer.Argument(help="Trace files (JSONL, columnar or action logs).")],
    spec: Annotated[Path, typer.Option("--spec", "-s", help="YAML spec whose predicates, unsafe and monitors "
                                                             "are kept and extended.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the spec with the discovered "
                                                                 "predicates (the spec unchanged when none helps).")],
    target: Annotated[str, typer.Option(
        "--target", help="false-alarms=X (detection at most X false alarms) or detection=Y (false alarms at "
                         "detection Y; warned-ahead=Y is the same here: discovery counts alarms strictly before "
                         "the violation), X and Y in (0, 1): what detection is measured at.")] = "false-alarms=0.1",
    max_predicates: Annotated[int, typer.Option("--max-predicates", help="Predicates the search may add.")] = 8,
    time_limit: Annotated[float, typer.Option(
        "--time-limit", help="Seconds after which the search starts no new round (the confirmation by the real "
                             "learner comes after).")] = 600.0,
    folds: Annotated[int, typer.Option(help="Number of folds (the same folds as `forewarn evaluate`).")] = 5,
    group_by: Annotated[str | None, typer.Option(
        "--group-by", help="Dotted path whose runs stay together, e.g. meta.task (default: each run alone); "
                            "two, comma-separated (meta.attack,meta.task): the first a run holds.")]
    = None,
    seed: Annotated[int, typer.Option(help="Seed for assigning equal-sized groups to folds.")] = 0,
    period: Annotated[float | None, typer.Option(help="Resample runs to PERIOD seconds per step.")] = None,
    min_visits: Annotated[int, typer.Option(
        "--min-visits", help="Visits below which a state counts as rare (the search's visit penalty).")] = 20,
    confirm: Annotated[bool, typer.Option(
        "--confirm/--no-confirm", help="Let the real learner (grouped k-fold) choose what to write: the "
                                       "discovered predicates, action memory, both, or the spec unchanged; without "
                                       "it the figures are the search's counting estimates.")]
    = True,
    exclude: Annotated[list[str] | None, typer.Option(
        "--exclude", help="A field to propose nothing on, e.g. meta.outcome (a label written after the run); "
                          "repeatable.")] = None,
    include: Annotated[list[str] | None, typer.Option(
        "--include", help="A meta field to propose on although its name says it is written after a run ends "
                          "(meta.output, meta.eval, meta.success …, left out by default); repeatable.")] = None,
    action_memory: Annotated[bool, typer.Option(
        "--action-memory/--no-action-memory", help="Also propose remembering the last actions "
                                                   "(learning.memory.actions), when the spec sets none.")] = True,
    format: FormatOption = Format.table,
    input_format: InputFormatOption = "auto",
    extractor: ExtractorOption = None,
    on_mismatch: OnMismatchOption = None,
    on_error: OnErrorOption = None,
    mkdir: MkdirOption = False,
) -> None:
    """Find predicates in the runs that improve held-out prediction, and write the spec with them."""
    from ..discovery.discover import discover as run_discover
    from ..spec import load_spec, parse_spec

    chosen = discovery_target(target, "discover")
    check_positive_int(max_predicates, "--max-predicates")
    check_positive_int(min_visits, "--min-visits")
    if not time_limit > 0:
        raise InputError(f"--time-limit: expected a positive number of seconds, got {time_limit:g}")
    check_folds(folds)
    check_output(output, inputs=[*traces, spec], mkdir=mkdir)
    parsed = load_spec(spec)
    summary = IngestSummary()
    runs = list(read_input(traces, input_format, period=period, extractor=extractor, summary=summary,
                           on_error=error_policy(on_error), on_mismatch=mismatch_policy(on_mismatch)))
    report_skipped(summary)
    if not runs:
        raise InputError("no runs to discover predicates from: the trace input is empty")
    with progress("discovering") as update:
        report = run_discover(runs, parsed, target=chosen, max_predicates=max_predicates, time_limit=time_limit,
                              folds=folds, group_by=group_by, seed=seed, min_visits=min_visits, confirm=confirm,
                              exclude=exclude or (), include=include or (), action_memory=action_memory,
                              on_progress=lambda text: update(description=text, completed=0, total=None),
                              on_count=lambda done, total: update(completed=done, total=total))
    for constant in report.constant_predicates:
        warn(constant.message())
    parse_spec(report.text, source=str(output))  # what is written loads
    write_output(output, report.text)
    if format is Format.json:
        print_json(_as_dict(report, output))
        return
    _print(report)
    err.print(f"wrote {output}" + ("" if report.changed else " (the spec unchanged)"), highlight=False, markup=False,
              soft_wrap=True)


def _as_dict(report: object, output: Path) -> dict[str, object]:
    from dataclasses import asdict

    from ..discovery.discover import DiscoveryReport

    assert isinstance(report, DiscoveryReport)
    return {
        "output": str(output), "changed": report.changed, "target": str(report.target), "folds": report.folds,
        "group_by": report.group_by, "runs": report.runs, "unsafe_runs": report.unsafe_runs, "steps": report.steps,
        "fields": report.fields, "candidates": report.candidates,
        "skipped_fields": dict(report.skipped.reasons), "stopped": report.stopped, "seconds": report.seconds,
        "added": [{"name": name, "cel": s.cel, "local": s.local,
                   "before": {"brier": s.before.brier, "detection": s.before.detection,
                              "false_alarms": s.before.false_alarms},
                   "after": {"brier": s.after.brier, "detection": s.after.detection,
                             "false_alarms": s.after.false_alarms}}
                  for name, s in zip(report.names, report.added)],
        "action_memory": None if report.memory is None else {
            "actions": report.memory.actions, "action_class": report.memory.action_class,
            "before": {"brier": report.memory.before.brier, "detection": report.memory.before.detection,
                       "false_alarms": report.memory.before.false_alarms},
            "after": {"brier": report.memory.after.brier, "detection": report.memory.after.detection,
                      "false_alarms": report.memory.after.false_alarms}},
        "counting": {"before": asdict(report.counting_before), "after": asdict(report.counting_after)},
        "learner": None if report.learner_before is None or report.learner_after is None else {
            "before": asdict(report.learner_before), "after": asdict(report.learner_after)},
        "configurations": [{"name": name, **asdict(f)} for name, f in report.configurations],
        "not_helping": [{"cel": c, "brier": b, "detection": d} for c, b, d in report.not_helping],
        "notes": report.notes,
        "constant_predicates": [{**c.to_dict(), "message": c.message()} for c in report.constant_predicates],
    }


def _print(report: object) -> None:
    from ..discovery.discover import DiscoveryReport

    assert isinstance(report, DiscoveryReport)
    target = report.target
    grouping = f", grouped by {report.group_by}" if report.group_by else ""
    if report.stopped == "not run":  # the runs cannot tell (discovery/adapt.py): the reason alone, no figures
        out.print(f"discovery over {report.runs} runs ({report.unsafe_runs} violate{grouping}): not run",
                  highlight=False, markup=False, soft_wrap=True)
        for note in report.notes:
            out.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
        return
    title = (f"discovery over {report.runs} runs ({report.unsafe_runs} violate, {report.steps} steps scored), "
             f"{report.folds}-fold{grouping}, target {target}: {report.candidates} candidates from "
             f"{report.fields} fields in {report.seconds:.1f} s")
    # a predicate's CEL is often longer than a table cell: each gets its figures on one line and its
    # CEL on its own, at the terminal's width
    metric = "detection" if target.metric == "false-alarms" else "false alarms"
    lines = [(name + (" (local split)" if s.local else ""), s.cel, s.before, s.after)
             for name, s in zip(report.names, report.added)]
    memory = report.memory
    if memory is not None:
        lines.append(("learning.memory", f"actions: {memory.actions}, action_class: {memory.action_class}",
                      memory.before, memory.after))
    out.print(title, highlight=False, markup=False, soft_wrap=True)
    if lines:
        out.print(f"added (held out, counting: Brier, {metric} at {target}; before → after):", highlight=False,
                  markup=False, soft_wrap=True)
    for name, cel, before, after in lines:
        change = (f"{before.detection:.1%} → {after.detection:.1%}" if target.metric == "false-alarms"
                  else f"{before.false_alarms:.1%} → {after.false_alarms:.1%}")
        out.print(f"  {name}: Brier {before.brier:.4f} → {after.brier:.4f}, {metric} {change}", highlight=False,
                  markup=False, soft_wrap=True)
        out.print(f"      {cel}", highlight=False, markup=False, soft_wrap=True)
    out.print(f"held out, counting: {report.counting_before.text(target)} → {report.counting_after.text(target)}",
              highlight=False, markup=False, soft_wrap=True)
    if report.learner_before is not None and report.learner_after is not None:
        out.print(f"held out, real learner: {report.learner_before.text(target)} → "
                  f"{report.learner_after.text(target)}", highlight=False, markup=False, soft_wrap=True)
    for name, figures in report.configurations[1:]:
        out.print(f"real learner, {name}: {figures.text(target)}", highlight=False, markup=False, soft_wrap=True)
    out.print(f"search stopped: {report.stopped}", highlight=False, markup=False, soft_wrap=True)
    for cel, brier, detection in report.not_helping[:3]:
        out.print(f"did not help: {cel} (held-out Brier {brier:.4f}, detection {detection:.1%}, as last scored)",
                  highlight=False, markup=False, soft_wrap=True)
    for line in report.skipped.lines():
        out.print(f"[yellow]{escape(line)}[/]", highlight=False, soft_wrap=True)
    for note in report.notes:
        out.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("discover")(discover)
