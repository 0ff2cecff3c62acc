"""``forewarn tune``: thresholds per action from cross-validation (the logic is in :mod:`.tune`)."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ...errors import ForewarnError
from ..bundle import DEFAULT_MIN_GROUP_RUNS
from ..ingest import InputFormat, read_input
from ..outputs import check_output, write_output
from ..read_summary import IngestSummary
from ..replay import Enforcement
from ..storm import Method
from ._options import Format, MkdirOption, OnError, err, out, print_json
from ._replay_options import (
    BundleByOption,
    EnforcementOption,
    ExtractorOption,
    FormatOption,
    InputFormatOption,
    MinGroupRunsOption,
    OnErrorOption,
    parse_enforcement,
    parse_trigger,
)
from ._replay_output import ahead_cell, detection_cells, over, pct, progress, report_skipped

__all__ = ["register", "tune"]


def tune(
    traces: Annotated[list[Path], typer.Argument(help="Trace files (JSONL, columnar or action logs).")],
    spec: Annotated[Path, typer.Option("--spec", "-s", help="YAML spec to learn with and to tune.")],
    target: Annotated[list[str], typer.Option(
        "--target", help="[ACTION:]false-alarms=X (the most warnings ahead of the violating step with at most X "
                         "false alarms), [ACTION:]warned-ahead=Y (warn Y of violating runs before the step) or "
                         "[ACTION:]detection=Y (blocks on the violating step count too), X and Y in (0, 1); "
                         "repeatable. Without ACTION: the least severe configured action (reflect).")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write a copy of the spec with the "
                                                                           "chosen thresholds here.")] = None,
    folds: Annotated[int, typer.Option(help="Number of folds.")] = 5,
    group_by: Annotated[str | None, typer.Option(
        "--group-by", help="Dotted path whose runs stay together, e.g. meta.task (default: each run alone).")]
    = None,
    seed: Annotated[int, typer.Option(help="Seed for assigning equal-sized groups to folds.")] = 0,
    period: Annotated[float | None, typer.Option(help="Resample runs to PERIOD seconds per step.")] = None,
    alpha: Annotated[float | None, typer.Option(help="Laplace smoothing α (default: the spec's).")] = None,
    method: Annotated[Method, typer.Option(help="Storm method for each fold's model.")] = Method.SOUND,
    format: FormatOption = Format.table,
    input_format: InputFormatOption = InputFormat.auto,
    enforcement: EnforcementOption = Enforcement.LOOKAHEAD.value,
    trigger: Annotated[str | None, typer.Option(
        "--trigger", help="Score alarms as this trigger acts: level or increase (min_increase is then tuned with "
                          "θ). Default: the spec's guard.trigger, else what the integration uses: increase under "
                          "lookahead enforcement (the LangChain middleware, the MCP proxy), level under observe.")]
    = None,
    bundle_by: BundleByOption = None,
    min_group_runs: MinGroupRunsOption = DEFAULT_MIN_GROUP_RUNS,
    extractor: ExtractorOption = None,
    on_error: OnErrorOption = OnError.stop,
    mkdir: MkdirOption = False,
) -> None:
    """Choose a threshold per action (and, under the increase trigger, min_increase) from cross-validation so that
    targets on detection or false alarms hold."""
    from ..evaluation.evaluate import evaluate as run_evaluate
    from ..evaluation.tune import parse_target, write_min_increase, write_thresholds
    from ..evaluation.tune import tune as run_tune
    from ..spec import Thresholds, Trigger, load_spec, parse_spec

    targets = [parse_target(t) for t in target]
    if output is not None:
        check_output(output, inputs=[*traces, spec], mkdir=mkdir)
    mode = parse_enforcement(enforcement)
    parsed = load_spec(spec)
    # what the integration enforces: the LangChain middleware and the MCP proxy (look-ahead) use
    # increase when the spec sets no trigger; a guard told of each step (observe), level
    trigger_mode = parse_trigger(trigger) or parsed.guard.trigger or (
        Trigger.INCREASE if mode is Enforcement.LOOKAHEAD else Trigger.LEVEL)
    summary = IngestSummary()
    runs = list(read_input(traces, input_format, period=period, extractor=extractor, on_error=on_error.value,
                           summary=summary))
    report_skipped(summary)
    if not runs:
        raise ForewarnError("no runs to tune on: the trace input is empty")
    with progress("cross-validation", total=2 * folds) as update:
        result = run_evaluate(runs, parsed, [], folds=folds, group_by=group_by, seed=seed, method=method,
                              alpha=alpha, enforcement=mode, trigger=trigger_mode, bundle_by=bundle_by,
                              min_group_runs=min_group_runs,
                              on_progress=lambda phase, fold: update(completed=2 * fold - (phase == "learn")))
    tuned: dict[str, float] = {}
    choices = run_tune(result, parsed, targets, tuned)
    min_increase = tuned.get("min_increase")
    chosen = Thresholds(**{c.action.value: c.theta for c in choices})
    notes = [f"{c.action.value} θ moved from {c.previous:g} to {c.theta:g} to keep reflect ≥ ask_human ≥ stop"
             for c in choices if c.moved]
    if any(p.thresholds is not None for p in parsed.guard.properties):
        notes.append("properties with thresholds of their own keep them; tune sets guard.thresholds")
    if output is not None:
        assert parsed.text is not None
        text = write_thresholds(parsed.text, chosen, source=str(spec))
        if min_increase is not None:
            text = write_min_increase(text, min_increase, source=str(spec))
        parse_spec(text, source=str(output))  # what is written loads
        write_output(output, text)
    if format is Format.json:
        print_json({"enforcement": mode.value, "trigger": result.pooled.trigger, "min_increase": min_increase,
                    "folds": folds,
                    "group_by": group_by, "bundle_by": bundle_by, "runs": len(runs),
                    "thresholds": chosen.model_dump(), "output": None if output is None else str(output),
                    "notes": notes, "actions": [
                        {"action": c.action.value, "theta": c.theta, "previous": c.previous,
                         "target": None if c.target is None else str(c.target), "moved": c.moved,
                         "aim": None if c.target is None else c.target.aim,
                         "figures": None if c.report is None else asdict(c.report),
                         "over_folds": {k: None if v is None else asdict(v) for k, v in c.over_folds.items()}}
                        for c in choices]})
        return
    bundled = "" if bundle_by is None else f" of per-member models by {bundle_by}"
    table = Table(title=f"thresholds for {parsed.name}: {folds}-fold cross-validation{bundled} over {len(runs)} "
                        f"runs, {mode.value} enforcement, {result.pooled.trigger} trigger"
                        + ("" if min_increase is None else f" (min_increase {min_increase:g}, tuned)"))
    for column in ("action", "θ", "warned ahead", "blocked at step", "detected", "false alarms",
                   "steps ahead [IQR]"):
        table.add_column(column, justify="left" if column == "action" else "right")
    for c in choices:
        t = c.report
        if t is None:
            table.add_row(c.action.value, "off", *["–"] * 5)
            continue
        table.add_row(c.action.value, f"{c.theta:g}", *detection_cells(t),
                      f"{t.false_alarms}/{t.n_safe} {pct(t.false_alarm_rate)}", ahead_cell(t))
    out.print(table)
    for c in choices:
        aim = f"{c.target} targets {c.target.aim}" if c.target else "no target: θ kept from the spec"
        folds_line = ""
        if c.report is not None:
            folds_line = (f"; over folds warned ahead {over(c.over_folds.get('warned_ahead_rate'))}, "
                          f"false alarms {over(c.over_folds.get('false_alarm_rate'))}")
        out.print(f"{c.action.value}: {aim}{folds_line}", highlight=False)
    for note in notes:
        out.print(f"[yellow]note:[/] {note}", highlight=False)
    if output is not None:
        err.print(f"wrote {output}", highlight=False)
    else:
        err.print("pass -o SPEC_OUT to write a copy of the spec with these thresholds", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``tune`` to the ``forewarn`` app."""
    app.command("tune")(tune)
