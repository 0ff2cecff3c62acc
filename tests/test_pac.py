from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import orjson

from _support import AB, CLI, NONE, A, WriteRuns, expected_steps, toy_run
from forewarn.guard.learning import END, LearnedDTMC, TransitionCounts, learn_dtmc
from forewarn.guard.model import GuardModel
from forewarn.guard.pac import amplification_factor, pac_report, tight_bound
from forewarn.guard.pipeline import learn_model
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.spec import Spec


def hand_required(counts: dict[int, int], n_states: int, b: float, epsilon: float, delta: float) -> int:
    """The docstring's formula, with the maximum over every state q (unobserved q: n_pq = 0)."""
    n_p = sum(counts.values())
    delta_prime = delta / n_states
    brackets = [max(0.0, 0.25 - (abs(0.5 - counts.get(q, 0) / n_p) - 2 * epsilon / 3) ** 2)
                for q in range(n_states)]
    return math.ceil((1.1 * b) ** 2 * 2 / epsilon**2 * math.log(2 / delta_prime) * max(brackets))


def hand_b(dtmc: LearnedDTMC) -> Fraction:
    rows = {i: dict(dtmc.exact_row(i)) for i in range(dtmc.size)}
    absorbing = {int(i) for i in np.flatnonzero(dtmc.absorbing)}
    return max(Fraction(1), *expected_steps(rows, absorbing).values())


def test_report_on_the_toy_chain_matches_the_formula_by_hand(toy_model: GuardModel) -> None:
    dtmc, pac = toy_model.dtmc, toy_model.pac
    assert (pac.epsilon, pac.delta) == (0.1, 0.05)  # from the spec's learning block
    assert pac.delta_per_state == 0.05 / 5  # |S| = NONE, A, B, AB and end
    b = hand_b(dtmc)
    assert b > 1
    assert math.isclose(pac.amplification, b, rel_tol=1e-12)
    assert math.isclose(amplification_factor(dtmc), b, rel_tol=1e-12)
    # departures observed per transient state (see TOY_COUNTS in test_learning)
    departures = {0: {1: 2, 2: 2, 4: 1}, 1: {3: 2, 0: 1}, 2: {2: 1, 4: 1, 1: 1}}
    assert [s.state for s in pac.states] == [0, 1, 2]  # absorbing states are not estimated
    for entry in pac.states:
        counts = departures[entry.state]
        assert entry.visits == sum(counts.values())
        assert entry.required == hand_required(counts, dtmc.size, float(b), 0.1, 0.05)
        assert not entry.satisfied
    assert not pac.satisfied and pac.satisfied_count == 0
    assert pac.worst is not None and pac.worst.state == max(
        pac.states, key=lambda s: (s.required or 0) / s.visits).state


def test_enough_visits_satisfy_the_requirement(write_runs: WriteRuns, toy_spec: Spec) -> None:
    # NONE → end only. With ε = δ = 0.5 and |S| = 3 (NONE, the unreached AB, end): δ' = 1/6,
    # bracket = 1/4 − (1/2 − 1/3)² = 2/9.
    many = learn_model([write_runs([toy_run(f"m{i}", [NONE]) for i in range(10)], "many.jsonl")], toy_spec,
                       epsilon=0.5, delta=0.5)
    few = learn_model([write_runs([toy_run(f"f{i}", [NONE]) for i in range(3)], "few.jsonl")], toy_spec,
                      epsilon=0.5, delta=0.5)
    for model, runs in ((many, 10), (few, 3)):
        alpha = Fraction(1, 10)
        # expected steps from NONE: 1 / (1 − P(NONE, NONE)), P(NONE, NONE) = α / (runs + 3α): the valid
        # successors are NONE, end and AB (unsafe: in the model though no run reached it)
        b = 1 / (1 - alpha / (runs + 3 * alpha))
        assert b == hand_b(model.dtmc)
        needed = (1.1 * float(b)) ** 2 * 2 / 0.5**2 * math.log(2 / (0.5 / 3)) * (2 / 9)
        [entry] = model.pac.states
        assert entry.visits == runs
        assert entry.required == math.ceil(needed)
        assert entry.satisfied == (runs >= needed)
    assert many.pac.satisfied and not few.pac.satisfied


def test_states_that_never_absorb_make_b_infinite(toy_predicates: PredicateSet) -> None:
    counts = TransitionCounts()
    counts.counts[NONE, A] = 2
    counts.counts[A, NONE] = 2
    counts.initial[NONE] = 1
    dtmc = learn_dtmc(counts, toy_predicates, alpha=0.0)  # a closed loop: nothing is ever absorbed
    assert dtmc.states == [NONE, A, AB, END]  # AB unreached: with α = 0 nothing leads there
    report = pac_report(dtmc, epsilon=0.1, delta=0.05)
    assert report.amplification == math.inf
    assert all(s.required is None and not s.satisfied for s in report.states)


def test_model_file_keeps_the_report(toy_model: GuardModel, tmp_path: Path) -> None:
    loaded = GuardModel.load(toy_model.save(tmp_path / "m.json"))
    assert loaded.pac == toy_model.pac


# -- the tighter per-state bound ------------------------------------------------------

def hand_first_round(dtmc: LearnedDTMC, delta_per_state: float) -> np.ndarray:
    """min(1, (I − Q̂')⁻¹ r), r = min(1, min(Hoeffding, Bernstein at σ² = 1/4) + ½‖P̂' − p̃'‖₁), densely, on
    the jump chain: transient self-loops dropped, rows rescaled, self-loop counts dropped."""
    transient = np.flatnonzero(~dtmc.absorbing)
    dense, counts = dtmc.matrix.toarray(), dtmc.counts.toarray()
    for i in transient:
        stay = dense[i, i]
        dense[i, i] = counts[i, i] = 0.0
        dense[i] /= 1 - stay
    log_term = math.log(2 / delta_per_state)
    radius = []
    for i in transient:
        n = counts[i].sum()
        shift = 0.5 * np.abs(dense[i] - counts[i] / n).sum()
        hoeffding = math.sqrt(log_term / (2 * n))
        bernstein = (log_term / 3 + math.sqrt(log_term**2 / 9 + 2 * n * log_term / 4)) / n
        radius.append(min(1.0, min(hoeffding, bernstein) + shift))
    q = dense[np.ix_(transient, transient)]
    return np.minimum(1.0, np.linalg.solve(np.eye(len(transient)) - q, radius))


def test_the_tight_bound_is_the_fundamental_matrix_times_each_states_radius(toy_model: GuardModel) -> None:
    dtmc, pac = toy_model.dtmc, toy_model.pac
    first = tight_bound(dtmc, epsilon=0.1, delta_per_state=pac.delta_per_state, rounds=1)
    expected = hand_first_round(dtmc, pac.delta_per_state)
    assert np.allclose([s.bound for s in first.states], expected, rtol=1e-9, atol=0)
    # the Bernstein rounds only narrow it; the report keeps every round's result
    assert pac.tight is not None
    assert all(a.bound <= b.bound + 1e-12 for a, b in zip(pac.tight.states, first.states))
    assert [s.state for s in pac.tight.states] == [s.state for s in pac.states]
    assert pac.tight.worst_bound == max(s.bound for s in pac.tight.states)


def test_smoothing_moves_the_bound_by_exactly_its_shift(write_runs: WriteRuns, toy_spec: Spec) -> None:
    runs = write_runs([toy_run(f"r{i}", [NONE, A] if i % 3 else [NONE]) for i in range(30)])
    plain = learn_model([runs], toy_spec, alpha=0.0)
    smoothed = learn_model([runs], toy_spec, alpha=0.5)
    for model in (plain, smoothed):
        expected = hand_first_round(model.dtmc, model.pac.delta_per_state)
        got = tight_bound(model.dtmc, epsilon=0.1, delta_per_state=model.pac.delta_per_state, rounds=1)
        assert np.allclose([s.bound for s in got.states], expected, rtol=1e-9, atol=0)
    assert plain.pac.tight is not None and smoothed.pac.tight is not None
    assert plain.pac.tight.worst_bound < smoothed.pac.tight.worst_bound  # α adds its shift to every radius


def test_the_report_says_how_many_runs_and_which_states(toy_model: GuardModel) -> None:
    tight = toy_model.pac.tight
    assert tight is not None and not tight.satisfied and tight.runs_factor is not None
    assert toy_model.pac.runs_factor is not None
    assert tight.runs_factor < toy_model.pac.runs_factor  # below the paper's, on this chain too
    visits = {s.state: s.visits for s in toy_model.pac.states}
    for entry in tight.states:
        assert entry.required == math.ceil(tight.runs_factor * visits[entry.state] - 1e-9)
    assert set(tight.limiting) <= set(visits) and tight.limiting
    # with every count times the factor (and eq. 1 smoothing them again), the bound meets ε
    dtmc = toy_model.dtmc
    counts = dtmc.counts * tight.runs_factor
    matrix = dtmc.matrix.copy()
    for i in np.flatnonzero(~dtmc.absorbing):
        start, stop = matrix.indptr[i], matrix.indptr[i + 1]
        row = counts.data[start:stop]
        matrix.data[start:stop] = (row + dtmc.alpha) / (row.sum() + (stop - start) * dtmc.alpha)
    scaled = LearnedDTMC(predicates=dtmc.predicates, states=dtmc.states, unsafe=dtmc.unsafe, initial=dtmc.initial,
                         counts=counts, matrix=matrix, alpha=dtmc.alpha)
    again = tight_bound(scaled, epsilon=0.1, delta_per_state=toy_model.pac.delta_per_state)
    assert again.satisfied and again.worst_bound <= 0.1


def test_an_older_model_file_without_the_tight_bound_still_loads(toy_model: GuardModel, tmp_path: Path) -> None:
    from forewarn.guard.model import _checksum

    document = toy_model.to_document()
    del document["pac"]["tight"]
    del document["checksum"]
    document["checksum"] = _checksum(document)
    path = tmp_path / "old.json"
    path.write_bytes(orjson.dumps(document))
    loaded = GuardModel.load(path)
    assert loaded.pac.tight is None and loaded.pac.states == toy_model.pac.states
    assert GuardModel.load(toy_model.save(tmp_path / "new.json")).pac.tight == toy_model.pac.tight


def test_learn_and_check_report_both_bounds(toy_model_path: Path, forewarn_here: CLI) -> None:
    model = GuardModel.load(toy_model_path)
    tight = model.pac.tight
    assert tight is not None
    document = forewarn_here("check", toy_model_path, "--format", "json").json()
    assert isinstance(document, dict)
    pac = document["pac"]
    assert pac["paper"]["runs_factor"] == model.pac.runs_factor and not pac["paper"]["satisfied"]
    assert pac["tight"]["worst_bound"] == tight.worst_bound and pac["tight"]["runs_factor"] == tight.runs_factor
    assert pac["tight"]["runs_needed"] == math.ceil(tight.runs_factor * model.provenance["runs"])
    assert [entry["state"] for entry in pac["tight"]["limiting"]] == tight.limiting
    assert pac["tight"]["initial"]["bound"] == tight.initial_bound
    table = forewarn_here("check", toy_model_path).stdout
    assert "the paper's bound" in table and "tighter bound" in table and "Definition 4" in table
    assert f"{math.ceil(tight.runs_factor * model.provenance['runs']):,} instead of" in " ".join(table.split())


# -- the empirical-Bernstein bound ------------------------------------------------------

def test_the_empirical_bound_charges_a_state_the_spread_of_its_successors(toy_predicates: PredicateSet) -> None:
    from _pac_sim import simulate
    from forewarn.guard.pac import empirical_bound

    # NONE moves on to a or b, both of risk 1/2: its successors do not spread, a 0/1 outcome would
    chain = {NONE: {A: 0.5, 2: 0.5}, A: {AB: 0.5, END: 0.5}, 2: {AB: 0.5, END: 0.5}}
    dtmc = simulate(chain, {NONE: 1.0}, 4000, np.random.default_rng(7), toy_predicates, 0.1)
    report = pac_report(dtmc, epsilon=0.05, delta=0.05)
    tight, empirical = report.tight, report.empirical
    assert tight is not None and empirical is not None
    assert empirical == empirical_bound(dtmc, epsilon=0.05, delta=0.05)
    by_state = {dtmc.states[s.state]: s.bound for s in empirical.states}
    tight_by_state = {dtmc.states[s.state]: s.bound for s in tight.states}
    # NONE's own radius is nearly gone: its bound is little more than what it inherits from a and b
    assert by_state[NONE] < tight_by_state[NONE] - 0.01
    assert by_state[NONE] < 1.25 * max(by_state[A], by_state[2])
    assert all(by_state[s] <= tight_by_state[s] + 1e-12 for s in (A, 2))  # a 0/1 outcome: as the tighter one
    assert empirical.worst_bound == max(by_state.values()) and empirical.runs_factor is not None
    assert tight.runs_factor is not None and empirical.runs_factor < tight.runs_factor  # fewer runs asked
    assert empirical.initial_bound < tight.initial_bound


def test_the_model_file_and_check_carry_the_empirical_bound(toy_model: GuardModel, toy_model_path: Path,
                                                            tmp_path: Path, forewarn_here: CLI) -> None:
    from forewarn.guard.model import _checksum

    empirical = toy_model.pac.empirical
    assert empirical is not None
    document = toy_model.to_document()
    assert document["pac"]["empirical"]["method"] == "empirical-bernstein"
    assert GuardModel.load(toy_model.save(tmp_path / "new.json")).pac.empirical == empirical
    del document["pac"]["empirical"]  # a file written before the bound existed
    del document["checksum"]
    document["checksum"] = _checksum(document)
    (tmp_path / "old.json").write_bytes(orjson.dumps(document))
    old = GuardModel.load(tmp_path / "old.json")
    assert old.pac.empirical is None and old.pac.tight == toy_model.pac.tight
    assert "empirical-Bernstein bound: not in this model file" in " ".join(
        forewarn_here("check", tmp_path / "old.json").stdout.split())
    model = GuardModel.load(toy_model_path)
    assert model.pac.empirical is not None
    checked = forewarn_here("check", toy_model_path, "--format", "json").json()
    assert isinstance(checked, dict)
    pac = checked["pac"]
    assert pac["empirical"]["worst_bound"] == model.pac.empirical.worst_bound
    assert pac["empirical"]["initial"]["bound"] == model.pac.empirical.initial_bound
    assert "empirical-Bernstein bound (95% confidence)" in " ".join(forewarn_here("check", toy_model_path).stdout.split())
