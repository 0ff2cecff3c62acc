"""``forewarn evaluate``: cross-validation (learn on k−1 folds, replay the held-out one), locally or on Spark."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ...errors import InputError
from ..bundle import DEFAULT_MIN_GROUP_RUNS
from ..ingest import read_input
from ..replay import Enforcement
from ..results import Method
from ._options import Engine, Format, MkdirOption, check_alpha, check_folds, check_period, out, print_json, warn
from ._replay_options import (
    BundleByOption,
    DiscoverOption,
    EnforcementOption,
    ExtractorOption,
    FormatOption,
    InputFormatOption,
    MinGroupRunsOption,
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
from ._replay_output import check_report_paths, fmt, print_replay, progress, report_skipped, write_outputs


def evaluate(
    traces: Annotated[list[str], typer.Argument(
        help="Trace files (JSONL, columnar or action logs); with --engine spark JSONL or Parquet files, "
             "directories or Hadoop URIs (s3a://, hdfs://).")],
    spec: Annotated[Path, typer.Option("--spec", "-s", help="YAML spec to learn with.")],
    folds: Annotated[int, typer.Option(help="Number of folds.")] = 5,
    group_by: Annotated[str | None, typer.Option(
        "--group-by", help="Dotted path whose runs stay together, e.g. meta.task (default: each run alone).")]
    = None,
    theta: ThetaOption = "0.1,0.3,0.5,0.7,0.9",
    seed: Annotated[int, typer.Option(help="Seed for assigning equal-sized groups to folds.")] = 0,
    period: Annotated[float | None, typer.Option(help="Resample runs to PERIOD seconds per step.")] = None,
    alpha: Annotated[float | None, typer.Option(help="Laplace smoothing α (default: the spec's).")] = None,
    method: Annotated[Method, typer.Option(help="Storm method for each fold's model.")] = Method.SOUND,
    format: FormatOption = Format.table,
    report: ReportOption = None,
    plots: PlotsOption = None,
    run: RunOption = None,
    input_format: InputFormatOption = "auto",
    extractor: ExtractorOption = None,
    on_mismatch: OnMismatchOption = None,
    enforcement: EnforcementOption = Enforcement.LOOKAHEAD.value,
    trigger: TriggerOption = None,
    bundle_by: BundleByOption = None,
    min_group_runs: MinGroupRunsOption = DEFAULT_MIN_GROUP_RUNS,
    engine: Annotated[Engine, typer.Option(help="Evaluate in this process, or on Apache Spark (the "
                                                      "executors trace, count and replay; the driver learns "
                                                      "each fold's model).")] = Engine.local,
    master: Annotated[str | None, typer.Option(help="Spark master for --engine spark (default: the running "
                                                       "session's, else local[*]).")] = None,
    on_error: OnErrorOption = None,
    mkdir: MkdirOption = False,
    discover: DiscoverOption = None,
) -> None:
    """Cross-validate: learn on k−1 folds, replay the held-out one; figures with their spread over folds."""
    from ..evaluation.evaluate import evaluate as run_evaluate
    from ..spec import load_spec

    thetas = parse_thetas(theta)
    check_period(period)
    check_alpha(alpha)
    check_on_error(on_error, engine)
    check_report_paths(report, plots, inputs=[*traces, spec], mkdir=mkdir)
    check_folds(folds)
    mode = parse_enforcement(enforcement)
    trigger_mode = parse_trigger(trigger)
    parsed = load_spec(spec)
    if master is not None and engine is not Engine.spark:
        raise InputError("--master applies to --engine spark only")
    from ..discovery.auto import fold_discovery, wanted

    discovering = wanted(parsed, discover)
    if discovering and engine is Engine.spark:
        if discover:
            raise InputError("--discover runs in this process, not with --engine spark: evaluate locally")
        warn("the spec's discover: auto is not run with --engine spark: each fold learns the spec as written")
        discovering = False
    if engine is Engine.spark:
        if input_format not in ("auto", "jsonl"):
            raise InputError(f"--engine spark reads JSONL and Parquet runs, not --input-format {input_format}")
        if bundle_by is not None:
            raise InputError("--bundle-by is not available with --engine spark yet; evaluate bundles locally")
        if extractor is not None or on_mismatch is not None:
            raise InputError(f"--{'extractor' if extractor is not None else 'on-mismatch'} applies to agent and "
                                "action logs, which --engine spark does not read")
        from ..spark import spark_session
        from ..spark.evaluate import evaluate_spark

        with progress("cross-validation on Spark", total=folds + 1) as update:
            def on_spark_progress(phase: str, fold: int) -> None:
                update(completed=fold if phase == "replay" else fold - 1, description=f"{phase} (fold {fold})")

            result = evaluate_spark(traces, parsed, thetas, folds=folds, group_by=group_by,
                                    seed=seed, method=method, alpha=alpha, enforcement=mode, trigger=trigger_mode,
                                    spark=spark_session(master), period=period, on_progress=on_spark_progress)
        if run is not None and not any(r.id == run for r in result.pooled.replays):
            raise InputError(f"--run: no run has the id {run!r}")
        _show_evaluation(result, parsed.name, folds, group_by, mode, format, report, plots, run, spec, traces, seed)
        return
    from ..ingest import IngestSummary

    summary = IngestSummary()
    with progress("reading runs", unit="runs") as update:
        runs = []
        read = read_input([Path(t) for t in traces], input_format, period=period, summary=summary,
                          extractor=extractor, on_error=error_policy(on_error),
                          on_mismatch=mismatch_policy(on_mismatch))
        for n, r in enumerate(read, start=1):
            runs.append(r)
            update(completed=n)
    report_skipped(summary)
    if not runs:
        raise InputError("no runs to evaluate: the trace input is empty")
    for path in summary.empty:
        warn(f"{path} holds no runs")
    if run is not None and not any(r.id == run for r in runs):
        raise InputError(f"--run: no run has the id {run!r}")
    with progress("cross-validation", total=2 * folds) as update:
        steps = {"learn": 0, "replay": 1}

        def on_progress(phase: str, fold: int) -> None:
            update(completed=2 * (fold - 1) + steps[phase], description=f"fold {fold}/{folds}: {phase}")

        nested = fold_discovery(parsed, group_by=group_by, seed=seed,
                                on_progress=lambda text: update(description=text)) if discovering else None
        result = run_evaluate(runs, parsed, thetas, folds=folds, group_by=group_by, seed=seed,
                              method=method, alpha=alpha, enforcement=mode, trigger=trigger_mode,
                              on_progress=on_progress, bundle_by=bundle_by, min_group_runs=min_group_runs,
                              fold_spec=nested)
    if nested is not None:
        result.notes.extend(nested.lines)
    _show_evaluation(result, parsed.name, folds, group_by, mode, format, report, plots, run, spec, traces, seed)


def _show_evaluation(result: Any, name: str, folds: int, group_by: str | None, mode: Enforcement, format: Format,
                     report: Path | None, plots: Path | None, run: str | None, spec: Path, traces: Sequence[str],
                     seed: int) -> None:
    for constant in result.constant_predicates:
        warn(constant.message())
    if format is Format.json:
        print_json(result.to_dict())
    else:
        title = (f"{folds}-fold cross-validation of {name} over {result.pooled.runs} runs"
                 + (f" in {result.groups} groups by {group_by}" if group_by else "")
                 + f", {mode.value} enforcement, {result.pooled.trigger} trigger")
        print_replay(replace(result.pooled, notes=result.notes), title, result)
        pac = Table(title="folds")
        for column in ("fold", "train", "test", "states", "PAC (paper)", "states with enough visits",
                       "PAC (tight)", "Brier"):
            pac.add_column(column, justify="right")
        for f in result.folds:
            pac.add_row(str(f.index), str(f.train_runs), str(f.test_runs), str(f.states),
                        _pac_cell(f.pac["satisfied"], f.pac.get("runs_factor")),
                        f"{f.pac['states_satisfied']}/{f.pac['states']}", _tight_cell(f.pac.get("tight")),
                        fmt(f.report.brier, 4))
        out.print(pac)
    if report is not None or plots is not None:
        from ..evaluation.report import evaluation_html

        context = {"spec": str(spec), "traces": ", ".join(map(str, traces)), "folds": str(folds),
                   "group by": group_by or "run id", "seed": str(seed)}
        write_outputs(result.pooled, html_path=report, plots_dir=plots, run_id=run,
                       folds=[f.report for f in result.folds],
                       render=lambda images, chosen: evaluation_html(result, images, chosen, context=context))


def _pac_cell(satisfied: bool, runs_factor: float | None) -> str:
    """A PAC verdict, or how many times the training runs it would need."""
    if satisfied:
        return "yes"
    return "no (never)" if runs_factor is None else f"no (×{runs_factor:.3g} runs)"


def _tight_cell(tight: dict[str, Any] | None) -> str:
    if tight is None:
        return "–"
    bound = tight["worst_bound"]
    verdict = _pac_cell(tight["satisfied"], tight["runs_factor"])
    return verdict if bound is None else f"{verdict}, ±{bound:.3g}"


def register(app: typer.Typer) -> None:
    """Add ``evaluate`` to the ``forewarn`` app."""
    app.command("evaluate")(evaluate)
