"""Offline replay: how early and how reliably a model would have warned on logged runs.

An alarm at threshold θ is a step whose p_safe is below θ (or an unseen abstract state,
when the policy acts on those). A violating run counts as detected only when an alarm
came strictly before its first violation; a run that never violates and raised any
alarm is a false alarm.
"""
from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from guard.runtime import Guard
from guard.spec import Action
from guard.traces import Run, abstract_run

__all__ = ["RunReplay", "ThetaReport", "ReplayReport", "replay_run", "replay"]


@dataclass(frozen=True)
class RunReplay:
    """One run seen through the model: per-step risk, first violation, times."""

    id: str
    p_unsafe: list[float | None]  # None where the abstract state was never seen
    violation: int | None  # index of the first unsafe step
    times: list[float | None]

    @property
    def unsafe(self) -> bool:
        return self.violation is not None

    def first_alarm(self, theta: float, unseen_alarms: bool) -> int | None:
        last = self.violation if self.violation is not None else len(self.p_unsafe) - 1
        for i in range(last + 1):
            p = self.p_unsafe[i]
            if (p is None and unseen_alarms) or (p is not None and 1.0 - p < theta):
                return i
        return None


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


@dataclass(frozen=True)
class ReplayReport:
    runs: int
    steps: int
    unseen_steps: int
    brier: float | None
    thetas: list[ThetaReport] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"runs": self.runs, "steps": self.steps, "unseen_steps": self.unseen_steps, "brier": self.brier,
                "thetas": [asdict(t) for t in self.thetas]}


def replay_run(guard: Guard, run: Run) -> RunReplay:
    """Risk at every step of a run, up to and including its first violation."""
    risks: list[float | None] = []
    violation = None
    q = None
    for i, bits in enumerate(abstract_run(run, guard.predicates)):
        q = guard.first_monitor_states(bits) if q is None else guard.next_monitor_states(q, bits)
        decision = guard.decide_product(bits, q)
        risks.append(decision.p_unsafe)
        if decision.unsafe_now:
            violation = i
            break
    return RunReplay(run.id, risks, violation, run.times()[:len(risks)])


def replay(guard: Guard, runs: Iterable[Run], thetas: Sequence[float]) -> ReplayReport:
    """Replay runs through a guard and summarise per threshold."""
    replays = [replay_run(guard, run) for run in runs]
    unseen_alarms = guard.policy.unseen_state is not Action.ALLOW
    squared, scored, unseen, steps = 0.0, 0, 0, 0
    for r in replays:
        outcome = 1.0 if r.unsafe else 0.0
        horizon = r.violation if r.violation is not None else len(r.p_unsafe)
        steps += len(r.p_unsafe)
        for p in r.p_unsafe[:horizon]:  # the violating step itself predicts nothing
            if p is None:
                unseen += 1
            else:
                squared += (p - outcome) ** 2
                scored += 1
    reports = []
    n_unsafe = sum(r.unsafe for r in replays)
    n_safe = len(replays) - n_unsafe
    for theta in thetas:
        advance_steps: list[float] = []
        advance_seconds: list[float] = []
        false_alarms = 0
        for r in replays:
            alarm = r.first_alarm(theta, unseen_alarms)
            if r.violation is None:
                false_alarms += alarm is not None
            elif alarm is not None and alarm < r.violation:
                advance_steps.append(r.violation - alarm)
                t_alarm, t_violation = r.times[alarm], r.times[r.violation]
                if t_alarm is not None and t_violation is not None:
                    advance_seconds.append(t_violation - t_alarm)
        reports.append(ThetaReport(
            theta=theta, n_unsafe=n_unsafe, n_safe=n_safe, detected=len(advance_steps), false_alarms=false_alarms,
            detection_rate=len(advance_steps) / n_unsafe if n_unsafe else None,
            false_alarm_rate=false_alarms / n_safe if n_safe else None,
            mean_advance_steps=statistics.fmean(advance_steps) if advance_steps else None,
            median_advance_steps=statistics.median(advance_steps) if advance_steps else None,
            mean_advance_seconds=statistics.fmean(advance_seconds) if advance_seconds else None,
            median_advance_seconds=statistics.median(advance_seconds) if advance_seconds else None,
        ))
    return ReplayReport(runs=len(replays), steps=steps, unseen_steps=unseen,
                        brier=squared / scored if scored else None, thetas=reports)
