"""The report's figures, drawn with matplotlib's Agg renderer (no display, no pyplot state).

Each function returns a :class:`matplotlib.figure.Figure`; :func:`png_bytes` renders one.
The figures: detection and false alarms over θ (with the baselines), a reliability
diagram per step and per run, the distribution of advance warnings per θ, and one
run's risk over time with its violation and alarms marked.
"""
from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._extras import extra_error

try:
    from matplotlib.figure import Figure
except ModuleNotFoundError as exc:
    raise extra_error("report", "drawing a report (--report, --plots)", exc) from None

from ..output_files import write_output
from ..replay import Enforcement, ReplayReport, RunReplay, rate_curve
from .baselines import EMPIRICAL, LABELS, ONE_CHANGE

__all__ = ["curve_figure", "reliability_figure", "advance_figure", "risk_figure", "choose_run", "png_bytes",
           "save_images", "report_images", "FigureSet"]

FigureSet = dict[str, Figure]

MODEL_COLOR, EMPIRICAL_COLOR, RULE_COLOR = "#1f5fa8", "#d9822b", "#7a7a7a"
DETECT_COLOR, FALSE_COLOR, VIOLATION_COLOR = "#1f5fa8", "#c0392b", "#c0392b"
_GRID = np.linspace(0.0, 1.0, 201)


def png_bytes(figure: Figure, *, dpi: int = 110) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight", facecolor="white")
    return buffer.getvalue()


def save_images(images: dict[str, bytes], directory: str | Path) -> list[Path]:
    """Write rendered figures (:func:`png_bytes`) as ``NAME.png`` into ``directory`` (created)."""
    target = Path(directory)
    target.mkdir(exist_ok=True)
    written = []
    for name, data in images.items():
        written.append(write_output(target / f"{name}.png", data))
    return written


def curve_figure(report: ReplayReport, *, folds: Sequence[ReplayReport] = ()) -> Figure:
    """Detection and false-alarm rates over θ, and the trade-off between them."""
    figure = Figure(figsize=(11, 4.2))
    over, trade = figure.subplots(1, 2)
    detection, false_alarm = rate_curve(report.replays, _GRID, unseen_alarms=report.unseen_alarms,
                                        lookahead=report.enforcement is Enforcement.LOOKAHEAD)
    for fold in folds:
        d, f = rate_curve(fold.replays, _GRID, unseen_alarms=fold.unseen_alarms,
                          lookahead=fold.enforcement is Enforcement.LOOKAHEAD)
        over.plot(_GRID, _nan(d), color=DETECT_COLOR, alpha=0.18, lw=1)
        over.plot(_GRID, _nan(f), color=FALSE_COLOR, alpha=0.18, lw=1)
    over.plot(_GRID, _nan(detection), color=DETECT_COLOR, lw=2.2, label="detection (model)")
    if report.enforcement is Enforcement.LOOKAHEAD:  # the part of detection that came before the violating step
        ahead, _ = rate_curve(report.replays, _GRID, unseen_alarms=report.unseen_alarms, lookahead=False)
        over.plot(_GRID, _nan(ahead), color=DETECT_COLOR, lw=1.4, ls="-.", label="warned ahead (model)")
    over.plot(_GRID, _nan(false_alarm), color=FALSE_COLOR, lw=2.2, label="false alarms (model)")
    empirical = report.baselines.get(EMPIRICAL)
    if empirical is not None:
        d, f = rate_curve(empirical.replays, _GRID, unseen_alarms=empirical.unseen_alarms,
                          lookahead=empirical.enforcement is Enforcement.LOOKAHEAD)
        over.plot(_GRID, _nan(d), color=DETECT_COLOR, lw=1.4, ls="--", label="detection (empirical frequency)")
        over.plot(_GRID, _nan(f), color=FALSE_COLOR, lw=1.4, ls="--", label="false alarms (empirical frequency)")
    rule = report.baselines.get(ONE_CHANGE)
    if rule is not None and rule.thetas:
        r = rule.thetas[-1]
        for value, color in ((r.detection_rate, DETECT_COLOR), (r.false_alarm_rate, FALSE_COLOR)):
            if value is not None:
                over.axhline(value, color=color, lw=1, ls=":")
        over.plot([], [], color=RULE_COLOR, ls=":", label="reactive rule (any θ)")
    for t in report.thetas:
        over.axvline(t.theta, color="#bbbbbb", lw=0.6, zorder=0)
    over.set(xlim=(0, 1), ylim=(-0.02, 1.02), xlabel="θ (alarm when p_safe < θ)", ylabel="fraction of runs",
             title="Warnings over the threshold θ" + (" (thin: folds)" if folds else ""))
    _legend(over, fontsize=7.5, loc="center left")
    over.grid(alpha=0.3)

    _trade_line(trade, false_alarm, detection, MODEL_COLOR, "model", lw=2.2)
    if empirical is not None:
        d, f = rate_curve(empirical.replays, _GRID, unseen_alarms=empirical.unseen_alarms,
                          lookahead=empirical.enforcement is Enforcement.LOOKAHEAD)
        _trade_line(trade, f, d, EMPIRICAL_COLOR, LABELS[EMPIRICAL], lw=1.4, ls="--")
    points: dict[tuple[float, float], list[float]] = {}
    for t in report.thetas:
        if t.detection_rate is not None and t.false_alarm_rate is not None:
            points.setdefault((t.false_alarm_rate, t.detection_rate), []).append(t.theta)
    for k, ((fa, det), thetas) in enumerate(points.items()):  # equal figures share one label
        trade.plot(fa, det, "o", color=MODEL_COLOR, ms=5)
        # labels step down the plot so that neighbouring points do not print over each other
        trade.annotate("θ=" + ", ".join(f"{x:g}" for x in thetas), (fa, det), textcoords="offset points",
                       xytext=(6 if fa <= 0.8 else -6, -12 - 11 * k), fontsize=7.5, color=MODEL_COLOR,
                       ha="right" if fa > 0.8 else "left",
                       arrowprops={"arrowstyle": "-", "color": MODEL_COLOR, "lw": 0.5, "alpha": 0.6} if k else None)
    if rule is not None and rule.thetas:
        r = rule.thetas[-1]
        if r.detection_rate is not None and r.false_alarm_rate is not None:
            trade.plot(r.false_alarm_rate, r.detection_rate, "s", color=RULE_COLOR, ms=8, label=LABELS[ONE_CHANGE])
    trade.plot([0, 1], [0, 1], color="#dddddd", lw=1, zorder=0)
    trade.set(xlim=(-0.02, 1.02), ylim=(-0.02, 1.02), xlabel="false-alarm rate (safe runs flagged)",
              ylabel="detection rate (warned in time)", title="Detection against false alarms")
    _legend(trade, fontsize=7.5, loc="lower right")
    trade.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def _legend(axes: Any, **options: Any) -> None:
    """A legend, unless nothing was drawn with a label (matplotlib warns about an empty one)."""
    if axes.get_legend_handles_labels()[0]:
        axes.legend(**options)


def _nan(values: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def _trade_line(axes: object, x: Sequence[float | None], y: Sequence[float | None], color: str, label: str,
                **style: object) -> None:
    xs, ys = _nan(x), _nan(y)
    if np.all(np.isnan(xs)) or np.all(np.isnan(ys)):
        return
    axes.step(xs, ys, where="post", color=color, label=label, **style)  # type: ignore[attr-defined]


def reliability_figure(report: ReplayReport) -> Figure:
    """Reliability diagrams (mean predicted p_unsafe against observed frequency) per step and per run."""
    figure = Figure(figsize=(11, 5.2))
    grid = figure.add_gridspec(2, 2, height_ratios=(3, 1), hspace=0.08)
    sources = [("model", report, MODEL_COLOR, "o-")]
    empirical = report.baselines.get(EMPIRICAL)
    if empirical is not None:
        sources.append(("empirical frequency", empirical, EMPIRICAL_COLOR, "s--"))
    for column, (kind, title) in enumerate((("step", "per step"), ("run", "per run (first step)"))):
        top = figure.add_subplot(grid[0, column])
        bottom = figure.add_subplot(grid[1, column], sharex=top)
        top.plot([0, 1], [0, 1], color="#aaaaaa", lw=1, ls=":", label="perfect calibration")
        width = 0.1 / (len(sources) + 0.5)
        for k, (name, source, color, style) in enumerate(sources):
            calibration = source.calibration_step if kind == "step" else source.calibration_run
            if calibration is None or calibration.n == 0:
                continue
            used = [b for b in calibration.bins if b.count]
            label = f"{name}: Brier {calibration.brier:.3f}, ECE {calibration.ece:.3f} (n={calibration.n})"
            top.plot(_nan([b.mean_predicted for b in used]), _nan([b.observed for b in used]), style, color=color, ms=5,
                     label=label)
            centers = np.array([b.low for b in calibration.bins]) + (k + 0.75) * width
            bottom.bar(centers, [b.count for b in calibration.bins], width=width, color=color, alpha=0.8)
        top.set(xlim=(0, 1), ylim=(-0.02, 1.02), ylabel="observed frequency of violation",
                title=f"Reliability, {title}")
        top.tick_params(labelbottom=False)
        _legend(top, fontsize=7.5, loc="upper left")
        top.grid(alpha=0.3)
        bottom.set(xlabel="predicted p_unsafe", ylabel="count")
        bottom.set_yscale("symlog", linthresh=10)
        bottom.grid(alpha=0.3)
    return figure


def advance_figure(report: ReplayReport) -> Figure:
    """How far ahead of the violation the first alarm came, per θ (only runs warned in time)."""
    with_seconds = any(t.advance_seconds is not None for t in report.thetas)
    figure = Figure(figsize=(11 if with_seconds else 6, 4))
    panels = figure.subplots(1, 2 if with_seconds else 1, squeeze=False)[0]
    unseen = report.unseen_alarms
    lookahead = report.enforcement is Enforcement.LOOKAHEAD
    for axes, unit in zip(panels, ("steps", "seconds")):
        data, labels = [], []
        for t in report.thetas:
            values: list[float] = []
            for r in report.replays:
                alarm = r.first_alarm(t.theta, unseen)
                if r.violation is not None and alarm is not None and alarm < r.acting_end(lookahead):
                    t_alarm, t_violation = r.times[alarm], r.times[r.violation]
                    if unit == "steps":
                        values.append(r.violation - alarm)
                    elif t_alarm is not None and t_violation is not None:
                        values.append(t_violation - t_alarm)
            data.append(values)
            labels.append(f"θ={t.theta:g}\nn={len(values)}")
        positions = range(1, len(data) + 1)
        filled = [(p, d) for p, d in zip(positions, data) if d]
        if filled:
            parts = axes.boxplot([d for _, d in filled], positions=[p for p, _ in filled], widths=0.5,
                                 patch_artist=True, showmeans=True, meanprops={"marker": "D", "markersize": 4})
            for box in parts["boxes"]:
                box.set(facecolor="#cfe0f3", edgecolor=MODEL_COLOR)
            for p, d in filled:
                jitter = np.random.default_rng(p).uniform(-0.12, 0.12, len(d))
                axes.plot(np.full(len(d), p) + jitter, d, ".", color=MODEL_COLOR, alpha=0.35, ms=3)
        else:
            axes.text(0.5, 0.5, "no violation was warned of in advance", ha="center", va="center",
                      transform=axes.transAxes, color="#666666")
        axes.set_xticks(list(positions), labels)
        axes.set_xlim(0.4, len(data) + 0.6)
        axes.set(ylabel=f"advance warning ({unit})", title=f"Advance warning in {unit}")
        axes.grid(alpha=0.3, axis="y")
    figure.tight_layout()
    return figure


def choose_run(report: ReplayReport, run_id: str | None = None) -> RunReplay | None:
    """The run to draw: ``run_id``; else a violating run warned of at the middle θ with the
    median advance; else the longest violating run; else the longest run."""
    replays = report.replays
    if run_id is not None:
        return next((r for r in replays if r.id == run_id), None)
    if not replays:
        return None
    if report.thetas:
        theta = report.thetas[len(report.thetas) // 2].theta
        warned = []
        for r in replays:
            alarm = r.first_alarm(theta, report.unseen_alarms)
            if r.violation is not None and alarm is not None \
                    and alarm < r.acting_end(report.enforcement is Enforcement.LOOKAHEAD):
                warned.append((r.violation - alarm, r.id, r))
        if warned:
            warned.sort(key=lambda x: (x[0], x[1]))
            return warned[len(warned) // 2][2]
    unsafe = [r for r in replays if r.unsafe]
    return max(unsafe or replays, key=lambda r: len(r.p_unsafe))


def risk_figure(run: RunReplay, report: ReplayReport) -> Figure:
    """One run's p_unsafe over time, with each θ's alarm line, its first alarms and the violation."""
    figure = Figure(figsize=(11, 4.2))
    axes = figure.subplots()
    use_time = bool(run.times) and all(t is not None for t in run.times)
    x = np.array(run.times if use_time else list(range(len(run.p_unsafe))), dtype=float)
    y = _nan(run.p_unsafe)
    axes.plot(x, y, "o-", color=MODEL_COLOR, lw=2, ms=4, label="p_unsafe (model)", zorder=3)
    empirical = report.baselines.get(EMPIRICAL)
    if empirical is not None:
        twin = next((r for r in empirical.replays if r.id == run.id), None)
        if twin is not None:
            axes.plot(x, _nan(twin.p_unsafe), "s--", color=EMPIRICAL_COLOR, lw=1.2, ms=3,
                      label="p_unsafe (empirical frequency)", zorder=2)
    unseen = [i for i, p in enumerate(run.p_unsafe) if p is None]
    if unseen:
        axes.plot(x[unseen], np.full(len(unseen), 1.0), "x", color="#555555", ms=7, label="state never seen")
    alarms: dict[int, list[float]] = {}
    for t, color in zip(report.thetas, _theta_colors(len(report.thetas))):
        level = 1.0 - t.theta
        axes.axhline(level, color=color, lw=0.9, ls="--", zorder=1)
        axes.text(1.005, level, f"θ={t.theta:g}", va="center", ha="left", fontsize=7.5, color=color,
                  transform=axes.get_yaxis_transform())
        alarm = run.first_alarm(t.theta, report.unseen_alarms)
        if alarm is not None and (run.violation is None or alarm <= run.violation):
            alarms.setdefault(alarm, []).append(t.theta)
    for n, (alarm, thetas) in enumerate(sorted(alarms.items())):  # one marker per step, naming its θs
        value = y[alarm] if not np.isnan(y[alarm]) else 1.0
        axes.plot(x[alarm], value, "v", color="#222222", ms=10, zorder=4, label="first alarm" if n == 0 else None)
        axes.annotate("alarm θ=" + ", ".join(f"{v:g}" for v in thetas), (x[alarm], value),
                      textcoords="offset points", xytext=(0, 10), ha="center", fontsize=7.5, zorder=5,
                      bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "#999999", "alpha": 0.9})
    if run.violation is not None:
        axes.axvline(x[run.violation], color=VIOLATION_COLOR, lw=2.2, alpha=0.75, label="violation", zorder=2)
    outcome = "violates" if run.unsafe else "stays safe"
    task = run.meta.get("task")
    axes.set(ylim=(-0.03, 1.08), xlabel="time (s)" if use_time else "step", ylabel="p_unsafe",
             title=f"Risk over run {run.id!r}" + (f" (task {task})" if task else "") + f": {outcome}; "
                   "an alarm fires when p_unsafe rises above 1 − θ (dashed)")
    _legend(axes, fontsize=7.5, loc="center left", bbox_to_anchor=(1.07, 0.5))
    axes.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def _theta_colors(n: int) -> list[str]:
    palette = ["#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#ad1457", "#5d4037", "#1565c0", "#9e9d24"]
    return [palette[i % len(palette)] for i in range(n)]


def report_images(report: ReplayReport, *, run_id: str | None = None,
                  folds: Sequence[ReplayReport] = ()) -> tuple[dict[str, bytes], RunReplay | None]:
    """Every figure of a report rendered as PNG, by file name, and the run drawn in the risk figure."""
    figures: FigureSet = {"curve": curve_figure(report, folds=folds), "reliability": reliability_figure(report),
                          "advance": advance_figure(report)}
    chosen = choose_run(report, run_id)
    if chosen is not None:
        figures["risk"] = risk_figure(chosen, report)
    return {name: png_bytes(figure) for name, figure in figures.items()}, chosen
