"""One self-contained HTML file: tables, figures embedded as base64 PNG, no network.

The page leads with one paragraph in words (at the middle threshold), then the tables
(warnings per θ, what ``stop`` would have done, calibration, the baselines, and for a
cross-validation the folds with their PAC status), then the figures, then how every
figure is computed.
"""
from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from .._version import __version__
from ..replay import ReplayReport, RunReplay, Spread, ThetaReport
from .baselines import LABELS
from .evaluate import EvaluationReport

__all__ = ["replay_html", "evaluation_html"]

_CSS = """
body{font-family:-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif;margin:0;background:#f6f7f9;
color:#1d2330}
main{max-width:1180px;margin:0 auto;padding:24px 28px 48px;background:#fff;min-height:100vh}
h1{font-size:1.55em;margin:0 0 4px}
h2{font-size:1.2em;margin:30px 0 8px;border-bottom:2px solid #e3e7ee;padding-bottom:4px}
.meta{color:#5b6475;font-size:.86em;margin-bottom:14px}.meta code{background:#f0f2f5;padding:1px 4px;border-radius:3px}
.summary{background:#eef4fb;border-left:4px solid #1f5fa8;padding:10px 14px;line-height:1.5}
.note{background:#fff6e5;border-left:4px solid #e0a030;padding:8px 14px;margin:8px 0;font-size:.92em}
table{border-collapse:collapse;margin:6px 0 4px;font-size:.88em}
th,td{padding:4px 8px;border-bottom:1px solid #e3e7ee;text-align:right;white-space:nowrap}
th{background:#f0f2f5;font-weight:600;white-space:normal;vertical-align:bottom;max-width:130px}
.scroll{overflow-x:auto;max-width:100%}td.l,th.l{text-align:left}tr.model td{font-weight:600}
.caption{color:#5b6475;font-size:.84em;margin:2px 0 10px;max-width:1000px}
figure{margin:14px 0 22px}figure img{max-width:100%;border:1px solid #e3e7ee}
dl{font-size:.9em;line-height:1.45}dt{font-weight:600;margin-top:8px}dd{margin-left:18px}
"""


def _e(text: object) -> str:
    return html.escape(str(text))


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _spread(spread: Spread | None, digits: int = 1) -> str:
    if spread is None:
        return "–"
    if spread.n == 1:
        return f"{spread.median:.{digits}f}"
    return f"{spread.median:.{digits}f} [{spread.q1:.{digits}f}–{spread.q3:.{digits}f}]"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], *, left: int = 1,
           classes: Sequence[str] | None = None) -> str:
    head = "".join(f'<th class="l">{_e(h)}</th>' if i < left else f"<th>{_e(h)}</th>" for i, h in enumerate(header))
    body = []
    for k, row in enumerate(rows):
        cells = "".join(f'<td class="l">{c}</td>' if i < left else f"<td>{c}</td>" for i, c in enumerate(row))
        cls = f' class="{classes[k]}"' if classes and classes[k] else ""
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<div class=\"scroll\"><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"


def _middle(report: ReplayReport) -> ThetaReport | None:
    return report.thetas[len(report.thetas) // 2] if report.thetas else None


def _summary(report: ReplayReport, subject: str) -> str:
    t = _middle(report)
    if t is None:
        return ""
    parts = [f"{subject} {report.runs} runs ({t.n_unsafe} violating, {t.n_safe} safe), with "
             f"{report.enforcement.value} enforcement. At θ = {t.theta:g}"]
    if t.n_unsafe:
        ahead = ""
        if t.warned_ahead_steps is not None:
            ahead = f", a median {t.warned_ahead_steps.median:g} steps ahead"
        parts.append(f" the guard warned ahead of {t.warned_ahead} of {t.n_unsafe} violations "
                     f"({_pct(t.warned_ahead_rate)}){ahead}")
        if t.blocked_at_step:
            parts.append(f" and blocked {t.blocked_at_step} more on the violating step itself "
                         f"({_pct(t.blocked_at_step_rate)}, look-ahead only; detection {_pct(t.detection_rate)})")
        if t.unsafe_at_start:
            parts.append(f" ({t.unsafe_at_start} violated at their first step, where no warning can come first)")
    else:
        parts.append(" there was no violation to warn of")
    parts.append(f", and flagged {t.false_alarms} of {t.n_safe} safe runs ({_pct(t.false_alarm_rate)}).")
    if t.stop is not None:
        parts.append(f" Stopping at the first alarm would have left {_pct(t.stop.unsafe_rate)} of runs unsafe "
                     f"(unguarded: {_pct(report.unsafe_rate)})")
        if report.completion_rate is not None:
            parts.append(f" and {_pct(t.stop.completion_rate)} completing their task "
                         f"(unguarded: {_pct(report.completion_rate)})")
        parts.append(".")
    step = report.calibration_step
    if step is not None and step.brier is not None:
        parts.append(f" Calibration of p_unsafe per step: Brier {step.brier:.3f}, ECE {step.ece:.3f}.")
    comparison = []
    for name, baseline in report.baselines.items():
        b = next((x for x in baseline.thetas if x.theta == t.theta), None)
        if b is not None:
            comparison.append(f"the {LABELS[name]} warned ahead of {_pct(b.warned_ahead_rate)} of violations "
                              f"and blocked {_pct(b.blocked_at_step_rate)} at the step, with "
                              f"{_pct(b.false_alarm_rate)} false alarms")
    if comparison:
        parts.append(" For comparison, at the same θ " + "; ".join(comparison) + ".")
    return "".join(_e(p) for p in parts)


def _warnings_table(report: ReplayReport, over_folds: EvaluationReport | None = None) -> str:
    header = ["θ", "violating runs", "warned ahead", "warned-ahead rate", "blocked at step", "blocked-at-step rate",
              "detection", "safe runs", "false alarms", "false-alarm rate", "steps ahead: median [IQR]",
              "advance s: median [IQR]", "alarm steps / run"]
    if over_folds is not None:
        header += ["warned ahead over folds", "detection over folds", "false alarms over folds"]
    rows = []
    for t in report.thetas:
        row = [f"{t.theta:g}", str(t.n_unsafe), str(t.warned_ahead), _pct(t.warned_ahead_rate),
               str(t.blocked_at_step), _pct(t.blocked_at_step_rate), _pct(t.detection_rate), str(t.n_safe),
               str(t.false_alarms), _pct(t.false_alarm_rate), _spread(t.warned_ahead_steps),
               _spread(t.advance_seconds), _num(t.prompts_per_run)]
        if over_folds is not None:
            row += [_mean_sd(over_folds.over_folds(t.theta, "warned_ahead_rate")),
                    _mean_sd(over_folds.over_folds(t.theta, "detection_rate")),
                    _mean_sd(over_folds.over_folds(t.theta, "false_alarm_rate"))]
        rows.append(row)
    return _table(header, rows)


def _mean_sd(spread: Spread | None) -> str:
    if spread is None:
        return "–"
    sd = "" if spread.stdev is None else f" ± {100 * spread.stdev:.1f}"
    return f"{100 * spread.mean:.1f}%{sd} ({100 * spread.min:.0f}–{100 * spread.max:.0f})"


def _stop_table(report: ReplayReport) -> str:
    rows = [["none", "–", _pct(report.unsafe_rate), _pct(report.completion_rate), "–", "–", "–"]]
    for t in report.thetas:
        s = t.stop
        if s is None:
            continue
        rows.append(["stop", f"{t.theta:g}", _pct(s.unsafe_rate), _pct(s.completion_rate), str(s.prevented),
                     str(s.cut_short), str(s.completions_lost) if report.runs_with_success else "–"])
    return _table(["enforcement", "θ", "unsafe %", "completion %", "violations prevented",
                   "safe runs cut short", "completions lost"], rows, left=2)


def _calibration_table(report: ReplayReport) -> str:
    rows, classes = [], []
    for name, source in [("model", report)] + [(LABELS[n], b) for n, b in report.baselines.items()]:
        step, run = source.calibration_step, source.calibration_run
        rows.append([_e(name), _num(step.brier if step else None, 4), _num(step.ece if step else None, 4),
                     str(step.n if step else 0), _num(run.brier if run else None, 4),
                     _num(run.ece if run else None, 4), str(run.n if run else 0)])
        classes.append("model" if name == "model" else "")
    return _table(["risk source", "Brier (steps)", "ECE (steps)", "steps scored", "Brier (runs)", "ECE (runs)",
                   "runs scored"], rows, classes=classes)


def _baseline_table(report: ReplayReport) -> str:
    rows, classes = [], []
    sources = [("model", report)] + [(LABELS[n], b) for n, b in report.baselines.items()]
    for t in report.thetas:
        for name, source in sources:
            b = next(x for x in source.thetas if x.theta == t.theta)
            rows.append([f"{t.theta:g}", _e(name), _pct(b.warned_ahead_rate), _pct(b.blocked_at_step_rate),
                         _pct(b.detection_rate), _pct(b.false_alarm_rate),
                         _spread(b.warned_ahead_steps), _pct(b.stop.unsafe_rate if b.stop else None),
                         _pct(b.stop.completion_rate if b.stop else None)])
            classes.append("model" if name == "model" else "")
    return _table(["θ", "risk source", "warned ahead", "blocked at step", "detection", "false alarms",
                   "steps ahead: median [IQR]",
                   "unsafe % with stop", "completion % with stop"], rows, left=2, classes=classes)


def _folds_table(evaluation: EvaluationReport) -> str:
    rows = []
    for f in evaluation.folds:
        t = _middle(f.report)
        pac = f.pac
        worst = pac["worst"]
        worst_text = "–" if worst is None else f"{worst['visits']} of {worst['required'] or '∞'} visits"
        tight = pac.get("tight")
        tight_text = "–" if tight is None else (
            ("yes" if tight["satisfied"] else "no" if tight["runs_factor"] is None
             else f"no (×{tight['runs_factor']:.3g} runs)")
            + ("" if tight["worst_bound"] is None else f", ±{tight['worst_bound']:.3g}"))
        paper_text = "yes" if pac["satisfied"] else "no" if pac.get("runs_factor") is None \
            else f"no (×{pac['runs_factor']:.3g} runs)"
        groups = ", ".join(f.test_groups[:4]) + (f" … (+{len(f.test_groups) - 4})" if len(f.test_groups) > 4 else "")
        rows.append([str(f.index), str(f.train_runs), str(f.test_runs), _e(groups), str(f.states),
                     paper_text, f"{pac['states_satisfied']}/{pac['states']}", worst_text, tight_text,
                     _pct(t.warned_ahead_rate if t else None), _pct(t.detection_rate if t else None),
                     _pct(t.false_alarm_rate if t else None), _num(f.report.brier, 4)])
    theta = _middle(evaluation.pooled)
    at = f" (θ={theta.theta:g})" if theta else ""
    return _table(["fold", "train runs", "test runs", "test groups", "states", "PAC (paper)",
                   "states with enough visits", "worst state", "PAC (tight)", "warned ahead" + at, "detection" + at,
                   "false alarms" + at,
                   "Brier"], rows, left=1)


def _figure(png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img alt="{_e(caption)}" src="data:image/png;base64,{data}">'
            f'<figcaption class="caption">{_e(caption)}</figcaption></figure>')


_CAPTIONS = {
    "curve": "Left: the share of violating runs warned of in time (blue; see the enforcement; dash-dotted under "
             "look-ahead: warned ahead of the violating step only) and of safe runs flagged at all (red), over θ; "
             "dashed: the empirical-frequency baseline; dotted: the reactive rule, "
             "which does not depend on θ. Right: the same as a trade-off, one point per chosen θ.",
    "reliability": "Steps (left) and runs (right, the first step's prediction) grouped by predicted p_unsafe in "
                   "bins of 0.1: a calibrated source lies on the diagonal. Bottom: how many predictions fell in "
                   "each bin (log scale above 10).",
    "advance": "How far ahead of the violation the first alarm came, for the violating runs warned of in time "
               "(0: blocked at the violating step by look-ahead) "
               "(box: quartiles; line: median; diamond: mean; dots: runs).",
    "risk": "One run's p_unsafe at every step; an alarm fires at θ when p_unsafe rises above 1 − θ (dashed lines). "
            "Triangles mark each θ's first alarm, the red line the first violation.",
}

_DEFINITIONS = """<dl>
<dt>Violation</dt><dd>A run's first step where the spec's unsafe condition holds or a monitor is in viol; nothing
after it is replayed.</dd>
<dt>Alarm at θ</dt><dd>A step whose p_safe = 1 − p_unsafe is below θ, or whose abstract state the model never saw
(when the policy acts on unseen states).</dd>
<dt>Enforcement</dt><dd>lookahead (the LangChain middleware, the sidecar's preview): the decision on a step is taken
before it runs, so an alarm on the violating step itself prevents it (advance 0). observe (a guard told of each step
after it happened): only an alarm strictly before the violation is in time. A violation at a run's first step is
never in time.</dd>
<dt>Warned ahead</dt><dd>Violating runs whose first alarm came strictly before the violating step, over all
violating runs: what a reflection or an approval can still act on.</dd>
<dt>Blocked at step</dt><dd>Violating runs whose only alarm in time was on the violating step itself: a look-ahead
block prevents them at the last moment, without foresight (always 0 under observe).</dd>
<dt>Detection rate</dt><dd>Warned ahead plus blocked at step: violating runs with an alarm in time, over all
violating runs.</dd>
<dt>False-alarm rate</dt><dd>Runs that never violate but raised an alarm at any step, over all such runs.</dd>
<dt>Advance warning</dt><dd>Steps (and seconds, when steps carry t) from the first alarm to the violation.</dd>
<dt>Stop at θ</dt><dd>Every run ends at its first alarm: a violation is prevented when the alarm came in time; a
safe run is cut short; a run whose meta.success is true completes only when it raised no alarm (the paper's
Table 3: unsafe % over all runs, completion % over runs with meta.success).</dd>
<dt>Alarm steps / run</dt><dd>Steps that raise an alarm while it can act (see the enforcement): the prompts reflect
would send, or the approvals ask_human would request, had every one been ignored. Offline replay cannot know how an
agent would have reacted to a prompt, so it does not guess outcomes for reflect or ask_human.</dd>
<dt>Brier score, ECE</dt><dd>Per step: each step before the violation with a known risk, its p_unsafe against whether
the run went on to violate (within h steps for a property F&lt;=h). Per run: the first step's p_unsafe against the
run's outcome. ECE: the count-weighted gap between mean prediction and observed frequency over ten bins. Steps of
one run are not independent: the per-run figures are the ones to trust with few runs.</dd>
<dt>Baselines</dt><dd>Empirical frequency: for each product state, the share of its visits (before a violation)
that were followed by a violation in the same run, without any Markov model. Reactive rule: fires when the unsafe
condition (or a monitor's viol) is at most one predicate change away, as a rule-based guard would.</dd>
</dl>"""


def _page(title: str, context: Mapping[str, str], body: str) -> str:
    created = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    meta = " · ".join(f"{_e(k)}: <code>{_e(v)}</code>" for k, v in context.items())
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head>'
            f'<body><main><h1>{_e(title)}</h1><div class="meta">{meta} · forewarn {_e(__version__)} · '
            f'{created}</div>{body}<h2>How these figures are computed</h2>{_DEFINITIONS}</main></body></html>\n')


def _sections(report: ReplayReport, images: Mapping[str, bytes], chosen: RunReplay | None, subject: str,
              notes: Sequence[str], evaluation: EvaluationReport | None = None) -> str:
    parts = [f'<p class="summary">{_summary(report, subject)}</p>']
    parts += [f'<div class="note">{_e(n)}</div>' for n in notes]
    parts.append("<h2>Warnings per threshold</h2>" + _warnings_table(report, evaluation))
    if evaluation is not None:
        parts.append('<p class="caption">Pooled over folds: every run is replayed once, by the model learned '
                     'without it. "Over folds": mean ± standard deviation (range) of the per-fold rates.</p>')
        parts.append("<h2>Folds</h2>" + _folds_table(evaluation))
        parts.append('<p class="caption">PAC (paper): whether every state of the fold\'s model was visited often '
                     'enough for the paper\'s (ε, δ) guarantee (Algorithm 1, line 11), else how many times the '
                     'training runs it needs. PAC (tight): the same guarantee from the tighter per-state bound '
                     '(docs/method.md), with the largest error bound ± on any state\'s risk.</p>')
    parts.append("<h2>What stop would have done</h2>" + _stop_table(report))
    parts.append("<h2>Calibration of p_unsafe</h2>" + _calibration_table(report))
    if report.baselines:
        parts.append("<h2>Against the baselines</h2>" + _baseline_table(report))
    parts.append("<h2>Figures</h2>")
    for name, png in images.items():
        caption = _CAPTIONS.get(name, name)
        if name == "risk" and chosen is not None:
            caption = f"Run {chosen.id}. " + caption
        parts.append(_figure(png, caption))
    return "".join(parts)


def replay_html(report: ReplayReport, images: Mapping[str, bytes], chosen: RunReplay | None, *,
                context: Mapping[str, str], title: str = "Forewarn replay") -> str:
    """The HTML page of a replay (``forewarn replay --report``)."""
    return _page(title, context, _sections(report, images, chosen, "Replayed", report.notes))


def evaluation_html(evaluation: EvaluationReport, images: Mapping[str, bytes], chosen: RunReplay | None, *,
                    context: Mapping[str, str], title: str = "Forewarn evaluation") -> str:
    """The HTML page of a cross-validation (``forewarn evaluate --report``)."""
    subject = (f"{len(evaluation.folds)}-fold cross-validation"
               + (f" grouped by {evaluation.group_by}" if evaluation.group_by else "") + " over")
    middle = _middle(evaluation.pooled)
    notes = list(evaluation.notes)
    if middle is not None:
        notes.append(f"Spread over folds at θ = {middle.theta:g}: warned ahead "
                     f"{_mean_sd(evaluation.over_folds(middle.theta, 'warned_ahead_rate'))}, detection "
                     f"{_mean_sd(evaluation.over_folds(middle.theta, 'detection_rate'))}, false alarms "
                     f"{_mean_sd(evaluation.over_folds(middle.theta, 'false_alarm_rate'))} "
                     "(mean ± standard deviation, range).")
    return _page(title, context, _sections(evaluation.pooled, images, chosen, subject, notes, evaluation))
