"""The last word on a discovered spec: the real learner, on the same grouped folds, against the user's.

Counting (:mod:`.scoring`) chose the predicates and the action memory; what the spec will run is a
learned chain, so ``discover`` scores each configuration it could write with the grouped k-fold
evaluation ``forewarn evaluate`` runs (the same folds for all):

* the user's spec, unchanged;
* the discovered predicates with the action memory, the predicates alone, the action memory alone
  (whichever of these discovery has).

A configuration is *eligible* when

* its held-out Brier score is no worse than the user's spec's and its detection at the target no
  lower (with a detection target: its false alarms no higher), and its objective (relative Brier
  minus detection, or plus false alarms) is strictly better; and
* its held-out squared error falls in every fold but one (every fold, with two), and the fall is
  significant over the groups of runs (the independent units of the folds): the paired z-score of
  the per-group changes (a t statistic) at least Student's t point at the one-sided 5 % level,
  Bonferroni-corrected for the configurations tried, with groups − 1 degrees of freedom (1.78 for
  one configuration over 13 groups; 1.66 over 130) — the predicates' own test
  (:func:`.search.pays_off`), now on the chain, where groups are often few and one task's runs
  can carry a mean. On a few hundred runs in a dozen groups a gain
  that one fold carries is noise the next held-out runs do not repeat (bench/README.md,
  discover_domains: the tool agent).

The eligible configuration with the best objective is written; when none is eligible the user's
spec is returned unchanged, and the report lists what each configuration scored. So ``discover``
never returns a spec the real learner scores worse, in Brier or in detection, than the one it
was given, on the folds it measured.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..evaluation.tune import Target
from ..replay import RunReplay

LEVEL = 0.05  # one-sided level of the learner's significance test, shared by the configurations tried


@dataclass(frozen=True)
class Figures:
    """Held-out figures of one spec: Brier score and detection (strictly before the violation) at the target."""

    brier: float | None
    detection: float
    false_alarms: float

    def text(self, target: Target) -> str:
        brier = "–" if self.brier is None else f"{self.brier:.4f}"
        if target.metric == "false-alarms":
            return f"Brier {brier}, detection {self.detection:.1%} at {self.false_alarms:.1%} false alarms"
        return f"Brier {brier}, false alarms {self.false_alarms:.1%} at {self.detection:.1%} detection"


@dataclass(frozen=True)
class Configuration:
    """One spec discovery could write: what it adds (``predicates``, ``memory``) and its YAML."""

    name: str  # "the spec's own", "predicates and action memory", ...
    text: str
    predicates: bool
    memory: bool


def objective(f: Figures, base_brier: float | None, target: Target) -> float:
    """Lower is better: the Brier score relative to ``base_brier`` minus detection (or plus false alarms)."""
    relative = (f.brier / base_brier) if (f.brier is not None and base_brier) else 1.0
    return relative - f.detection if target.metric == "false-alarms" else relative + f.false_alarms


def eligible(f: Figures, before: Figures, target: Target) -> bool:
    """Whether ``f`` is no worse than ``before`` in Brier and at the target, and better overall."""
    if before.brier is not None and (f.brier is None or f.brier > before.brier):
        return False
    if target.metric == "false-alarms" and f.detection < before.detection:
        return False
    if target.metric != "false-alarms" and f.false_alarms > before.false_alarms:
        return False
    return objective(f, before.brier, target) < objective(before, before.brier, target)


def _changes(before: Sequence[RunReplay], after: Sequence[RunReplay], unit: Mapping[str, str]) -> dict[str, float]:
    """Per unit (a group or a fold of runs), the change in squared error from ``before`` to ``after`` (the
    same runs, replayed in the same order) over the steps before each run's violation where both have
    an estimate."""
    change: dict[str, float] = {}
    for b, a in zip(before, after, strict=True):
        end = b.violation if b.violation is not None else len(b.p_unsafe)
        outcome = float(b.unsafe)
        total = 0.0
        for pb, pa in zip(b.p_unsafe[:end], a.p_unsafe[:end]):
            if pb is not None and pa is not None:
                total += (pa - outcome) ** 2 - (pb - outcome) ** 2
        key = unit.get(b.id, b.id)
        change[key] = change.get(key, 0.0) + total
    return change


def folds_improved(before: Sequence[RunReplay], after: Sequence[RunReplay], fold: Mapping[str, str]) -> int:
    """In how many folds the squared error falls from ``before`` to ``after``."""
    return sum(c < 0.0 for c in _changes(before, after, fold).values())


def paired_z(before: Sequence[RunReplay], after: Sequence[RunReplay], group: Mapping[str, str]) -> float:
    """How significant the fall in held-out squared error from ``before`` to ``after`` is (the same runs,
    replayed in the same order): the mean per-group change over its standard error. Steps count
    before each run's violation, where both have an estimate."""
    values = list(_changes(before, after, group).values())
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    spread = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    if spread == 0.0:
        return math.inf if mean < 0 else 0.0
    return -mean / (spread / math.sqrt(len(values)))


Scored = tuple[Figures, Sequence[RunReplay]]


def required_t(tried: int, groups: int, level: float = LEVEL) -> float:
    """The paired z-score (a t statistic over ``groups``) the best of ``tried`` configurations needs."""
    from scipy.stats import t  # learning time only

    if groups < 2:
        return math.inf
    return float(t.ppf(1.0 - level / max(tried, 1), groups - 1))


def choose(configurations: list[Configuration], before: Scored, score: Callable[[Configuration], Scored],
           target: Target, group: Mapping[str, str], fold: Mapping[str, str] | None = None
           ) -> tuple[Configuration | None, list[tuple[Configuration, Figures, float]]]:
    """The eligible configuration with the best objective (None: none is), and every one's figures and
    paired z-score against ``before`` (the user's spec's figures and replays); ``group`` and ``fold``
    give each run's (by id)."""
    base, base_replays = before
    needed = required_t(len(configurations), len(set(group.get(r.id, r.id) for r in base_replays)))
    folds = len(set(fold.values())) if fold else 0
    required = folds - 1 if folds >= 3 else folds
    scored = []
    best: tuple[Configuration, Figures] | None = None
    for c in configurations:
        f, replays = score(c)
        z = paired_z(base_replays, replays, group)
        scored.append((c, f, z))
        steady = fold is None or folds_improved(base_replays, replays, fold) >= required
        if eligible(f, base, target) and z >= needed and steady and (
                best is None or objective(f, base.brier, target) < objective(best[1], base.brier, target)):
            best = (c, f)
    return (None if best is None else best[0]), scored
