"""``forewarn replay``: a learned model (or bundle) over logged runs, with figures per θ and baselines."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any

import typer

from ...errors import InputError, UsageError
from ..ingest import read_input
from ..replay import Enforcement
from ._options import (
    Engine,
    Format,
    MkdirOption,
    caught_warnings,
    check_period,
    print_json,
    print_warnings,
    warn,
)
from ._replay_options import (
    EnforcementOption,
    ExtractorOption,
    FormatOption,
    InputFormatOption,
    OnErrorOption,
    OnMismatchOption,
    PlotsOption,
    ReportOption,
    RunOption,
    ThetaOption,
    TriggerOption,
    check_on_error,
    error_policy,
    mismatch_policy,
    parse_enforcement,
    parse_thetas,
    parse_trigger,
)
from ._replay_output import check_report_paths, print_replay, progress, report_skipped, write_outputs


def _in_sample(traces: Sequence[Path], provenance: dict[str, Any]) -> list[str]:
    """Replayed files the model was learned from (same SHA-256): its figures there are in-sample."""
    from ..traces import file_digest

    learned = {entry.get("sha256") for entry in provenance.get("inputs", [])}
    same = []
    for path in traces:
        try:
            if file_digest(path) in learned:
                same.append(str(path))
        except OSError:
            continue
    return same


def replay(
    traces: Annotated[list[str], typer.Argument(
        help="Trace files to replay (JSONL, columnar or action logs); with --engine spark JSONL or Parquet "
             "files, directories or Hadoop URIs (s3a://, hdfs://).")],
    model: Annotated[Path, typer.Option("--model", "-m", help="Model file.")],
    theta: ThetaOption = "0.1,0.3,0.5,0.7,0.9",
    period: Annotated[float | None, typer.Option(help="Resample runs to PERIOD seconds per step "
                                                         "(default: the period the model was learned with).")]
    = None,
    format: FormatOption = Format.table,
    report: ReportOption = None,
    plots: PlotsOption = None,
    run: RunOption = None,
    input_format: InputFormatOption = "auto",
    extractor: ExtractorOption = None,
    on_mismatch: OnMismatchOption = None,
    baseline_traces: Annotated[list[Path] | None, typer.Option(
        "--baseline-traces", help="Runs to fit the empirical-frequency baseline on (default: the replayed runs, "
                                  "each left out of its own scoring).")] = None,
    enforcement: EnforcementOption = Enforcement.LOOKAHEAD.value,
    trigger: TriggerOption = None,
    engine: Annotated[Engine, typer.Option(help="Replay in this process, or on Apache Spark (the model "
                                                      "is broadcast to the executors).")] = Engine.local,
    master: Annotated[str | None, typer.Option(help="Spark master for --engine spark (default: the running "
                                                       "session's, else local[*]).")] = None,
    on_error: OnErrorOption = None,
    mkdir: MkdirOption = False,
    shield: Annotated[float | None, typer.Option(
        "--shield", help="Also replay the runs under the shield at this θ (a model learned with --mdp; "
                         "docs/shield.md): the runs it would have blocked before their violation, the safe "
                         "runs it would have blocked, and the steps left after the first block.")] = None,
) -> None:
    """Replay logged runs: detection, false alarms, advance warning, stop outcomes and calibration per θ."""
    from ..bundle_guard import BundleGuard, load_guard
    from ..evaluation.baselines import score_baselines, trace_run
    from ..replay import replay as run_replay
    from ..runtime import Guard
    from ..thresholds import warn_initial_crossings

    thetas = parse_thetas(theta)
    check_period(period)
    check_on_error(on_error, engine)
    check_report_paths(report, plots, inputs=[*traces, model], mkdir=mkdir)
    mode = parse_enforcement(enforcement)
    trigger_mode = parse_trigger(trigger)
    if shield is not None and not 0.0 < shield <= 1.0:
        raise UsageError(f"--shield: θ must lie in (0, 1], got {shield}")
    with caught_warnings() as warned:
        guard = load_guard(model)  # a model or a bundle: each run is replayed on its group's member
        if isinstance(guard, Guard) and guard.start_warning:  # replayed runs open no sessions: said here
            guard.start_warning = False
            warn_initial_crossings(guard.model, guard.policy)
    if shield is not None and (engine is Engine.spark or getattr(guard, "advice", None) is None):
        raise UsageError(f"--shield needs a single model learned with --mdp (learning.mdp), {model} has no MDP"
                         if engine is not Engine.spark else "--shield replays in this process, not on Spark")
    if period is None:
        period = guard.model.provenance.get("period_seconds")
    if master is not None and engine is not Engine.spark:
        raise InputError("--master applies to --engine spark only")
    if engine is Engine.spark and input_format not in ("auto", "jsonl"):
        raise InputError(f"--engine spark reads JSONL and Parquet runs, not --input-format {input_format}")
    from ..ingest import IngestSummary

    summary = IngestSummary()
    with progress("replaying", unit="runs") as update:
        if engine is Engine.spark:
            from ..spark import replay_spark, spark_session

            result = replay_spark(traces, guard, thetas, spark=spark_session(master), period=period,
                                  enforcement=mode, trigger=trigger_mode)
        else:
            runs = read_input([Path(t) for t in traces], input_format, period=period, summary=summary,
                              extractor=extractor, on_error=error_policy(on_error),
                              on_mismatch=mismatch_policy(on_mismatch))
            result = run_replay(guard, runs, thetas, enforcement=mode, trigger=trigger_mode,
                                on_run=lambda n: update(completed=n))
    report_skipped(summary)
    for path in summary.empty:
        warn(f"{path} holds no runs")
    if result.runs == 0:
        warn("no runs to replay: every figure below is empty")
    if run is not None and not any(r.id == run for r in result.replays):
        raise InputError(f"--run: no replayed run has the id {run!r}")
    with progress("baselines") as update:
        train = None
        if baseline_traces:
            update(description="baseline runs", completed=0)
            train = [trace_run(r, guard.predicates, guard.monitors)
                     for r in read_input(baseline_traces, input_format, period=period, extractor=extractor,
                                         on_error=error_policy(on_error), summary=summary,
                                         on_mismatch=mismatch_policy(on_mismatch))]
        member_of = None if not isinstance(guard, BundleGuard) else (lambda r: guard.member_name(r.meta))
        baselines = score_baselines(result.replays, thetas, predicates=guard.predicates, monitors=guard.monitors,
                                    train=train, unseen_alarms=result.unseen_alarms, horizon=result.horizon,
                                    enforcement=mode, min_increase=result.min_increase, member_of=member_of)
    notes = list(result.notes)
    same = _in_sample([Path(t) for t in traces], guard.model.provenance)
    if same:
        notes.append(f"The model was learned from {', '.join(same)}: these figures are in-sample and flatter it. "
                     "Replay runs it never saw, or use `forewarn evaluate` for cross-validated figures.")
    if isinstance(guard, BundleGuard):
        notes.append(f"The model is a bundle by {guard.bundle.group_by}: the empirical-frequency baseline was "
                     "counted per member, on the runs of that member's group (over all runs for those the pooled "
                     "model decided).")
    if train is None:
        notes.append("The empirical-frequency baseline was fitted on the replayed runs, each left out of its own "
                     "scoring (pass --baseline-traces to fit it on other runs).")
    shielded = None
    if shield is not None:  # the runs again, under the shield's rule (guard/shield.py)
        from ..shield import shield_counterfactual

        shielded = shield_counterfactual(guard, read_input(
            [Path(t) for t in traces], input_format, period=period, extractor=extractor,
            on_error=error_policy(on_error), on_mismatch=mismatch_policy(on_mismatch)), shield)
        notes.append(f"Under the shield at θ {shield:g} (docs/shield.md): {shielded.caught} of the "
                     f"{shielded.unsafe_runs} runs that reached a violation would have been blocked before it, and "
                     f"{shielded.blocked_safe} of the {shielded.runs - shielded.unsafe_runs} safe runs, leaving "
                     f"{shielded.steps_left} of their {shielded.safe_steps} steps after the first block.")
    result = replace(result, baselines=baselines, notes=notes)
    if format is Format.json:
        entries = result.theta_entries()
        print_json(entries if shielded is None else {"thetas": entries, "shield": {"theta": shield,
                                                                                   **asdict(shielded)}})
        print_warnings(warned)
    else:
        result = replace(result, notes=[*notes, *warned])
        print_replay(result, f"replay of {result.runs} runs ({result.steps} steps) against {model}, "
                              f"{mode.value} enforcement, {result.trigger} trigger")
    if report is not None or plots is not None:
        from ..evaluation.report import replay_html

        context = {"model": str(model), "traces": ", ".join(map(str, traces)), "spec": guard.model.spec.name,
                   "property": guard.property}
        write_outputs(result, html_path=report, plots_dir=plots, run_id=run,
                       render=lambda images, chosen: replay_html(result, images, chosen, context=context))


def register(app: typer.Typer) -> None:
    """Add ``replay`` to the ``forewarn`` app."""
    app.command("replay")(replay)
