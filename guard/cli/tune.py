"""``forewarn tune``: thresholds per action from cross-validation (the logic is in :mod:`.tune`)."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from ...errors import InputError
from ..bundle import DEFAULT_MIN_GROUP_RUNS
from ..ingest import read_input
from ..output_files import check_output, write_output
from ..read_summary import IngestSummary
from ..replay import Enforcement
from ..results import Method
from ._options import Format, MkdirOption, err, out, print_json
from ._replay_options import (
    DiscoverOption,
    EnforcementOption,
    ExtractorOption,
    FormatOption,
    InputFormatOption,
    OnErrorOption,
    OnMismatchOption,
    error_policy,
    mismatch_policy,
    parse_enforcement,
    parse_trigger,
)
from ._replay_output import ahead_cell, detection_cells, over, pct, progress, report_skipped

if TYPE_CHECKING:
    from ..evaluation.member_tune import MemberTuning, Tally


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
    input_format: InputFormatOption = "auto",
    enforcement: EnforcementOption = Enforcement.LOOKAHEAD.value,
    trigger: Annotated[str | None, typer.Option(
        "--trigger", help="Score alarms as this trigger acts: level or increase (min_increase is then tuned with "
                          "θ). Default: the spec's guard.trigger, else what the integration uses: increase under "
                          "lookahead enforcement (the LangChain middleware, the MCP proxy), level under observe.")]
    = None,
    bundle_by: Annotated[str | None, typer.Option(
        "--bundle-by", help="Learn each fold's model as a bundle grouped by this metadata key (e.g. meta.task), as "
                            "`learn --group-by` does, and choose thresholds per member too (-o writes them as "
                            "guard.member_thresholds).")] = None,
    min_group_runs: Annotated[int, typer.Option(
        "--min-group-runs", help="With --bundle-by: runs a group needs in a fold for a model of its own, and "
                                 "held-out runs its own model must have replayed for thresholds of its own.")]
    = DEFAULT_MIN_GROUP_RUNS,
    extractor: ExtractorOption = None,
    on_mismatch: OnMismatchOption = None,
    on_error: OnErrorOption = None,
    mkdir: MkdirOption = False,
    discover: DiscoverOption = None,
) -> None:
    """Choose a threshold per action (and, under the increase trigger, min_increase) from cross-validation so that
    targets on detection or false alarms hold."""
    from ..evaluation.evaluate import evaluate as run_evaluate
    from ..evaluation.member_tune import tally, tune_members, write_member_thresholds
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
    runs = list(read_input(traces, input_format, period=period, extractor=extractor, on_error=error_policy(on_error),
                           on_mismatch=mismatch_policy(on_mismatch), summary=summary))
    report_skipped(summary)
    if not runs:
        raise InputError("no runs to tune on: the trace input is empty")
    from ..discovery.auto import fold_discovery, wanted

    with progress("cross-validation", total=2 * folds) as update:
        # each fold's thresholds are scored on runs its discovered predicates never saw
        nested = fold_discovery(parsed, group_by=group_by, seed=seed,
                                on_progress=lambda text: update(description=text)) if wanted(parsed, discover) else None
        # a fold's learning starts after 2·(fold − 1) parts; its replay after one more
        result = run_evaluate(runs, parsed, [], folds=folds, group_by=group_by, seed=seed, method=method,
                              alpha=alpha, enforcement=mode, trigger=trigger_mode, bundle_by=bundle_by,
                              min_group_runs=min_group_runs, fold_spec=nested,
                              on_progress=lambda phase, fold: update(completed=2 * fold - 2 + (phase == "replay"),
                                                                     description=f"fold {fold}/{folds}: {phase}"))
    tuned: dict[str, float] = {}
    choices = run_tune(result, parsed, targets, tuned)
    discovered = [] if nested is None else nested.lines
    min_increase = tuned.get("min_increase")
    members: list[MemberTuning] = []
    unreplayed = 0
    totals: dict[Any, Tally] = {}
    if bundle_by is not None:
        members, unreplayed = tune_members(result, parsed, targets, min_runs=min_group_runs)
        totals = tally(result, choices, tuned.get("min_increase", result.pooled.min_increase), members)
    chosen = Thresholds(**{c.action.value: c.theta for c in choices})
    notes = [f"{c.action.value} θ moved from {c.previous:g} to {c.theta:g} to keep reflect ≥ ask_human ≥ stop"
             for c in choices if c.moved]
    if any(p.thresholds is not None for p in parsed.guard.properties):
        notes.append("properties with thresholds of their own keep them; tune sets guard.thresholds")
    own = [m for m in members if m.choices is not None]
    notes.extend(f"{c.action.value}: every detection is a block at the violating step itself ({mode.value} "
                 "enforcement looks one step ahead); no violating run is warned before it. To be warned ahead, target "
                 "warned-ahead=Y, or tune with --enforcement observe"
                 for c in choices if c.report is not None and c.report.n_unsafe and not c.report.warned_ahead
                 and c.report.blocked_at_step)
    if unreplayed:
        notes.append(f"{unreplayed} group(s) never had their runs replayed by a model of their own (too few "
                     "training runs in every fold" + (", and --group-by on the bundling key keeps each group out "
                     "of its own fold's training runs" if group_by == bundle_by else "") + "): they keep the pooled "
                     "thresholds")
    notes.extend(discovered)
    if discovered and discover and parsed.discover != "auto":
        notes.append("each fold's model was learned with what discovery found in its training runs: learn with "
                     "--discover too, so the model these thresholds go with is learned the same way")
    if bundle_by is None and parsed.guard.member_thresholds is not None:
        notes.append("the spec's guard.member_thresholds are kept as they were (tune with --bundle-by "
                     f"{parsed.guard.member_thresholds.by} to choose them again)")
    if output is not None:
        assert parsed.text is not None
        text = write_thresholds(parsed.text, chosen, source=str(spec))
        if min_increase is not None:
            text = write_min_increase(text, min_increase, source=str(spec))
        if bundle_by is not None:
            text = write_member_thresholds(text, bundle_by, {m.group: (m.thresholds, m.min_increase) for m in own
                                                             if m.thresholds is not None}, source=str(spec))
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
                        for c in choices],
                    "members": None if bundle_by is None else [_member_json(m) for m in members],
                    "members_with_own_thresholds": None if bundle_by is None else len(own),
                    "with_member_thresholds": None if bundle_by is None else {
                        a.value: t.to_dict() for a, t in totals.items()}})
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
            out.print(headline(c.action.value, c.theta, c.report), highlight=False, markup=False, soft_wrap=True)
        out.print(f"{c.action.value}: {aim}{folds_line}", highlight=False)
    if bundle_by is not None:
        _print_members(members, choices, totals, bundle_by, min_group_runs)
    for note in notes:
        out.print(f"[yellow]note:[/] {note}", highlight=False)
    if output is not None:
        err.print(f"wrote {output}" + ("" if bundle_by is None else _members_line(members, bundle_by)), highlight=False)
    else:
        err.print("pass -o SPEC_OUT to write a copy of the spec with these thresholds", highlight=False)


def headline(action: str, theta: float | None, t: Any) -> str:
    """What an action's θ did on the held-out runs, warned ahead apart from blocked at the step (as `evaluate`
    reports them): issue 38, a headline "100 % detected, 0 false alarms" where nothing was warned ahead."""
    return (f"{action} at θ {theta:g}: warned ahead {t.warned_ahead} of {t.n_unsafe} violating runs "
            f"({pct(t.warned_ahead_rate)}) before the violating step, blocked at the step {t.blocked_at_step} "
            f"({pct(t.blocked_at_step_rate)}); false alarms {t.false_alarms} of {t.n_safe} safe runs "
            f"({pct(t.false_alarm_rate)})")


def _members_line(members: list[MemberTuning], bundle_by: str) -> str:
    """What learning with the written spec does, in words true of this tuning (issue 38: it said "each member
    decides under its own thresholds" when no member got any)."""
    own = sum(m.choices is not None for m in members)
    if own == 0:
        return (f"; no member of {bundle_by} got thresholds of its own (too few held-out runs per member), so "
                f"every member decides under the pooled thresholds")
    return (f"; learn with --group-by {bundle_by} and it: {own} of {len(members)} members decide under thresholds "
            f"of their own, the rest under the pooled ones")


def _member_json(m: MemberTuning) -> dict[str, Any]:
    lead = next((c for c in m.choices or [] if c.report is not None), None)
    return {"group": m.group, "runs": m.runs, "unsafe_runs": m.unsafe_runs, "pooled": m.choices is None,
            "reason": m.reason, "thresholds": None if m.thresholds is None else m.thresholds.model_dump(),
            "min_increase": m.min_increase,
            "figures": None if lead is None or lead.report is None else asdict(lead.report)}


def _print_members(members: list[MemberTuning], pooled: list[Any], totals: dict[Any, Tally], bundle_by: str,
                   min_runs: int) -> None:
    """Each member's own thresholds (or why it keeps the pooled ones), and the figures of all of them together."""
    if not members:
        out.print(f"per member ({bundle_by}): no held-out run was replayed by a member of its own group; every "
                  "member keeps the pooled thresholds", highlight=False)
        return
    table = Table(title=f"per member ({bundle_by}): chosen on the held-out runs its own model replayed")
    actions = [c.action for c in pooled if c.theta is not None]
    tuned_increase = any(m.min_increase is not None for m in members)
    columns = ["member", "runs (unsafe)", *(a.value for a in actions), *(["min_increase"] if tuned_increase else []),
               "warned ahead", "false alarms"]
    for column in columns:
        table.add_column(column, justify="left" if column == "member" else "right")
    for m in members:
        if m.choices is None:
            table.add_row(m.group, f"{m.runs} ({m.unsafe_runs})", *(["pooled"] * len(actions)),
                          *(["–"] if tuned_increase else []), "–", "–")
            continue
        theta = {c.action: c.theta for c in m.choices}
        lead = next((c.report for c in m.choices if c.report is not None), None)
        table.add_row(m.group, f"{m.runs} ({m.unsafe_runs})", *(f"{theta[a]:g}" if theta.get(a) is not None else "off"
                                                               for a in actions),
                      *([] if not tuned_increase else ["–" if m.min_increase is None else f"{m.min_increase:g}"]),
                      "–" if lead is None else pct(lead.warned_ahead_rate),
                      "–" if lead is None else f"{lead.false_alarms}/{lead.n_safe} {pct(lead.false_alarm_rate)}")
    out.print(table)
    for m in members:
        if m.choices is None:
            out.print(f"{m.group}: keeps the pooled thresholds: {m.reason}", highlight=False)
    own = sum(m.choices is not None for m in members)
    out.print(f"{own} of {len(members)} members get thresholds of their own; the rest, and runs the pooled model "
              "decides, keep the pooled choice.", highlight=False)
    for c in pooled:
        total = totals.get(c.action)
        if total is None or c.report is None or c.target is None:
            continue
        both = total.to_dict()
        out.print(f"{c.action.value}, every held-out run at its member's thresholds: warned ahead "
                  f"{pct(both['warned_ahead_rate'])}, false alarms {pct(both['false_alarm_rate'])} (pooled θ "
                  f"{c.theta:g} alone: {pct(c.report.warned_ahead_rate)}, {pct(c.report.false_alarm_rate)})",
                  highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``tune`` to the ``forewarn`` app."""
    app.command("tune")(tune)
