"""What ``replay``, ``evaluate`` and ``tune`` print and write: the per-θ tables, progress (:mod:`._progress`), the HTML
report and figures. matplotlib is imported only when a report or plots are asked for."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from ...errors import InputError
from ..output_files import check_output, write_output
from ..replay import ReplayReport
from ._options import err, out, print_summary
from ._progress import progress

__all__ = ["progress"]  # names other modules import through this one


def fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def check_report_paths(report: Path | None, plots: Path | None, *, inputs: Sequence[str | Path],
                       mkdir: bool) -> None:
    """``--report`` and ``--plots`` checked before anything is replayed (see :func:`guard.output_files.check_output`);
    the report extra is needed for either."""
    if report is None and plots is None:
        return
    from .._extras import require

    require("report", "drawing a report (--report, --plots)")
    if report is not None:
        check_output(report, inputs=inputs, mkdir=mkdir, option="--report")
    if plots is not None and not plots.is_dir():  # the folder itself is made; the one it is in must exist
        if plots.exists():
            raise InputError(f"--plots {plots}: is not a directory")
        check_output(plots, inputs=inputs, mkdir=mkdir, option="--plots")


def write_outputs(report: ReplayReport, *, html_path: Path | None, plots_dir: Path | None, run_id: str | None,
                  render: Callable[[Any, Any], str], folds: Sequence[ReplayReport] = ()) -> None:
    if html_path is None and plots_dir is None:
        return
    from ..evaluation.plots import report_images, save_images

    if run_id is not None and not any(r.id == run_id for r in report.replays):
        raise InputError(f"--run: no replayed run has the id {run_id!r}")
    with progress("drawing figures") as update:
        images, chosen = report_images(report, run_id=run_id, folds=folds)
        update(description="writing")
        try:
            if plots_dir is not None:
                for path in save_images(images, plots_dir):
                    err.print(f"wrote {path}", highlight=False)
            if html_path is not None:
                write_output(html_path, render(images, chosen))
                err.print(f"wrote {html_path}", highlight=False)
        except OSError as exc:
            raise InputError(f"cannot write the report: {exc.strerror} ({exc.filename})") from exc


def report_skipped(summary: Any) -> None:
    """What ``--on-error skip`` left out and ``--on-mismatch simulator`` rewrote, on stderr (nothing when every
    run was read as logged)."""
    if summary.skipped or summary.mismatches:
        print_summary(summary, "read")


def detection_cells(t: Any) -> list[str]:
    """Warned ahead, blocked at the violating step, and their sum (a :class:`ThetaReport`'s)."""
    return [f"{t.warned_ahead}/{t.n_unsafe} {pct(t.warned_ahead_rate)}",
            f"{t.blocked_at_step} {pct(t.blocked_at_step_rate)}", pct(t.detection_rate)]


def ahead_cell(t: Any) -> str:
    """How many steps ahead the runs warned ahead were warned: median [IQR]."""
    spread = t.warned_ahead_steps
    return "–" if spread is None else f"{spread.median:g} [{spread.q1:g}–{spread.q3:g}]"


def print_replay(report: ReplayReport, title: str, evaluation: Any = None) -> None:
    # eight narrow columns: readable at 80 columns (the spread over folds gets a table of its own)
    table = Table(title=title)
    for column in ("θ", "warned ahead", "blocked at step", "detected", "false alarms", "steps ahead [IQR]",
                   "advance s", "alarms per run"):
        table.add_column(column, justify="right")
    for t in report.thetas:
        table.add_row(f"{t.theta:g}", *detection_cells(t), f"{t.false_alarms}/{t.n_safe} {pct(t.false_alarm_rate)}",
                      ahead_cell(t), fmt(t.mean_advance_seconds), fmt(t.prompts_per_run))
    out.print(table)
    if evaluation is not None:
        spread = Table(title="over folds: mean ± standard deviation")
        for column in ("θ", "warned ahead", "blocked at step", "detected", "false alarms"):
            spread.add_column(column, justify="right")
        for t in report.thetas:
            spread.add_row(f"{t.theta:g}", *(over(evaluation.over_folds(t.theta, name)) for name in (
                "warned_ahead_rate", "blocked_at_step_rate", "detection_rate", "false_alarm_rate")))
        out.print(spread)
    stop = Table(title=f"stop at the first alarm (Table 3 of the paper; {report.enforcement.value})")
    for column in ("enforcement", "θ", "unsafe %", "completion %", "prevented", "cut short"):
        stop.add_column(column, justify="left" if column == "enforcement" else "right")
    stop.add_row("none", "–", pct(report.unsafe_rate), pct(report.completion_rate), "–", "–")
    for t in report.thetas:
        if t.stop is not None:
            stop.add_row("stop", f"{t.theta:g}", pct(t.stop.unsafe_rate), pct(t.stop.completion_rate),
                         str(t.stop.prevented), str(t.stop.cut_short))
    out.print(stop)
    step, per_run = report.calibration_step, report.calibration_run
    out.print(f"Brier score of p_unsafe against outcomes: {fmt(report.brier, 4)}"
              f" ({report.unseen_steps} steps in states the model never saw); "
              f"ECE {fmt(None if step is None else step.ece, 4)}; per run: Brier "
              f"{fmt(None if per_run is None else per_run.brier, 4)}, "
              f"ECE {fmt(None if per_run is None else per_run.ece, 4)}")
    if report.baselines:
        from ..evaluation.baselines import LABELS

        middle = report.thetas[len(report.thetas) // 2]
        for name, baseline in report.baselines.items():
            b = next(x for x in baseline.thetas if x.theta == middle.theta)
            out.print(f"Baseline {LABELS[name]} at θ={middle.theta:g}: warned ahead {pct(b.warned_ahead_rate)}, "
                      f"blocked at step {pct(b.blocked_at_step_rate)}, detection {pct(b.detection_rate)}, "
                      f"false alarms {pct(b.false_alarm_rate)}, Brier {fmt(baseline.brier, 4)}")
    for note in report.notes:
        out.print(f"[yellow]note:[/] {note}", highlight=False)


def over(spread: Any) -> str:
    if spread is None:
        return "–"
    sd = "" if spread.stdev is None else f" ± {spread.stdev:.1%}"
    return f"{spread.mean:.1%}{sd}"
