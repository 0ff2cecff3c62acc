"""The PAC bounds against the truth: simulated learnings from three known chains.

Like the paper's validation: learn many times from runs of a known chain and count how
often the guarantee holds. Two claims, each at confidence 1 − δ = 95 %:

* every state's learned risk is within its reported bound ε̂ of the true risk, and the
  risk from a run's first state (the paper's Definition 4) within its bound;
* with the runs the tighter report asks for, every state's risk is within ε.

Here at the runs the report asks for; bench/pac_coverage.py runs the same at several
numbers of runs, with more learnings, and prints error quantiles beside the paper's bound.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from _coverage import MIXTURES, mixture_risk
from _coverage import simulate as simulate_fixture
from _pac_sim import CHAINS, learned_reach, simulate, simulate_runs, true_reach
from _support import NONE
from forewarn.guard.learning import learn_dtmc
from forewarn.guard.outcomes import chain_first_visits
from forewarn.guard.pac import empirical_bound, joint_bound, outcome_bound, pac_report
from forewarn.guard.predicates import PredicateSet

EPSILON, DELTA, LEARNINGS, ALPHA = 0.1, 0.05, 200, 0.1


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_coverage_of_the_tight_bound_on_simulated_learnings(name: str, toy_predicates: PredicateSet) -> None:
    initial, chain = CHAINS[name]
    truth = true_reach(chain)
    rng = np.random.default_rng(2026)
    pilot = pac_report(simulate(chain, initial, 200, rng, toy_predicates, ALPHA), epsilon=EPSILON, delta=DELTA)
    assert pilot.tight is not None and pilot.tight.runs_factor is not None and pilot.runs_factor is not None
    assert pilot.tight.runs_factor < pilot.runs_factor  # asks for fewer runs than the paper's bound
    runs = int(np.ceil(200 * pilot.tight.runs_factor))
    start_truth = sum(p * truth[s] for s, p in initial.items())
    covered = within = start_covered = 0
    for _ in range(LEARNINGS):
        dtmc = simulate(chain, initial, runs, rng, toy_predicates, ALPHA)
        report = pac_report(dtmc, epsilon=EPSILON, delta=DELTA)
        assert report.tight is not None
        learned = learned_reach(dtmc)
        errors = {s.state: abs(learned[dtmc.states[s.state]] - truth[dtmc.states[s.state]])
                  for s in report.tight.states}
        covered += all(errors[s.state] <= s.bound for s in report.tight.states)
        within += max(errors.values()) <= EPSILON
        start = sum(n * learned[dtmc.states[i]] for i, n in dtmc.initial.items()) / runs
        start_covered += abs(start - start_truth) <= report.tight.initial_bound
    assert covered >= (1 - DELTA) * LEARNINGS, (name, runs, covered)
    assert within >= (1 - DELTA) * LEARNINGS, (name, runs, within)
    assert start_covered >= (1 - DELTA) * LEARNINGS, (name, runs, start_covered)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_coverage_of_the_empirical_bernstein_bound(name: str, toy_predicates: PredicateSet) -> None:
    """Every state's learned risk within its empirical-Bernstein bound, and the start's within the start
    bound, in at least 1 − δ of 200 learnings; the bound is the tighter one's or narrower on the median."""
    initial, chain = CHAINS[name]
    truth = true_reach(chain)
    start_truth = sum(p * truth[s] for s, p in initial.items())
    rng = np.random.default_rng(23)
    runs = 1000
    covered = start_covered = narrower = 0
    for _ in range(LEARNINGS):
        dtmc = simulate(chain, initial, runs, rng, toy_predicates, ALPHA)
        report = pac_report(dtmc, epsilon=EPSILON, delta=DELTA)
        assert report.empirical is not None and report.tight is not None
        learned = learned_reach(dtmc)
        covered += all(abs(learned[dtmc.states[s.state]] - truth[dtmc.states[s.state]]) <= s.bound
                       for s in report.empirical.states)
        start = sum(n * learned[dtmc.states[i]] for i, n in dtmc.initial.items()) / runs
        start_covered += abs(start - start_truth) <= report.empirical.initial_bound
        narrower += report.empirical.worst_bound <= report.tight.worst_bound + 1e-12
    assert covered >= (1 - DELTA) * LEARNINGS, (name, covered)
    assert start_covered >= (1 - DELTA) * LEARNINGS, (name, start_covered)
    assert narrower >= LEARNINGS / 2, (name, narrower)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_coverage_of_the_joint_bound(name: str, toy_predicates: PredicateSet) -> None:
    """Every state's learned risk within its joint bound, and the start's within the start bound, in at least
    1 − δ of 200 learnings; on the median learning the joint bound is the empirical-Bernstein one's or
    narrower on the chains where rows' errors cancel (short, loops)."""
    initial, chain = CHAINS[name]
    truth = true_reach(chain)
    start_truth = sum(p * truth[s] for s, p in initial.items())
    rng = np.random.default_rng(2323)
    runs = 1000
    covered = start_covered = narrower = 0
    for _ in range(LEARNINGS):
        dtmc = simulate(chain, initial, runs, rng, toy_predicates, ALPHA)
        joint = joint_bound(dtmc, epsilon=EPSILON, delta=DELTA)
        assert joint is not None
        learned = learned_reach(dtmc)
        covered += all(abs(learned[dtmc.states[s.state]] - truth[dtmc.states[s.state]]) <= s.bound
                       for s in joint.states)
        start = sum(n * learned[dtmc.states[i]] for i, n in dtmc.initial.items()) / runs
        start_covered += abs(start - start_truth) <= joint.initial_bound
        if name != "rare":
            narrower += joint.worst_bound <= empirical_bound(dtmc, epsilon=EPSILON, delta=DELTA).worst_bound
    assert covered >= (1 - DELTA) * LEARNINGS, (name, covered)
    assert start_covered >= (1 - DELTA) * LEARNINGS, (name, start_covered)
    assert name == "rare" or narrower >= LEARNINGS / 2, (name, narrower)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_coverage_of_the_outcome_bound(name: str, toy_predicates: PredicateSet) -> None:
    """Every state's learned risk within its outcome bound, and the start's within the start bound, in at least
    1 − δ of 200 learnings (the runs' first visits recorded by the simulation, as the pipeline counts them)."""
    initial, chain = CHAINS[name]
    truth = true_reach(chain)
    start_truth = sum(p * truth[s] for s, p in initial.items())
    rng = np.random.default_rng(2324)
    runs = 1000
    covered = start_covered = 0
    for _ in range(LEARNINGS):
        dtmc, first_visits = simulate_runs(chain, initial, runs, rng, toy_predicates, ALPHA)
        outcome = outcome_bound(dtmc, first_visits, epsilon=EPSILON, delta=DELTA)
        learned = learned_reach(dtmc)
        covered += all(abs(learned[dtmc.states[s.state]] - truth[dtmc.states[s.state]]) <= s.bound
                       for s in outcome.states)
        start = sum(n * learned[dtmc.states[i]] for i, n in dtmc.initial.items()) / runs
        start_covered += abs(start - start_truth) <= outcome.initial_bound
    assert covered >= (1 - DELTA) * LEARNINGS, (name, covered)
    assert start_covered >= (1 - DELTA) * LEARNINGS, (name, start_covered)


@pytest.mark.parametrize("name", sorted(MIXTURES))
def test_coverage_of_the_outcome_bound_on_the_named_fixtures(name: str, toy_predicates: PredicateSet) -> None:
    """The named fixtures of bench/_coverage.py, the first visits counted from the runs as the pipeline counts
    them (guard/outcomes.py): every state's learned risk within its outcome bound of the true first-visit risk,
    and the start's, in at least 1 − δ of 200 learnings from 200 runs. On the Markov chains that risk is the
    chain's; on the mixtures (two_types, lingering) the chain is wrong, and the bound still holds the distance
    to what runs from each state really do."""
    truth = mixture_risk(MIXTURES[name])
    rng = np.random.default_rng(2325)
    covered = start_covered = 0
    for _ in range(LEARNINGS):
        paths: Counter[tuple[int, ...]] = Counter()
        counts = simulate_fixture(MIXTURES[name], 200, rng, toy_predicates, paths=paths)
        dtmc = learn_dtmc(counts, toy_predicates, alpha=ALPHA)
        first_visits = chain_first_visits(dtmc, toy_predicates, [], paths, [], [], None)
        assert first_visits is not None
        outcome = outcome_bound(dtmc, first_visits, epsilon=EPSILON, delta=DELTA)
        learned = learned_reach(dtmc)
        states = [(dtmc.states[s.state], s.bound) for s in outcome.states]
        covered += all(abs(learned[bits] - float(truth.get(bits, 0))) <= bound + 1e-12 for bits, bound in states)
        start_covered += abs(learned[NONE] - float(truth[NONE])) <= outcome.initial_bound + 1e-12
    assert covered >= (1 - DELTA) * LEARNINGS, (name, covered)
    assert start_covered >= (1 - DELTA) * LEARNINGS, (name, start_covered)
