"""The search's held-out counting scorer, on runs small enough to work out by hand."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from forewarn.guard.discovery.scoring import PRIOR, HeldOut


def test_held_out_risks_brier_detection_and_rare_share() -> None:
    # four runs of one scored step each; runs 0, 1 in fold 0 and runs 2, 3 in fold 1
    # run 0 violates, state 0 | run 1 is safe, state 0 | run 2 violates, state 0 | run 3 is safe, state 1
    scorer = HeldOut(np.array([0, 1, 2, 3]), np.array([0, 0, 1, 1]), np.array([True, False, True, False]),
                     metric="false-alarms", target=0.5, min_visits=2, penalty=0.25)
    score = scorer.score(np.array([0, 0, 0, 1]), 2)
    assert PRIOR == 4.0
    # each fold's start rate is the other fold's share of violating steps: 1/2 in both
    # run 0 and run 1 learn state 0 from fold 1 (1 visit, violating): (1 + 4·1/2) / (1 + 4) = 3/5
    # run 2 learns state 0 from fold 0 (2 visits, 1 violating): (1 + 2) / (2 + 4) = 1/2
    # run 3 learns state 1 from fold 0 (no visit): the start rate, 1/2
    expected = [Fraction(3, 5), Fraction(3, 5), Fraction(1, 2), Fraction(1, 2)]
    assert all(math.isclose(r, float(e)) for r, e in zip(score.risk, expected))
    brier = sum((e - y) ** 2 for e, y in zip(expected, [1, 0, 1, 0])) / 4
    assert brier == Fraction(51, 200) and math.isclose(score.brier, float(brier))
    # false alarms at most 1/2 of 2 safe runs: the threshold is the second highest safe maximum (1/2);
    # run 0 (3/5) is above it, run 2 (1/2) is not
    assert score.detection == 0.5 and score.false_alarms == 0.5
    assert score.rare == 0.75  # three of the four steps learned from fewer than 2 visits
    assert math.isclose(score.objective, 1.0 - 0.5 + 0.25 * 0.75)  # Brier relative to itself: 1
    # refining: a bit that separates run 3's state adds nothing where no training step shares it
    refined = scorer.score(np.array([0, 0, 1, 2]), 3, score.risk)
    assert math.isclose(refined.risk[2], (0 + PRIOR * 0.5) / (0 + PRIOR))  # backs off to the previous risk


def test_paired_z_is_signed_by_the_fall_in_error() -> None:
    scorer = HeldOut(np.array([0, 1, 2, 3]), np.array([0, 0, 1, 1]), np.array([True, False, True, False]),
                     metric="false-alarms", target=0.5, min_visits=2, penalty=0.25)
    before = np.full(4, 0.5)
    better = np.array([0.9, 0.2, 0.8, 0.1])  # each run's squared error falls, by different amounts
    assert scorer.paired_z(before, better) > 0 > scorer.paired_z(better, before)
    assert scorer.paired_z(before, before) == 0.0
