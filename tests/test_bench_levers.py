"""The matched-false-alarm readings of bench/estimation_levers.py against hand-solved ROC curves."""
from __future__ import annotations

import importlib
from fractions import Fraction

import pytest

from forewarn.guard.replay import RunReplay

levers = importlib.import_module("estimation_levers")  # bench/ is on pytest's pythonpath


def runs(safe: list[float], unsafe: list[float]) -> list[RunReplay]:
    """Safe runs with one step at risk 1 − p_safe; violating runs whose step before the violation has it."""
    out = [RunReplay(f"s{i}", [1 - p], None, [None]) for i, p in enumerate(safe)]
    return out + [RunReplay(f"u{i}", [1 - p, 1.0], 1, [None, None]) for i, p in enumerate(unsafe)]


# peak p_safe: safe 0.2, 0.5, 0.5, 0.9; violating 0.1, 0.5, 0.8. Alarms where p_safe < θ; the
# reachable (false-alarm, detection) points: (0, 1/3), (1/4, 1/3), (3/4, 1), (1, 1)
TOY = runs([0.2, 0.5, 0.5, 0.9], [0.1, 0.5, 0.8])


@pytest.mark.parametrize(("target", "expected"), [
    (Fraction(1, 20), Fraction(1, 3)), (Fraction(1, 4), Fraction(1, 3)),
    (Fraction(1, 2), Fraction(2, 3)),  # half-way from (1/4, 1/3) to (3/4, 1): a θ drawn between the two
    (Fraction(3, 4), Fraction(1)), (Fraction(1), Fraction(1))])
def test_interpolated_detection_follows_the_hand_solved_roc(target: Fraction, expected: Fraction) -> None:
    assert levers.detection_interpolated(TOY, float(target), False) == pytest.approx(float(expected), abs=1e-12)


def test_fixed_theta_detection_stops_below_ties() -> None:
    # θ = the 3rd-smallest safe p_safe (0.5): one safe run alarms (1/4), one violating run (1/3)
    assert levers.detection_at(TOY, 0.5, False) == pytest.approx((1 / 3, 1 / 4))


def test_per_model_detection_weights_each_model_by_its_violating_runs() -> None:
    other = runs([0.9, 0.9], [0.1])  # detection 1 at any false-alarm rate
    # (3 · 2/3 + 1 · 1) / 4 at 50 %
    assert levers.detection_per_model([TOY, other], 0.5, False) == pytest.approx(3 / 4, abs=1e-12)
    assert levers.start_error([TOY]) == pytest.approx(abs((0.8 + 0.5 + 0.5 + 0.1 + 0.9 + 0.5 + 0.2) / 7 - 3 / 7))


def test_a_model_without_both_outcomes_has_no_roc() -> None:
    assert levers.detection_per_model([runs([0.5], []), runs([0.9], [0.1])], 0.2, False) == 1.0
