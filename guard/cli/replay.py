"""``forewarn replay``, ``forewarn evaluate`` and ``forewarn ingest`` (``forewarn tune``: :mod:`.tune_cli`).

The lead wires them in ``guard/cli.py`` with ``register(app)``. matplotlib is imported
only when a report or plots are asked for, so the commands stay quick without them.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ...errors import ForewarnError, TraceError
from ..bundle import DEFAULT_MIN_GROUP_RUNS
from ..ingest import InputFormat, read_input
from ..replay import Enforcement, ReplayReport
from ..spec import Trigger
from ..storm import Method
from ._options import (
    Engine,
    Format,
    OnError,
    caught_warnings,
    check_alpha,
    check_period,
    err,
    out,
    print_json,
    print_summary,
    print_warnings,
    warn,
)

__all__ = ["register", "replay", "evaluate", "ingest", "parse_thetas", "parse_enforcement"]







class MismatchOption(str, Enum):
    error = "error"
    simulator = "simulator"



# Options that replay and evaluate share.
ThetaOption = Annotated[str, typer.Option(help="Comma-separated thresholds on p_safe.")]
FormatOption = Annotated[Format, typer.Option("--format")]
ReportOption = Annotated[Path | None, typer.Option("--report", help="Write a self-contained HTML report.")]
PlotsOption = Annotated[Path | None, typer.Option("--plots", help="Write the report's figures as PNG here.")]
RunOption = Annotated[str | None, typer.Option("--run", help="Run id to draw in the risk-over-time figure.")]
InputFormatOption = Annotated[InputFormat, typer.Option("--input-format", help="Format of the trace files.")]
ExtractorOption = Annotated[str | None, typer.Option(
    "--extractor", help="Agent logs (langchain, otel, langgraph): the state extractor the guard uses, "
                        "'tools' (default), 'household' or MODULE:NAME.")]


EnforcementOption = Annotated[str, typer.Option(
    "--enforcement", help="lookahead: a decision is taken before a step runs, so an alarm on the violating step "
                          "prevents it (the middleware, the sidecar's preview); observe: after (an alarm must "
                          "come strictly before).")]


TriggerOption = Annotated[str | None, typer.Option(
    "--trigger", help="Score alarms as this trigger acts: level (p_safe < θ) or increase (and the step raises the "
                      "run's risk by more than the spec's min_increase). Default: the spec's guard.trigger, else "
                      "level; the LangChain middleware uses increase when the spec sets none.")]


def parse_trigger(text: str | None) -> Trigger | None:
    """``level`` or ``increase`` (None: as the spec says); anything else is a one-line error."""
    if text is None:
        return None
    try:
        return Trigger(text.strip().lower())
    except ValueError:
        raise ForewarnError(f"--trigger: expected 'level' or 'increase', got {text!r}") from None


def parse_enforcement(text: str) -> Enforcement:
    """``lookahead`` or ``observe``; anything else is a one-line error."""
    try:
        return Enforcement(text.strip().lower())
    except ValueError:
        raise ForewarnError(f"--enforcement: expected 'lookahead' or 'observe', got {text!r}") from None


def parse_thetas(text: str) -> list[float]:
    """``"0.1,0.5"`` → ``[0.1, 0.5]``; every threshold must lie in [0, 1], and none be empty."""
    items = text.split(",")
    if any(not x.strip() for x in items):
        raise ForewarnError(f"--theta: an empty threshold in {text!r}; expected comma-separated numbers "
                            "such as 0.1,0.5")
    try:
        thetas = [float(x) for x in items]
    except ValueError as exc:
        raise ForewarnError(f"--theta: expected comma-separated numbers, got {text!r}") from exc
    if any(not 0.0 <= t <= 1.0 for t in thetas):  # NaN fails this too
        raise ForewarnError(f"--theta: thresholds must lie in [0, 1], got {text!r}")
    return thetas




def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


@contextmanager
def _progress(label: str, total: int | None = None) -> Iterator[Callable[..., None]]:
    """A progress bar on stderr when it is a terminal; yields ``update(completed=..., description=...)``."""
    columns = [TextColumn("{task.description}"), BarColumn(),
               MofNCompleteColumn() if total else TextColumn("{task.completed} runs"), TimeElapsedColumn()]
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task(label, total=total)

        def update(**fields: Any) -> None:
            progress.update(task, **fields)

        yield update


def _write_outputs(report: ReplayReport, *, html_path: Path | None, plots_dir: Path | None, run_id: str | None,
                   render: Callable[[Any, Any], str], folds: Sequence[ReplayReport] = ()) -> None:
    if html_path is None and plots_dir is None:
        return
    from ..evaluation.plots import report_images, save_images

    if run_id is not None and not any(r.id == run_id for r in report.replays):
        raise ForewarnError(f"--run: no replayed run has the id {run_id!r}")
    with _progress("drawing figures") as update:
        images, chosen = report_images(report, run_id=run_id, folds=folds)
        update(description="writing")
        try:
            if plots_dir is not None:
                for path in save_images(images, plots_dir):
                    err.print(f"wrote {path}", highlight=False)
            if html_path is not None:
                _atomic_write(html_path, render(images, chosen))
                err.print(f"wrote {html_path}", highlight=False)
        except OSError as exc:
            raise ForewarnError(f"cannot write the report: {exc.strerror} ({exc.filename})") from exc


def _atomic_write(path: Path, text: str) -> None:
    """Write through a temporary file beside ``path``: a failure leaves no half-written report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


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
    input_format: InputFormatOption = InputFormat.auto,
    extractor: ExtractorOption = None,
    baseline_traces: Annotated[list[Path] | None, typer.Option(
        "--baseline-traces", help="Runs to fit the empirical-frequency baseline on (default: the replayed runs, "
                                  "each left out of its own scoring).")] = None,
    enforcement: EnforcementOption = Enforcement.LOOKAHEAD.value,
    trigger: TriggerOption = None,
    engine: Annotated[Engine, typer.Option(help="Replay in this process, or on Apache Spark (the model "
                                                      "is broadcast to the executors).")] = Engine.local,
    master: Annotated[str | None, typer.Option(help="Spark master for --engine spark (default: the running "
                                                       "session's, else local[*]).")] = None,
) -> None:
    """Replay logged runs: detection, false alarms, advance warning, stop outcomes and calibration per θ."""
    from ..bundle_guard import load_guard
    from ..evaluation.baselines import score_baselines, trace_run
    from ..replay import replay as run_replay

    thetas = parse_thetas(theta)
    check_period(period)
    mode = parse_enforcement(enforcement)
    trigger_mode = parse_trigger(trigger)
    with caught_warnings() as warned:
        guard = load_guard(model)  # a model or a bundle: each run is replayed on its group's member
    if period is None:
        period = guard.model.provenance.get("period_seconds")
    if master is not None and engine is not Engine.spark:
        raise ForewarnError("--master applies to --engine spark only")
    if engine is Engine.spark and input_format not in (InputFormat.auto, InputFormat.jsonl):
        raise ForewarnError(f"--engine spark reads JSONL and Parquet runs, not --input-format {input_format.value}")
    from ..ingest import IngestSummary

    summary = IngestSummary()
    with _progress("replaying") as update:
        if engine is Engine.spark:
            from ..spark import replay_spark, spark_session

            result = replay_spark(traces, guard, thetas, spark=spark_session(master), period=period,
                                  enforcement=mode, trigger=trigger_mode)
        else:
            runs = read_input([Path(t) for t in traces], input_format, period=period, summary=summary,
                              extractor=extractor)
            result = run_replay(guard, runs, thetas, enforcement=mode, trigger=trigger_mode,
                                on_run=lambda n: update(completed=n))
    for path in summary.empty:
        warn(f"{path} holds no runs")
    if result.runs == 0:
        warn("no runs to replay: every figure below is empty")
    if run is not None and not any(r.id == run for r in result.replays):
        raise ForewarnError(f"--run: no replayed run has the id {run!r}")
    with _progress("baselines") as update:
        train = None
        if baseline_traces:
            update(description="baseline runs", completed=0)
            train = [trace_run(r, guard.predicates, guard.monitors)
                     for r in read_input(baseline_traces, input_format, period=period, extractor=extractor)]
        baselines = score_baselines(result.replays, thetas, predicates=guard.predicates, monitors=guard.monitors,
                                    train=train, unseen_alarms=result.unseen_alarms, horizon=result.horizon,
                                    enforcement=mode, min_increase=result.min_increase)
    notes = list(result.notes)
    same = _in_sample([Path(t) for t in traces], guard.model.provenance)
    if same:
        notes.append(f"The model was learned from {', '.join(same)}: these figures are in-sample and flatter it. "
                     "Replay runs it never saw, or use `forewarn evaluate` for cross-validated figures.")
    if train is None:
        notes.append("The empirical-frequency baseline was fitted on the replayed runs, each left out of its own "
                     "scoring (pass --baseline-traces to fit it on other runs).")
    result = replace(result, baselines=baselines, notes=notes)
    if format is Format.json:
        print_json(result.theta_entries())
        print_warnings(warned)
    else:
        result = replace(result, notes=[*notes, *warned])
        _print_replay(result, f"replay of {result.runs} runs ({result.steps} steps) against {model}, "
                              f"{mode.value} enforcement, {result.trigger} trigger")
    if report is not None or plots is not None:
        from ..evaluation.report import replay_html

        context = {"model": str(model), "traces": ", ".join(map(str, traces)), "spec": guard.model.spec.name,
                   "property": guard.property}
        _write_outputs(result, html_path=report, plots_dir=plots, run_id=run,
                       render=lambda images, chosen: replay_html(result, images, chosen, context=context))


def _print_replay(report: ReplayReport, title: str, evaluation: Any = None) -> None:
    table = Table(title=title)
    columns = ["θ", "warned in time", "false alarms", "advance steps", "median [IQR]", "advance s", "alarms/run"]
    if evaluation is not None:
        columns += ["detection over folds", "false alarms over folds"]
    for column in columns:
        table.add_column(column, justify="right")
    for t in report.thetas:
        spread = t.advance_steps
        iqr = "–" if spread is None else f"{spread.median:g} [{spread.q1:g}–{spread.q3:g}]"
        row = [f"{t.theta:g}", f"{t.detected}/{t.n_unsafe} {_pct(t.detection_rate)}",
               f"{t.false_alarms}/{t.n_safe} {_pct(t.false_alarm_rate)}", _fmt(t.mean_advance_steps), iqr,
               _fmt(t.mean_advance_seconds), _fmt(t.prompts_per_run)]
        if evaluation is not None:
            row += [_over(evaluation.over_folds(t.theta, "detection_rate")),
                    _over(evaluation.over_folds(t.theta, "false_alarm_rate"))]
        table.add_row(*row)
    out.print(table)
    stop = Table(title=f"stop at the first alarm (Table 3 of the paper; {report.enforcement.value})")
    for column in ("enforcement", "θ", "unsafe %", "completion %", "prevented", "cut short"):
        stop.add_column(column, justify="left" if column == "enforcement" else "right")
    stop.add_row("none", "–", _pct(report.unsafe_rate), _pct(report.completion_rate), "–", "–")
    for t in report.thetas:
        if t.stop is not None:
            stop.add_row("stop", f"{t.theta:g}", _pct(t.stop.unsafe_rate), _pct(t.stop.completion_rate),
                         str(t.stop.prevented), str(t.stop.cut_short))
    out.print(stop)
    step, per_run = report.calibration_step, report.calibration_run
    out.print(f"Brier score of p_unsafe against outcomes: {_fmt(report.brier, 4)}"
              f" ({report.unseen_steps} steps in states the model never saw); "
              f"ECE {_fmt(None if step is None else step.ece, 4)}; per run: Brier "
              f"{_fmt(None if per_run is None else per_run.brier, 4)}, "
              f"ECE {_fmt(None if per_run is None else per_run.ece, 4)}")
    if report.baselines:
        from ..evaluation.baselines import LABELS

        middle = report.thetas[len(report.thetas) // 2]
        for name, baseline in report.baselines.items():
            b = next(x for x in baseline.thetas if x.theta == middle.theta)
            out.print(f"Baseline {LABELS[name]} at θ={middle.theta:g}: detection {_pct(b.detection_rate)}, "
                      f"false alarms {_pct(b.false_alarm_rate)}, Brier {_fmt(baseline.brier, 4)}")
    for note in report.notes:
        out.print(f"[yellow]note:[/] {note}", highlight=False)


def _over(spread: Any) -> str:
    if spread is None:
        return "–"
    sd = "" if spread.stdev is None else f" ± {spread.stdev:.1%}"
    return f"{spread.mean:.1%}{sd}"


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
    input_format: InputFormatOption = InputFormat.auto,
    extractor: ExtractorOption = None,
    enforcement: EnforcementOption = Enforcement.LOOKAHEAD.value,
    trigger: TriggerOption = None,
    bundle_by: Annotated[str | None, typer.Option(
        "--bundle-by", help="Learn each fold's model as a bundle grouped by this metadata key (e.g. meta.task), "
                            "as `learn --group-by` does.")] = None,
    min_group_runs: Annotated[int, typer.Option(
        "--min-group-runs", help="With --bundle-by: runs a group needs in a fold for a model of its own.")]
    = DEFAULT_MIN_GROUP_RUNS,
    engine: Annotated[Engine, typer.Option(help="Evaluate in this process, or on Apache Spark (the "
                                                      "executors trace, count and replay; the driver learns "
                                                      "each fold's model).")] = Engine.local,
    master: Annotated[str | None, typer.Option(help="Spark master for --engine spark (default: the running "
                                                       "session's, else local[*]).")] = None,
) -> None:
    """Cross-validate: learn on k−1 folds, replay the held-out one; figures with their spread over folds."""
    from ..evaluation.evaluate import evaluate as run_evaluate
    from ..spec import load_spec

    thetas = parse_thetas(theta)
    check_period(period)
    check_alpha(alpha)
    if folds < 2:
        raise ForewarnError(f"--folds: cross-validation needs at least 2 folds, got {folds}")
    mode = parse_enforcement(enforcement)
    trigger_mode = parse_trigger(trigger)
    parsed = load_spec(spec)
    if master is not None and engine is not Engine.spark:
        raise ForewarnError("--master applies to --engine spark only")
    if engine is Engine.spark:
        if input_format not in (InputFormat.auto, InputFormat.jsonl):
            raise ForewarnError(f"--engine spark reads JSONL and Parquet runs, not --input-format "
                                f"{input_format.value}")
        if bundle_by is not None:
            raise ForewarnError("--bundle-by is not available with --engine spark yet; evaluate bundles locally")
        if extractor is not None:
            raise ForewarnError("--extractor applies to agent logs, which --engine spark does not read")
        from ..spark import spark_session
        from ..spark.evaluate import evaluate_spark

        with _progress("cross-validation on Spark", total=folds + 1) as update:
            def on_spark_progress(phase: str, fold: int) -> None:
                update(completed=fold if phase == "replay" else fold - 1, description=f"{phase} (fold {fold})")

            result = evaluate_spark(traces, parsed, thetas, folds=folds, group_by=group_by,
                                    seed=seed, method=method, alpha=alpha, enforcement=mode, trigger=trigger_mode,
                                    spark=spark_session(master), period=period, on_progress=on_spark_progress)
        if run is not None and not any(r.id == run for r in result.pooled.replays):
            raise ForewarnError(f"--run: no run has the id {run!r}")
        _show_evaluation(result, parsed.name, folds, group_by, mode, format, report, plots, run, spec, traces, seed)
        return
    from ..ingest import IngestSummary

    summary = IngestSummary()
    with _progress("reading runs") as update:
        runs = []
        read = read_input([Path(t) for t in traces], input_format, period=period, summary=summary,
                          extractor=extractor)
        for n, r in enumerate(read, start=1):
            runs.append(r)
            update(completed=n)
    if not runs:
        raise ForewarnError("no runs to evaluate: the trace input is empty")
    for path in summary.empty:
        warn(f"{path} holds no runs")
    if run is not None and not any(r.id == run for r in runs):
        raise ForewarnError(f"--run: no run has the id {run!r}")
    with _progress("cross-validation", total=2 * folds) as update:
        steps = {"learn": 0, "replay": 1}

        def on_progress(phase: str, fold: int) -> None:
            update(completed=2 * (fold - 1) + steps[phase], description=f"fold {fold}/{folds}: {phase}")

        result = run_evaluate(runs, parsed, thetas, folds=folds, group_by=group_by, seed=seed,
                              method=method, alpha=alpha, enforcement=mode, trigger=trigger_mode,
                              on_progress=on_progress, bundle_by=bundle_by, min_group_runs=min_group_runs)
    _show_evaluation(result, parsed.name, folds, group_by, mode, format, report, plots, run, spec, traces, seed)


def _show_evaluation(result: Any, name: str, folds: int, group_by: str | None, mode: Enforcement, format: Format,
                     report: Path | None, plots: Path | None, run: str | None, spec: Path, traces: Sequence[str],
                     seed: int) -> None:
    if format is Format.json:
        print_json(result.to_dict())
    else:
        title = (f"{folds}-fold cross-validation of {name} over {result.pooled.runs} runs"
                 + (f" in {result.groups} groups by {group_by}" if group_by else "")
                 + f", {mode.value} enforcement, {result.pooled.trigger} trigger")
        _print_replay(replace(result.pooled, notes=result.notes), title, result)
        pac = Table(title="folds")
        for column in ("fold", "train", "test", "states", "PAC (paper)", "states with enough visits",
                       "PAC (tight)", "Brier"):
            pac.add_column(column, justify="right")
        for f in result.folds:
            pac.add_row(str(f.index), str(f.train_runs), str(f.test_runs), str(f.states),
                        _pac_cell(f.pac["satisfied"], f.pac.get("runs_factor")),
                        f"{f.pac['states_satisfied']}/{f.pac['states']}", _tight_cell(f.pac.get("tight")),
                        _fmt(f.report.brier, 4))
        out.print(pac)
    if report is not None or plots is not None:
        from ..evaluation.report import evaluation_html

        context = {"spec": str(spec), "traces": ", ".join(map(str, traces)), "folds": str(folds),
                   "group by": group_by or "run id", "seed": str(seed)}
        _write_outputs(result.pooled, html_path=report, plots_dir=plots, run_id=run,
                       folds=[f.report for f in result.folds],
                       render=lambda images, chosen: evaluation_html(result, images, chosen, context=context))



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
    """Add ``replay``, ``evaluate`` and ``ingest`` to the ``forewarn`` app."""
    app.command("replay")(replay)
    app.command("evaluate")(evaluate)
    app.command("ingest")(ingest)
    from .tune import tune

    app.command("tune")(tune)


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
