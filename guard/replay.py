"""Offline replay: how early, how reliably and how well calibrated a model would have warned.

An alarm at threshold θ is a step whose p_safe is below θ (or an unseen abstract state,
when the policy acts on those). When a violating run counts as detected depends on the
enforcement (:class:`Enforcement`): with ``lookahead`` — the LangChain middleware, the
sidecar's ``preview`` — the decision on a step is taken before the step runs, so an
alarm on the violating step itself prevents it (advance 0 steps); with ``observe`` — a
guard told of each step after it happened — only an alarm strictly before the violation
counts. Either way a violation at a run's first step cannot be prevented, and a run
that never violates and raised any alarm is a false alarm.

Detection is reported in two parts that are different promises: **warned ahead** (the
first alarm came strictly before the violating step: a reflection or an approval could
still steer the run) and **blocked at the step** (the only alarm in time was on the
violating step itself, so only a look-ahead block prevents it; always 0 under
``observe``). ``detection_rate`` is their sum. A run's first violation is the first step whose decision has
``unsafe_now`` (the spec's unsafe condition holds or a monitor is in ``viol``); nothing
after it is replayed.

Besides the figures of the paper's Table 1 (advance warning) this module tells what
``stop`` at θ would have done to the logged runs (Table 3: violations prevented, runs cut
short, task completion when runs carry ``meta.success``) and how well ``p_unsafe`` is
calibrated against what happened, per step and per run. :func:`summarize` works on any
per-step risk, so the baselines of :mod:`guard.evaluation.baselines` are scored by the
same code as the model.
"""
from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from .calibration import Calibration, calibrate
from .runtime import Guard
from .spec import Action, Trigger
from .thresholds import supported_increase
from .traces import Run, abstract_run

if TYPE_CHECKING:
    from .bundle_guard import BundleGuard

__all__ = ["Enforcement", "RunReplay", "Spread", "StopOutcome", "ThetaReport", "ReplayReport", "replay_run", "replay",
           "summarize", "rate_curve", "horizon_of"]

MonitorStates = tuple[int, ...]


class Enforcement(str, Enum):
    """When a guard's decision on a step is taken: before the step runs, or after."""

    LOOKAHEAD = "lookahead"  # the middleware, the sidecar's preview: the violating step can be prevented
    OBSERVE = "observe"  # observe only: an alarm must come strictly before the violation


@dataclass(frozen=True)
class RunReplay:
    """One run seen through a risk source (the model or a baseline).

    Attributes:
        p_unsafe: risk per replayed step; ``None`` where the abstract state was never seen.
        violation: index of the first unsafe step, or ``None`` for a safe run.
        times: each replayed step's ``t`` (``None`` where the log has none).
        meta: the run's ``meta`` (``success`` there marks task success).
        length: the number of steps of the logged run (replay stops at the violation).
        abstract, monitor_states: the product state of every replayed step.
        start_risk: the risk a run has before its first step (the source's starting risk),
            what the increase trigger compares the first step with.
        quiet: steps the increase trigger lets pass — they do not raise the risk over the
            last known step's (the start's, for the first) by more than ``min_increase`` —
            and that therefore raise no alarm at any θ (set by :meth:`under_trigger`).
    """

    id: str
    p_unsafe: list[float | None]
    violation: int | None
    times: list[float | None]
    meta: dict[str, Any] = field(default_factory=dict)
    length: int | None = None
    abstract: tuple[int, ...] = ()
    monitor_states: tuple[MonitorStates, ...] = ()
    start_risk: float | None = None
    quiet: frozenset[int] = frozenset()
    ci_low: tuple[float | None, ...] = ()  # per step, the lower end of p_unsafe's interval (when the model has them)
    member: str | None = None  # the bundle member that replayed it (None: a single model, or the pooled one)

    @property
    def unsafe(self) -> bool:
        return self.violation is not None

    @property
    def success(self) -> bool | None:
        """``meta.success`` when the log gives it as a boolean."""
        value = self.meta.get("success")
        return value if isinstance(value, bool) else None

    def _alarms(self, i: int, theta: float, unseen_alarms: bool) -> bool:
        p = self.p_unsafe[i]
        return i not in self.quiet and ((p is None and unseen_alarms) or (p is not None and 1.0 - p < theta))

    def under_trigger(self, min_increase: float | None, *, acts_on_start: bool = True) -> RunReplay:
        """The run as a trigger sees it: ``None`` the level trigger (every step may alarm), else
        the increase trigger with that ``min_increase``. The violation and unseen steps always may.
        ``acts_on_start=False``: the run's first state (before any call) never alarms — a look-ahead
        judges calls, and no call leads there (the LangChain middleware, the MCP proxy)."""
        quiet: set[int] = set() if acts_on_start or self.violation == 0 else {0}
        if min_increase is not None:
            base = self.start_risk
            for i, p in enumerate(self.p_unsafe):
                if p is None:
                    continue
                low = self.ci_low[i] if i < len(self.ci_low) else None
                if i != self.violation and base is not None and not supported_increase(base, p, low, min_increase):
                    quiet.add(i)
                base = p
        return self if frozenset(quiet) == self.quiet else replace(self, quiet=frozenset(quiet))

    def acting_end(self, lookahead: bool = True) -> int:
        """One past the last step whose alarm can still act: the violation itself under look-ahead
        (unless it is the first step, which no decision precedes), strictly before it otherwise."""
        if self.violation is None:
            return len(self.p_unsafe)
        return self.violation + 1 if lookahead and self.violation > 0 else self.violation

    def first_alarm(self, theta: float, unseen_alarms: bool) -> int | None:
        last = self.violation if self.violation is not None else len(self.p_unsafe) - 1
        for i in range(last + 1):
            if self._alarms(i, theta, unseen_alarms):
                return i
        return None

    def alarm_steps(self, theta: float, unseen_alarms: bool, lookahead: bool = True) -> int:
        """Steps that raise an alarm while it can still act (see :meth:`acting_end`): the prompts
        ``reflect`` would send, or the approvals ``ask_human`` would request, were every one ignored."""
        end = self.acting_end(lookahead)
        return sum(self._alarms(i, theta, unseen_alarms) for i in range(end))

    def min_p_safe(self, unseen_alarms: bool, lookahead: bool = True) -> float:
        """The lowest p_safe an alarm that can still act could fire on (over the whole of a safe run).

        ``-inf`` when an unseen state alarms there; ``inf`` when no step is scored.
        """
        end = self.acting_end(lookahead)
        low = float("inf")
        for i, p in enumerate(self.p_unsafe[:end]):
            if i in self.quiet:
                continue
            if p is None:
                if unseen_alarms:
                    return float("-inf")
            elif 1.0 - p < low:
                low = 1.0 - p
        return low


@dataclass(frozen=True)
class Spread:
    """Distribution of a list of numbers: count, mean, median, stdev, quartiles, range."""

    n: int
    mean: float
    median: float
    stdev: float | None
    q1: float
    q3: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        if not values:
            return None
        if len(values) == 1:
            v = float(values[0])
            return cls(1, v, v, None, v, v, v, v)
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        return cls(len(values), statistics.fmean(values), float(statistics.median(values)),
                   statistics.stdev(values), q1, q3, float(min(values)), float(max(values)))


@dataclass(frozen=True)
class StopOutcome:
    """What ``stop`` at θ would have done: end every run at its first alarm.

    ``unsafe_rate`` and ``completion_rate`` are the paper's Table 3 columns (over all
    runs, and over the runs whose ``meta.success`` is a boolean).
    """

    prevented: int  # violations with an alarm in time (on the violating step itself under look-ahead)
    still_unsafe: int
    cut_short: int  # safe runs stopped: they would have finished without a violation
    completions_lost: int  # runs that completed their task and would have been stopped
    unsafe_rate: float | None
    completion_rate: float | None


@dataclass(frozen=True)
class ThetaReport:
    theta: float
    n_unsafe: int
    n_safe: int
    detected: int
    false_alarms: int
    detection_rate: float | None
    false_alarm_rate: float | None
    mean_advance_steps: float | None
    median_advance_steps: float | None
    mean_advance_seconds: float | None
    median_advance_seconds: float | None
    advance_steps: Spread | None = None
    advance_seconds: Spread | None = None
    unsafe_at_start: int = 0  # violations at the first step: no replay can warn of them
    stop: StopOutcome | None = None
    prompts_per_run: float | None = None  # alarm steps per run (reflect prompts / approvals)
    prompts_per_safe_run: float | None = None
    # detected = warned_ahead + blocked_at_step (see the module's doc)
    warned_ahead: int = 0  # first alarm strictly before the violating step
    blocked_at_step: int = 0  # first alarm on the violating step itself (look-ahead only)
    warned_ahead_rate: float | None = None
    blocked_at_step_rate: float | None = None
    warned_ahead_steps: Spread | None = None  # the advance over the runs warned ahead (every one ≥ 1)


@dataclass(frozen=True)
class ReplayReport:
    """Figures of one replay. ``brier`` is the per-step Brier score (the contract's)."""

    runs: int
    steps: int
    unseen_steps: int
    brier: float | None
    thetas: list[ThetaReport] = field(default_factory=list)
    calibration_step: Calibration | None = None
    calibration_run: Calibration | None = None
    unsafe_rate: float | None = None  # runs that violate, unguarded
    runs_with_success: int = 0
    completion_rate: float | None = None  # runs that complete their task, unguarded
    horizon: int | None = None  # outcomes are "violation within h steps" for F<=h properties
    unseen_alarms: bool = True
    enforcement: Enforcement = Enforcement.LOOKAHEAD
    min_increase: float | None = None  # None: the level trigger; else the increase trigger's min_increase
    baselines: dict[str, ReplayReport] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    replays: list[RunReplay] = field(default_factory=list, repr=False, compare=False)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "runs": self.runs, "steps": self.steps, "unseen_steps": self.unseen_steps, "brier": self.brier,
            "thetas": [asdict(t) for t in self.thetas],
            "calibration": {"step": None if self.calibration_step is None else self.calibration_step.to_dict(),
                            "run": None if self.calibration_run is None else self.calibration_run.to_dict()},
            "unsafe_rate": self.unsafe_rate, "runs_with_success": self.runs_with_success,
            "completion_rate": self.completion_rate, "horizon": self.horizon,
            "enforcement": self.enforcement.value, "trigger": self.trigger, "min_increase": self.min_increase,
            "notes": list(self.notes)}
        if self.baselines:
            out["baselines"] = {name: b.to_dict() for name, b in self.baselines.items()}
        return out

    @property
    def trigger(self) -> str:
        return Trigger.LEVEL.value if self.min_increase is None else Trigger.INCREASE.value

    def theta_entries(self) -> list[dict[str, object]]:
        """``replay --format json``: one object per θ with the contract's keys, and more."""
        step, run = self.calibration_step, self.calibration_run
        entries = []
        for t in self.thetas:
            entry: dict[str, object] = {**asdict(t), "enforcement": self.enforcement.value, "trigger": self.trigger,
                                        "brier": self.brier,
                                        "ece": None if step is None else step.ece,
                                        "brier_run": None if run is None else run.brier,
                                        "ece_run": None if run is None else run.ece}
            if self.baselines:
                entry["baselines"] = {name: _baseline_entry(b, t.theta) for name, b in self.baselines.items()}
            entries.append(entry)
        return entries


def _baseline_entry(report: ReplayReport, theta: float) -> dict[str, object]:
    t = next(x for x in report.thetas if x.theta == theta)
    return {"detection_rate": t.detection_rate, "warned_ahead_rate": t.warned_ahead_rate,
            "blocked_at_step_rate": t.blocked_at_step_rate, "false_alarm_rate": t.false_alarm_rate,
            "mean_advance_steps": t.mean_advance_steps, "mean_advance_seconds": t.mean_advance_seconds,
            "brier": report.brier, "ece": None if report.calibration_step is None else report.calibration_step.ece}


_BOUNDED = re.compile(r'^\s*P\s*=\s*\?\s*\[\s*F\s*<=\s*(\d+)\s*"unsafe"\s*\]\s*$')


def horizon_of(formula: str) -> int | None:
    """``h`` for a query ``P=? [F<=h "unsafe"]``, else ``None`` (outcome: the run violates at all)."""
    match = _BOUNDED.match(formula)
    return int(match.group(1)) if match else None


def replay_run(guard: Guard | BundleGuard, run: Run) -> RunReplay:
    """Risk at every step of a run, up to and including its first violation.

    A bundle replays the run on the member its ``meta`` picks, as a session would.
    """
    guard = guard.for_metadata(run.meta)
    risks: list[float | None] = []
    lows: list[float | None] = []
    abstract: list[int] = []
    monitor_states: list[MonitorStates] = []
    violation = None
    q = None
    belief = None  # learning.kinds: the posterior over kinds, as a session keeps it
    for i, (bits, step) in enumerate(zip(abstract_run(run, guard.predicates), run.steps)):
        action = step.get("action")
        q = guard.first_monitor_states(bits, action) if q is None else guard.next_monitor_states(q, bits, action)
        belief = guard.believe(belief, bits, q)
        decision = guard.decide_product(bits, q, belief=belief)
        risks.append(decision.p_unsafe)
        lows.append(decision.ci_low)
        abstract.append(bits)
        monitor_states.append(q[:len(guard.monitors)])  # the monitors' alone (learning.memory rides after them)
        if decision.unsafe_now:
            violation = i
            break
    return RunReplay(run.id, risks, violation, run.times()[:len(risks)], meta=run.meta, length=len(run.steps),
                     abstract=tuple(abstract), monitor_states=tuple(monitor_states),
                     start_risk=max(guard.start_risk),  # decisions report the property most at risk
                     ci_low=tuple(lows), member=guard.member)


def replay(guard: Guard | BundleGuard, runs: Iterable[Run], thetas: Sequence[float], *,
           enforcement: Enforcement | str = Enforcement.LOOKAHEAD, trigger: Trigger | str | None = None,
           on_run: Callable[[int], None] | None = None) -> ReplayReport:
    """Replay runs through a guard and summarise per threshold.

    Args:
        guard: the model under its policy (the policy's ``unseen_state`` decides whether
            a state the model never saw raises an alarm).
        runs: runs in the contract's format (consumed once).
        thetas: thresholds on p_safe.
        enforcement: ``lookahead`` (the middleware's) or ``observe``; see the module's doc.
        trigger: ``level`` or ``increase`` (with the policy's ``min_increase``); by default the
            policy's trigger, else ``level``.
        on_run: called with the number of runs replayed so far (progress bars).
    """
    replays = []
    for n, run in enumerate(runs, start=1):
        replays.append(replay_run(guard, run))
        if on_run is not None:
            on_run(n)
    return summarize(replays, thetas, unseen_alarms=guard.policy.unseen_state is not Action.ALLOW,
                     horizon=horizon_of(guard.property), enforcement=enforcement,
                     min_increase=min_increase_of(trigger or guard.policy.trigger, guard.policy.min_increase))


def min_increase_of(trigger: Trigger | str | None, min_increase: float) -> float | None:
    """``summarize``'s ``min_increase`` for a trigger: None for level (and unset), the value for increase."""
    return min_increase if trigger is not None and Trigger(trigger) is Trigger.INCREASE else None


def _rate(count: int, total: int) -> float | None:
    return count / total if total else None


def _outcome(r: RunReplay, i: int, horizon: int | None) -> bool:
    return r.violation is not None and (horizon is None or r.violation - i <= horizon)


def summarize(replays: Sequence[RunReplay], thetas: Sequence[float], *, unseen_alarms: bool,
              horizon: int | None = None, enforcement: Enforcement | str = Enforcement.LOOKAHEAD,
              min_increase: float | None = None) -> ReplayReport:
    """The per-θ figures and the calibration of replayed runs (any risk source).

    Calibration scores every step strictly before a run's first violation (the
    violating step predicts nothing) whose risk is known, against whether the run goes
    on to violate (within ``horizon`` steps when the property is ``F<=horizon``); per
    run, the first step's risk against the run's outcome. ``min_increase``: None scores the
    level trigger, a number the increase trigger (see :meth:`RunReplay.under_trigger`). Under
    ``lookahead`` enforcement a run's first state raises no alarm: the look-ahead judges calls,
    and no call leads there (so the middleware never acts on it).
    """
    mode = Enforcement(enforcement)
    lookahead = mode is Enforcement.LOOKAHEAD
    replays = [r.under_trigger(min_increase, acts_on_start=not lookahead) for r in replays]
    steps = sum(len(r.p_unsafe) for r in replays)
    unseen = 0
    step_pairs: list[tuple[float, bool]] = []
    run_pairs: list[tuple[float, bool]] = []
    for r in replays:
        horizon_end = r.violation if r.violation is not None else len(r.p_unsafe)
        for i, p in enumerate(r.p_unsafe[:horizon_end]):
            if p is None:
                unseen += 1
            else:
                step_pairs.append((p, _outcome(r, i, horizon)))
        if horizon_end > 0 and r.p_unsafe[0] is not None:
            run_pairs.append((r.p_unsafe[0], _outcome(r, 0, horizon)))
    by_step, by_run = calibrate(step_pairs), calibrate(run_pairs)
    n_unsafe = sum(r.unsafe for r in replays)
    n_safe = len(replays) - n_unsafe
    with_success = [r for r in replays if r.success is not None]
    completed = sum(bool(r.success) for r in with_success)
    reports = [_theta_report(replays, theta, unseen_alarms, n_unsafe, n_safe, with_success, lookahead)
               for theta in thetas]
    return ReplayReport(runs=len(replays), steps=steps, unseen_steps=unseen, brier=by_step.brier, thetas=reports,
                        calibration_step=by_step, calibration_run=by_run,
                        unsafe_rate=_rate(n_unsafe, len(replays)), runs_with_success=len(with_success),
                        completion_rate=_rate(completed, len(with_success)), horizon=horizon,
                        unseen_alarms=unseen_alarms, enforcement=mode, min_increase=min_increase,
                        replays=replays)


def _theta_report(replays: Sequence[RunReplay], theta: float, unseen_alarms: bool, n_unsafe: int, n_safe: int,
                  with_success: Sequence[RunReplay], lookahead: bool) -> ThetaReport:
    advance_steps: list[float] = []
    advance_seconds: list[float] = []
    false_alarms = at_start = 0
    prompts = safe_prompts = 0
    for r in replays:
        alarm = r.first_alarm(theta, unseen_alarms)
        count = r.alarm_steps(theta, unseen_alarms, lookahead)
        prompts += count
        if r.violation is None:
            false_alarms += alarm is not None
            safe_prompts += count
        else:
            at_start += r.violation == 0
            if alarm is not None and alarm < r.acting_end(lookahead):
                advance_steps.append(r.violation - alarm)
                t_alarm, t_violation = r.times[alarm], r.times[r.violation]
                if t_alarm is not None and t_violation is not None:
                    advance_seconds.append(t_violation - t_alarm)
    detected = len(advance_steps)
    ahead = [a for a in advance_steps if a > 0]
    completions_kept = sum(bool(r.success) and r.first_alarm(theta, unseen_alarms) is None for r in with_success)
    completions = sum(bool(r.success) for r in with_success)
    stop = StopOutcome(prevented=detected, still_unsafe=n_unsafe - detected, cut_short=false_alarms,
                       completions_lost=completions - completions_kept,
                       unsafe_rate=_rate(n_unsafe - detected, len(replays)),
                       completion_rate=_rate(completions_kept, len(with_success)))
    steps_spread, seconds_spread = Spread.of(advance_steps), Spread.of(advance_seconds)
    return ThetaReport(
        theta=theta, n_unsafe=n_unsafe, n_safe=n_safe, detected=detected, false_alarms=false_alarms,
        detection_rate=_rate(detected, n_unsafe), false_alarm_rate=_rate(false_alarms, n_safe),
        mean_advance_steps=None if steps_spread is None else steps_spread.mean,
        median_advance_steps=None if steps_spread is None else steps_spread.median,
        mean_advance_seconds=None if seconds_spread is None else seconds_spread.mean,
        median_advance_seconds=None if seconds_spread is None else seconds_spread.median,
        advance_steps=steps_spread, advance_seconds=seconds_spread, unsafe_at_start=at_start, stop=stop,
        prompts_per_run=_rate(prompts, len(replays)), prompts_per_safe_run=_rate(safe_prompts, n_safe),
        warned_ahead=len(ahead), blocked_at_step=detected - len(ahead),
        warned_ahead_rate=_rate(len(ahead), n_unsafe), blocked_at_step_rate=_rate(detected - len(ahead), n_unsafe),
        warned_ahead_steps=Spread.of(ahead))


def rate_curve(replays: Sequence[RunReplay], thetas: Sequence[float] | NDArray[np.float64], *,
               unseen_alarms: bool, lookahead: bool = True) -> tuple[list[float | None], list[float | None]]:
    """Detection and false-alarm rates at many thresholds at once (for curves).

    A run is flagged at θ exactly when its lowest p_safe before the violation (over the
    whole run when it is safe) is below θ, so one sort per kind of run gives every θ.
    """
    unsafe = np.sort([r.min_p_safe(unseen_alarms, lookahead) for r in replays if r.unsafe])
    safe = np.sort([r.min_p_safe(unseen_alarms, lookahead) for r in replays if not r.unsafe])
    grid = np.asarray(thetas, dtype=float)
    detection = np.searchsorted(unsafe, grid, side="left") / len(unsafe) if len(unsafe) else None
    false_alarm = np.searchsorted(safe, grid, side="left") / len(safe) if len(safe) else None
    return ([None] * len(grid) if detection is None else detection.tolist(),
            [None] * len(grid) if false_alarm is None else false_alarm.tolist())
