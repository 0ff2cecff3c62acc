"""Held-out scoring of an abstraction by counting, vectorised over steps and folds.

The search asks one question thousands of times: *if the abstract state also told this
bit, how much better would held-out runs be predicted?* Learning and checking a chain
per question would take minutes each, so the search scores by counting, the way the
per-state frequency baseline of ``forewarn evaluate`` does, and leaves the real learner
for the final spec.

For a step of a run in test fold f, its state's risk is learned from the other folds'
steps: ``(u + s·r) / (n + s)``, where n is how many training steps visited the state, u
how many of those belonged to a run that went on to violate, and r the risk the
abstraction had *before* this bit was added (for the user's own abstraction: the
training runs' overall rate). Each added bit therefore refines the previous estimate and
backs off to it where its states are rare (s = :data:`PRIOR` pseudo-visits). All folds
come from one ``bincount`` over ``fold · states + state``: the training counts are the
totals minus the fold's own.

The score of an abstraction (lower is better)::

    J = Brier / Brier₀  −  detection at the target false-alarm rate  +  λ · rare

* Brier: mean of (risk − outcome)² over the held-out steps before each run's violation,
  relative to the user's abstraction's (Brier₀);
* detection: share of violating runs whose highest risk before the violation exceeds
  the threshold that flags at most the target share of safe runs (with a detection
  target, the false-alarm rate at that detection is added instead);
* rare: share of held-out steps in states with fewer than ``min_visits`` training
  visits — the visit penalty, which keeps states visited often enough for their
  intervals to mean something.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

PRIOR = 4.0  # pseudo-visits of the previous estimate in a refined state


@dataclass(frozen=True)
class Score:
    """An abstraction's held-out figures; ``risk`` is each scored step's held-out risk."""

    brier: float
    detection: float  # at the target false-alarm rate (or: false alarms at the target detection)
    false_alarms: float
    rare: float
    objective: float
    risk: NDArray[np.float64]
    states: int


class HeldOut:
    """Counting-based held-out scorer over the scored steps of a set of runs.

    Args:
        run_of: each scored step's run (runs in order, a run's steps contiguous).
        fold_of_run: each run's test fold, 0..folds-1.
        unsafe_run: whether each run violates.
        metric, target: ``false-alarms`` X (maximise detection at ≤ X false alarms) or
            ``detection`` Y (minimise false alarms at ≥ Y detection).
        min_visits, penalty: the visit penalty's threshold and weight λ.
    """

    def __init__(self, run_of: NDArray[np.int64], fold_of_run: NDArray[np.int64], unsafe_run: NDArray[np.bool_],
                 *, metric: Literal["false-alarms", "detection"], target: float, min_visits: int,
                 penalty: float, group_of_run: NDArray[np.int64] | None = None) -> None:
        self.run_of = run_of
        self.folds = int(fold_of_run.max()) + 1 if len(fold_of_run) else 1
        self.fold = fold_of_run[run_of]
        self.y = unsafe_run[run_of].astype(np.float64)
        self.unsafe_run = unsafe_run
        self.metric = metric
        self.target = target
        self.min_visits = min_visits
        self.penalty = penalty
        runs = len(unsafe_run)
        # runs with scored steps, and where each one's steps start (for the per-run maximum)
        present = np.zeros(runs, dtype=np.bool_)
        present[run_of] = True
        self.present = np.flatnonzero(present)
        self.starts = np.searchsorted(run_of, self.present)
        self.n_unsafe = int(unsafe_run.sum())  # a run violating at its first step counts, undetectable
        self.n_safe = runs - self.n_unsafe
        # the training runs' overall step rate, per fold: the first estimate backs off to it
        n_f = np.bincount(self.fold, minlength=self.folds).astype(np.float64)
        u_f = np.bincount(self.fold, weights=self.y, minlength=self.folds)
        base = (u_f.sum() - u_f) / np.maximum(n_f.sum() - n_f, 1.0)
        self.start_risk = base[self.fold]
        self.base_brier: float | None = None
        groups = np.arange(len(unsafe_run)) if group_of_run is None else group_of_run
        self._run_group = groups
        self.group = groups[run_of]
        self.groups = int(groups.max()) + 1 if len(groups) else 1

    def paired_z(self, before: NDArray[np.float64], after: NDArray[np.float64]) -> float:
        """How significant the fall in held-out squared error from ``before`` to ``after`` is: the mean
        per-group change over its standard error (groups of runs are the independent units)."""
        change = (after - self.y) ** 2 - (before - self.y) ** 2
        per_group = np.bincount(self.group, weights=change, minlength=self.groups)
        present = np.bincount(self.group, minlength=self.groups) > 0
        per_group = per_group[present]
        if len(per_group) < 2:
            return 0.0
        spread = float(per_group.std(ddof=1))
        if spread == 0.0:
            return math.inf if per_group.mean() < 0 else 0.0
        return float(-per_group.mean() / (spread / math.sqrt(len(per_group))))

    def detection_z(self, before: NDArray[np.float64], after: NDArray[np.float64]) -> float:
        """How significant the gain at the target is from ``before`` to ``after`` (each at its own threshold):
        per group, the change in violating runs flagged (with a detection target: in safe runs *not*
        flagged), its mean over the groups holding such runs over its standard error."""
        watched = self.unsafe_run if self.metric == "false-alarms" else ~self.unsafe_run
        sign = 1.0 if self.metric == "false-alarms" else -1.0
        change = sign * (self._flagged(after).astype(np.float64) - self._flagged(before).astype(np.float64))
        group = self._run_group[watched]
        per_group = np.bincount(group, weights=change[watched], minlength=self.groups)
        per_group = per_group[np.bincount(group, minlength=self.groups) > 0]
        if len(per_group) < 2:
            return 0.0
        spread = float(per_group.std(ddof=1))
        if spread == 0.0:
            return math.inf if per_group.mean() > 0 else 0.0
        return float(per_group.mean() / (spread / math.sqrt(len(per_group))))

    def _flagged(self, risk: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Each run flagged at the target, by its highest risk (none when no run has one of the outcomes)."""
        highest = np.full(len(self.unsafe_run), -math.inf)
        if len(risk):
            highest[self.present] = np.maximum.reduceat(risk, self.starts)
        if not self.n_safe or not self.n_unsafe:
            return np.zeros(len(self.unsafe_run), dtype=np.bool_)
        if self.metric == "false-alarms":
            safe = np.sort(highest[~self.unsafe_run])[::-1]
            allowed = math.floor(self.target * self.n_safe + 1e-9)
            threshold = safe[allowed] if allowed < self.n_safe else -math.inf
            return np.asarray(highest > threshold, dtype=np.bool_)
        needed = math.ceil(self.target * self.n_unsafe - 1e-9)
        ordered = np.sort(highest[self.unsafe_run])[::-1]
        threshold = ordered[needed - 1] if needed >= 1 else math.inf
        if threshold == -math.inf:  # the target needs runs no step of which is scored: every safe run flagged
            return np.asarray((highest > -math.inf) | ~self.unsafe_run, dtype=np.bool_)
        return np.asarray(highest >= threshold, dtype=np.bool_)

    def score(self, key: NDArray[np.int64], states: int, previous: NDArray[np.float64] | None = None) -> Score:
        """The figures of the abstraction whose state at each scored step is ``key`` (0..states-1),
        refining ``previous`` (the held-out risks of the abstraction it splits; None: the start rate)."""
        prior = self.start_risk if previous is None else previous
        index = self.fold * states + key
        size = self.folds * states
        n_f = np.bincount(index, minlength=size).astype(np.float64)
        u_f = np.bincount(index, weights=self.y, minlength=size)
        n_total = n_f.reshape(self.folds, states).sum(axis=0)
        u_total = u_f.reshape(self.folds, states).sum(axis=0)
        n = n_total[key] - n_f[index]
        u = u_total[key] - u_f[index]
        risk = (u + PRIOR * prior) / (n + PRIOR)
        brier = float(np.mean((risk - self.y) ** 2)) if len(risk) else 0.0
        rare = float(np.mean(n < self.min_visits)) if len(risk) else 0.0
        detection, false_alarms = self.rates(risk)
        if self.base_brier is None:
            self.base_brier = brier
        relative = brier / self.base_brier if self.base_brier > 0 else 0.0
        if self.metric == "false-alarms":
            objective = relative - detection + self.penalty * rare
        else:
            objective = relative + false_alarms + self.penalty * rare
        return Score(brier, detection, false_alarms, rare, objective, risk, states)

    def rates(self, risk: NDArray[np.float64]) -> tuple[float, float]:
        """(detection, false-alarm rate) of the per-run highest risk at the target."""
        if not self.n_safe or not self.n_unsafe:
            return 0.0, 0.0
        flagged = self._flagged(risk)
        return (float(flagged[self.unsafe_run].sum() / self.n_unsafe),
                float(flagged[~self.unsafe_run].sum() / self.n_safe))
