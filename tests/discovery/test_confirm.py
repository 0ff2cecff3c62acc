"""The real learner's last word on a discovered spec (guard/discovery/confirm.py): no configuration worse than
the user's spec in Brier or at the target, and none whose gain is not significant over the groups of runs."""
from __future__ import annotations

import math
from fractions import Fraction

import pytest

from forewarn.guard.discovery.confirm import Configuration, Figures, choose, eligible, paired_z, required_t
from forewarn.guard.discovery.search import required_z
from forewarn.guard.evaluation.tune import parse_target
from forewarn.guard.replay import RunReplay

TARGET = parse_target("false-alarms=0.2")


def replay(run: str, risks: list[float | None], violation: int | None) -> RunReplay:
    return RunReplay(id=run, p_unsafe=risks, violation=violation, times=[None] * len(risks))


def test_eligible_needs_no_worse_brier_no_lower_detection_and_a_better_objective() -> None:
    own = Figures(0.0800, 0.50, 0.15)
    assert eligible(Figures(0.0790, 0.50, 0.18), own, TARGET)  # better Brier, same detection
    assert eligible(Figures(0.0800, 0.60, 0.18), own, TARGET)  # same Brier, better detection
    assert not eligible(Figures(0.0801, 0.90, 0.10), own, TARGET)  # far better detection, Brier a hair worse
    assert not eligible(Figures(0.0500, 0.45, 0.10), own, TARGET)  # far better Brier, detection lower
    assert not eligible(Figures(0.0800, 0.50, 0.10), own, TARGET)  # the same figures: nothing gained
    assert not eligible(Figures(None, 0.90, 0.10), own, TARGET)  # no Brier score to compare
    at_detection = parse_target("detection=0.8")
    assert eligible(Figures(0.0800, 0.8, 0.10), own, at_detection)
    assert not eligible(Figures(0.0700, 0.8, 0.16), own, at_detection)  # more false alarms


def test_paired_z_over_groups_is_exact() -> None:
    """Per group, the change in squared error over the steps before each run's violation where both have a
    risk; z = −mean / (sd / √groups)."""
    before = [replay("a1", [0.5, 0.5], 1), replay("a2", [0.5], None), replay("b1", [0.5, None], None),
              replay("c1", [0.4, 0.9], 1)]
    after = [replay("a1", [0.9, 0.1], 1), replay("a2", [0.25], None), replay("b1", [0.0, 0.3], None),
             replay("c1", [0.5, 0.0], 1)]
    groups = {"a1": "A", "a2": "A", "b1": "B", "c1": "C"}
    # A: a1 step 0 (unsafe run) (0.9−1)² − (0.5−1)² = 0.01 − 0.25; a2 (safe) 0.0625 − 0.25. B: 0 − 0.25 (step 1
    # has no risk before). C: step 0 only (the violation is step 1): (0.5−1)² − (0.4−1)² = 0.25 − 0.36
    changes = [Fraction(1, 100) - Fraction(1, 4) + Fraction(1, 16) - Fraction(1, 4), -Fraction(1, 4),
               Fraction(1, 4) - Fraction(36, 100)]
    mean = sum(changes) / 3
    variance = sum((c - mean) ** 2 for c in changes) / 2
    expected = float(-mean) / (math.sqrt(float(variance)) / math.sqrt(3))
    assert paired_z(before, after, groups) == pytest.approx(expected, rel=1e-12)
    assert paired_z(after, before, groups) == pytest.approx(-expected, rel=1e-12)
    assert paired_z(before, before, groups) == 0.0


def test_choose_writes_the_best_eligible_significant_configuration_or_nothing() -> None:
    groups = {f"r{g}": f"g{g}" for g in range(6)}
    own_replays = [replay(f"r{g}", [0.5, 0.5], 1 if g % 2 else None) for g in range(6)]
    own = (Figures(0.25, 0.5, 0.2), own_replays)
    # every group a little better: significant; one group much better, the others a hair worse: not
    steady = [replay(f"r{g}", [0.6 if g % 2 else 0.4, 0.5], 1 if g % 2 else None) for g in range(6)]
    lucky = [replay(f"r{g}", [0.99 if g == 1 else 0.49, 0.5], 1 if g % 2 else None) for g in range(6)]
    scores = {"steady": (Figures(0.24, 0.5, 0.2), steady), "lucky": (Figures(0.20, 0.6, 0.2), lucky)}
    configurations = [Configuration(name, name, True, False) for name in ("lucky", "steady")]
    picked, tried = choose(configurations, own, lambda c: scores[c.name], TARGET, groups)
    assert picked is not None and picked.name == "steady"
    z = {c.name: value for c, _, value in tried}
    assert z["steady"] == math.inf and z["lucky"] < required_t(2, 6)
    picked, _ = choose(configurations[:1], own, lambda c: scores[c.name], TARGET, groups)
    assert picked is None  # the better figures, but not significant over the groups


def test_required_z_grows_with_the_candidates() -> None:
    assert required_z(1) == pytest.approx(1.6449, abs=1e-4)
    assert required_z(40) == pytest.approx(3.0233, abs=1e-4)
    assert required_z(1200) == pytest.approx(3.9346, abs=1e-4)
    assert required_z(1200) < required_z(12000) < 5.0


def test_required_t_is_students_point_bonferroni_corrected() -> None:
    assert required_t(1, 13) == pytest.approx(1.7823, abs=1e-4)  # t(12) at 95 %
    assert required_t(3, 13) == pytest.approx(2.4030, abs=1e-4)  # t(12) at 1 − 0.05 / 3
    assert required_t(1, 1000) == pytest.approx(required_z(1), abs=2e-3)
    assert required_t(1, 1) == math.inf
