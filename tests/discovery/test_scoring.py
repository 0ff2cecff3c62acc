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


def test_detection_z_counts_violating_runs_flagged_at_the_target_per_group() -> None:
    # six runs of one scored step each in three groups of two (a violating and a safe run each); at most
    # 1 of 3 safe runs may be flagged: the threshold is the second highest safe maximum
    scorer = HeldOut(np.arange(6), np.array([0, 0, 1, 1, 2, 2]), np.array([True, False] * 3),
                     metric="false-alarms", target=1 / 3, min_visits=1, penalty=0.0,
                     group_of_run=np.array([0, 0, 1, 1, 2, 2]))
    before = np.array([0.1, 0.5, 0.1, 0.2, 0.6, 0.3])  # safe maxima 0.5, 0.3, 0.2: threshold 0.3; run 4 flagged
    after = np.array([0.7, 0.5, 0.6, 0.2, 0.6, 0.3])  # same threshold; runs 0, 2 and 4 flagged
    assert math.isclose(scorer.rates(before)[0], 1 / 3) and scorer.rates(after)[0] == 1.0
    # per group, violating runs newly flagged: 1, 1, 0 — mean 2/3, sample sd √(1/3), z = (2/3)/(√(1/3)/√3) = 2
    assert math.isclose(scorer.detection_z(before, after), 2.0)
    assert math.isclose(scorer.detection_z(after, before), -2.0)
    assert scorer.detection_z(before, before) == 0.0
    # with a detection target, what counts is the safe runs no longer flagged
    at_detection = HeldOut(np.arange(6), np.array([0, 0, 1, 1, 2, 2]), np.array([True, False] * 3),
                           metric="detection", target=1.0, min_visits=1, penalty=0.0,
                           group_of_run=np.array([0, 0, 1, 1, 2, 2]))
    # all three violating runs must be flagged: the threshold is the lowest violating maximum (0.6, then 0.7)
    calmer = np.array([0.7, 0.1, 0.8, 0.2, 0.9, 0.6])  # threshold 0.7: no safe run flagged
    noisy = np.array([0.6, 0.7, 0.8, 0.2, 0.9, 0.6])  # threshold 0.6: safe runs 1 and 5 flagged
    # per group, safe runs no longer flagged: 1, 0, 1 — the same z of 2
    assert math.isclose(at_detection.detection_z(noisy, calmer), 2.0)
