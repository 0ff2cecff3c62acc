"""``forewarn tune``: thresholds per action from cross-validation (the logic is in :mod:`.tune`)."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ...errors import ForewarnError
from ..ingest import InputFormat, read_input
from ..replay import Enforcement
from ..storm import Method
from ._options import Format, err, out, print_json
from .replay import (
    EnforcementOption,
    FormatOption,
    InputFormatOption,
    _atomic_write,
    _fmt,
    _over,
    _pct,
    _progress,
    parse_enforcement,
    parse_trigger,
)

__all__ = ["tune"]


def tune(
    traces: Annotated[list[Path], typer.Argument(help="Trace files (JSONL, columnar or action logs).")],
    spec: Annotated[Path, typer.Option("--spec", "-s", help="YAML spec to learn with and to tune.")],
    target: Annotated[list[str], typer.Option(
        "--target", help="[ACTION:]false-alarms=X or [ACTION:]detection=Y, X and Y in (0, 1); repeatable. "
                         "Without ACTION: the least severe configured action (reflect).")],
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
) -> None:
    """Choose a threshold per action (and, under the increase trigger, min_increase) from cross-validation so that
    targets on detection or false alarms hold."""
    from ..evaluation.evaluate import evaluate as run_evaluate
    from ..evaluation.tune import parse_target, write_min_increase, write_thresholds
    from ..evaluation.tune import tune as run_tune
    from ..spec import Thresholds, Trigger, load_spec, parse_spec

    targets = [parse_target(t) for t in target]
    mode = parse_enforcement(enforcement)
    parsed = load_spec(spec)
    # what the integration enforces: the LangChain middleware and the MCP proxy (look-ahead) use
    # increase when the spec sets no trigger; a guard told of each step (observe), level
    trigger_mode = parse_trigger(trigger) or parsed.guard.trigger or (
        Trigger.INCREASE if mode is Enforcement.LOOKAHEAD else Trigger.LEVEL)
    runs = list(read_input(traces, input_format, period=period))
    if not runs:
        raise ForewarnError("no runs to tune on: the trace input is empty")
    with _progress("cross-validation", total=2 * folds) as update:
        result = run_evaluate(runs, parsed, [], folds=folds, group_by=group_by, seed=seed, method=method,
                              alpha=alpha, enforcement=mode, trigger=trigger_mode,
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
        _atomic_write(output, text)
    if format is Format.json:
        print_json({"enforcement": mode.value, "trigger": result.pooled.trigger, "min_increase": min_increase,
                    "folds": folds,
                    "group_by": group_by, "runs": len(runs),
                    "thresholds": chosen.model_dump(), "output": None if output is None else str(output),
                    "notes": notes, "actions": [
                        {"action": c.action.value, "theta": c.theta, "previous": c.previous,
                         "target": None if c.target is None else str(c.target), "moved": c.moved,
                         "figures": None if c.report is None else asdict(c.report),
                         "over_folds": {k: None if v is None else asdict(v) for k, v in c.over_folds.items()}}
                        for c in choices]})
        return
    table = Table(title=f"thresholds for {parsed.name}: {folds}-fold cross-validation over {len(runs)} runs, "
                        f"{mode.value} enforcement, {result.pooled.trigger} trigger"
                        + ("" if min_increase is None else f" (min_increase {min_increase:g}, tuned)"))
    for column in ("action", "target", "θ", "detection", "false alarms", "advance steps", "advance s",
                   "detection over folds", "false alarms over folds"):
        table.add_column(column, justify="left" if column in ("action", "target") else "right")
    for c in choices:
        t = c.report
        if t is None:
            table.add_row(c.action.value, "–", "off", *["–"] * 6)
            continue
        table.add_row(c.action.value, str(c.target) if c.target else "kept", f"{c.theta:g}",
                      f"{t.detected}/{t.n_unsafe} {_pct(t.detection_rate)}",
                      f"{t.false_alarms}/{t.n_safe} {_pct(t.false_alarm_rate)}", _fmt(t.mean_advance_steps),
                      _fmt(t.mean_advance_seconds), _over(c.over_folds.get("detection_rate")),
                      _over(c.over_folds.get("false_alarm_rate")))
    out.print(table)
    for note in notes:
        out.print(f"[yellow]note:[/] {note}", highlight=False)
    if output is not None:
        err.print(f"wrote {output}", highlight=False)
    else:
        err.print("pass -o SPEC_OUT to write a copy of the spec with these thresholds", highlight=False)
