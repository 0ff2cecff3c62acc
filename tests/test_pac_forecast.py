""""Runs needed" is what it says (issue 40): the outcome bound's runs forecast, made from a 200-run pilot,
names a number of runs after which a learning meets ε in at least 1 − δ of learnings — checked on the
three reference chains (bench/_pac_sim.py, exact risks by Fraction elimination), 200 learnings at the
forecast's own run count, ε = δ = 0.05."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from _pac_sim import CHAINS, learned_reach, simulate_runs
from _support import reach_probabilities
from forewarn.guard.learning import END
from forewarn.guard.pac import outcome_bound
from forewarn.guard.predicates import PredicateSet

EPSILON, DELTA, LEARNINGS = 0.05, 0.05, 200


def exact_risks(name: str) -> dict[int, Fraction]:
    """P(F unsafe) per transient state of a reference chain, by Fraction elimination (its floats as fractions)."""
    _, chain = CHAINS[name]
    rows = {s: {j: Fraction(p).limit_denominator(1000) for j, p in row.items()} for s, row in chain.items()}
    rows[3] = {3: Fraction(1)}
    rows[END] = {END: Fraction(1)}
    risks = reach_probabilities(rows, {3})
    return {s: risks[s] for s in chain}


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_the_bound_is_met_at_the_forecast_runs_in_one_minus_delta_of_learnings(
        name: str, toy_predicates: PredicateSet) -> None:
    initial, chain = CHAINS[name]
    truth = exact_risks(name)
    rng = np.random.default_rng(40)
    pilot, first_visits = simulate_runs(chain, initial, 200, rng, toy_predicates, 0.1)
    forecast = outcome_bound(pilot, first_visits, epsilon=EPSILON, delta=DELTA)
    assert not forecast.satisfied and forecast.runs_factor is not None
    runs = math.ceil(200 * forecast.runs_factor)
    met = within = 0
    for _ in range(LEARNINGS):
        dtmc, visits = simulate_runs(chain, initial, runs, rng, toy_predicates, 0.1)
        report = outcome_bound(dtmc, visits, epsilon=EPSILON, delta=DELTA)
        met += report.satisfied
        learned = learned_reach(dtmc)
        within += max(abs(learned[s] - float(truth[s])) for s in learned) <= EPSILON
    print(f"{name}: forecast {runs} runs from 200; bound met in {met}/{LEARNINGS}, every state within ε in {within}")
    assert met >= (1 - DELTA) * LEARNINGS
    assert within >= (1 - DELTA) * LEARNINGS
