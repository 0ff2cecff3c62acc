"""Baselines scored next to the model, so that its value shows (or does not).

* :class:`EmpiricalFrequency` — no Markov model: the risk of a product state is the
  fraction of its visits (before a violation) in the training runs that were followed
  by a violation in the same run. It needs no independence assumption but cannot
  generalise: a state seen once in a violating run gets risk 1, a state never seen is
  unseen.
* :class:`OneChangeRule` — what a rule-based guard does: fire when the unsafe condition
  (or a monitor's ``viol``) is at most one predicate change away from the current
  state. Its "risk" is 0 or 1, so it alarms at every θ in (0, 1] alike.

Beside a bundle the empirical frequencies are counted per member, on the runs of that
member's group (and over all runs for the runs the pooled model decides), as the bundle's
models were learned: a per-group model is compared with per-group counting, never with
a pooled count that saw other tasks.

Both turn a :class:`~guard.replay.RunReplay` (which records the product state of every
step) into another one with their own risks, and :func:`guard.replay.summarize` scores
them exactly as it scores the model.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from ...monitors.base import VIOL, Monitor
from ..predicates import PredicateSet
from ..replay import Enforcement, ReplayReport, RunReplay, summarize
from ..traces import Run, abstract_run

__all__ = ["EMPIRICAL", "ONE_CHANGE", "LABELS", "EmpiricalFrequency", "OneChangeRule", "trace_run",
           "score_baselines"]

EMPIRICAL = "empirical_frequency"
ONE_CHANGE = "one_change_rule"
LABELS = {EMPIRICAL: "empirical frequency (no Markov model)",
          ONE_CHANGE: "reactive rule (unsafe one predicate change away)"}

Key = tuple[int, tuple[int, ...]]


def trace_run(run: Run, predicates: PredicateSet, monitors: Sequence[Monitor]) -> RunReplay:
    """A run's product states up to its first violation, without any risk (``p_unsafe`` all None)."""
    abstract: list[int] = []
    states: list[tuple[int, ...]] = []
    violation = None
    q: tuple[int, ...] | None = None
    for i, bits in enumerate(abstract_run(run, predicates)):
        q = tuple(m.step(m.initial if q is None else q[k], bits) for k, m in enumerate(monitors))
        abstract.append(bits)
        states.append(q)
        if predicates.is_unsafe(bits) or VIOL in q:
            violation = i
            break
    n = len(abstract)
    return RunReplay(run.id, [None] * n, violation, run.times()[:n], meta=run.meta, length=len(run.steps),
                     abstract=tuple(abstract), monitor_states=tuple(states))


def _visits(r: RunReplay) -> tuple[Counter[Key], Counter[Key]]:
    end = r.violation if r.violation is not None else len(r.abstract)
    seen: Counter[Key] = Counter(zip(r.abstract[:end], r.monitor_states[:end]))
    followed = seen.copy() if r.unsafe else Counter()
    return seen, followed


class EmpiricalFrequency:
    """Per product state: visits followed by a violation in the same run / all visits."""

    def __init__(self) -> None:
        self.visits: Counter[Key] = Counter()
        self.unsafe_visits: Counter[Key] = Counter()
        self.runs = self.unsafe_runs = 0  # a run's risk before its first step: the share that violate

    def fit(self, runs: Iterable[RunReplay]) -> EmpiricalFrequency:
        for r in runs:
            seen, followed = _visits(r)
            self.visits.update(seen)
            self.unsafe_visits.update(followed)
            self.runs += 1
            self.unsafe_runs += r.unsafe
        return self

    def score(self, r: RunReplay, *, leave_out: bool = False) -> RunReplay:
        """``r`` with this baseline's risks; ``leave_out`` first removes ``r``'s own visits
        (for scoring the runs the baseline was fitted on)."""
        own, own_unsafe = _visits(r) if leave_out else (Counter(), Counter())
        risks: list[float | None] = []
        for i, key in enumerate(zip(r.abstract, r.monitor_states)):
            if i == r.violation:
                risks.append(1.0)
                continue
            n = self.visits[key] - own[key]
            risks.append((self.unsafe_visits[key] - own_unsafe[key]) / n if n > 0 else None)
        runs = self.runs - leave_out
        start = (self.unsafe_runs - (leave_out and r.unsafe)) / runs if runs > 0 else None
        return replace(r, p_unsafe=risks, start_risk=start, quiet=frozenset())


class OneChangeRule:
    """Fires when flipping at most one predicate makes the state unsafe (or a monitor violated)."""

    def __init__(self, predicates: PredicateSet, monitors: Sequence[Monitor]) -> None:
        self.predicates = predicates
        self.monitors = list(monitors)
        self._memo: dict[Key, bool] = {}

    def fires(self, bits: int, q: tuple[int, ...]) -> bool:
        key = (bits, q)
        cached = self._memo.get(key)
        if cached is None:
            cached = self._memo[key] = any(
                self.predicates.is_unsafe(nb) or any(m.step(qk, nb) == VIOL for m, qk in zip(self.monitors, q))
                for nb in [bits] + [bits ^ (1 << b) for b in range(self.predicates.width)])
        return cached

    def score(self, r: RunReplay) -> RunReplay:
        risks: list[float | None] = [
            1.0 if i == r.violation or self.fires(bits, q) else 0.0
            for i, (bits, q) in enumerate(zip(r.abstract, r.monitor_states))]
        return replace(r, p_unsafe=risks, start_risk=0.0, quiet=frozenset())


def score_baselines(replays: Sequence[RunReplay], thetas: Sequence[float], *, predicates: PredicateSet,
                    monitors: Sequence[Monitor], train: Sequence[RunReplay] | None = None,
                    unseen_alarms: bool = True, horizon: int | None = None,
                    enforcement: Enforcement | str = Enforcement.LOOKAHEAD,
                    min_increase: float | None = None,
                    member_of: Callable[[RunReplay], str | None] | None = None) -> dict[str, ReplayReport]:
    """Both baselines on the replayed runs, summarised like the model.

    Args:
        replays: the model's replays (they carry each step's product state).
        train: runs to fit the empirical frequencies on; when None they are fitted on
            ``replays`` themselves, leaving each run out of its own scoring.
        unseen_alarms: whether a state without data raises an alarm (as the model's policy).
        min_increase: None for the level trigger, else the increase trigger's (each baseline is
            compared with its own starting risk: the share of violating runs, or 0 for the rule).
        member_of: beside a bundle, the member deciding a run (``None``: the pooled model); the
            empirical frequencies are then fitted per member on that member's runs.
    """
    fitted_on = replays if train is None else train
    pooled = EmpiricalFrequency().fit(fitted_on)
    members: dict[str, EmpiricalFrequency] = {}
    if member_of is not None:
        by_member: dict[str, list[RunReplay]] = {}
        for r in fitted_on:
            key = member_of(r)
            if key is not None:
                by_member.setdefault(key, []).append(r)
        members = {key: EmpiricalFrequency().fit(runs) for key, runs in by_member.items()}

    def counted(r: RunReplay) -> EmpiricalFrequency:
        key = None if member_of is None else member_of(r)
        return pooled if key is None else members.get(key, pooled)

    rule = OneChangeRule(predicates, monitors)
    scored_empirical = [counted(r).score(r, leave_out=train is None) for r in replays]
    scored_rule = [rule.score(r) for r in replays]
    return {
        EMPIRICAL: summarize(scored_empirical, thetas, unseen_alarms=unseen_alarms, horizon=horizon,
                             enforcement=enforcement, min_increase=min_increase),
        ONE_CHANGE: summarize(scored_rule, thetas, unseen_alarms=unseen_alarms, horizon=horizon,
                              enforcement=enforcement, min_increase=min_increase),
    }
