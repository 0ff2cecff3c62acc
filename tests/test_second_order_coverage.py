"""Intervals that cover when the runs are only a little non-Markov (issue 40): the verifier's
construction — S → A or B (½ each) → C → unsafe with probability 0.4 after A and 0.2 after B —
against its exact first-visit risks (Fractions), at 200, 500 and 1,000 runs, 200 learnings each,
δ = 0.05; and the Markov constructions' widths beside the construction before (the intersection of
the chain's interval with the runs')."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from _coverage import MIXTURES, C, coverage, mixture_risk
from _support import NONE, A, B

F = Fraction
DELTA = 0.05


def test_the_construction_and_its_exact_first_visit_risks() -> None:
    truth = mixture_risk(MIXTURES["second_order"])
    assert truth == {NONE: F(3, 10), A: F(2, 5), B: F(1, 5), C: F(3, 10)}


@pytest.mark.parametrize("runs", [200, 500, 1000])
def test_every_state_is_covered_in_one_minus_delta_of_learnings(runs: int) -> None:
    result = coverage("second_order", learnings=200, runs=runs, delta=DELTA, seed=runs)
    print(result.line())
    assert result.learnings == 200 and result.state_checks == 4 * 200  # S, A, B and C in every learning
    assert result.rate >= 1 - DELTA
    if runs < 1000:  # below the Markov test's power the construction before missed in about a third of them
        before = coverage("second_order", learnings=200, runs=runs, delta=DELTA, seed=runs,
                          construction="intersection")
        print(before.line())
        assert before.rate < 1 - DELTA


@pytest.mark.parametrize("name", ["balanced", "rare", "sticky"])
def test_markov_constructions_keep_coverage_and_width(name: str) -> None:
    # 50 learnings each (bench/interval_check.py runs 200 and 500): test_intervals.py checks coverage at 200
    now = coverage(name, learnings=50, runs=200, delta=DELTA, seed=3)
    before = coverage(name, learnings=50, runs=200, delta=DELTA, seed=3, construction="intersection")
    print(now.line(), before.line(), sep="\n")
    assert now.rate >= 0.9  # a binomial margin below 1 − δ for 50 learnings
    assert np.mean(now.widths) <= 1.3 * np.mean(before.widths)
