"""The outcome PAC bound (guard/pac/outcome.py): its arithmetic against an exact oracle written apart (the
binomial tail in Fractions, the learned risks by Gauss–Jordan over the rationals), its data from the
pipeline, and its place in the model file and the CLI. Coverage by simulation is in test_pac_coverage.py."""
from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import orjson

from _pac_sim import CHAINS, simulate_runs
from _support import CLI, solve_fractions
from forewarn.guard.model import GuardModel, _checksum
from forewarn.guard.pac import outcome_bound
from forewarn.guard.pac.outcome import outcome_widths
from forewarn.guard.predicates import PredicateSet

F = Fraction


def binomial_tail(k: int, n: int, p: Fraction) -> Fraction:
    """P(X ≥ k) for X ~ Bin(n, p), exactly."""
    return sum((F(math.comb(n, j)) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1)), F(0))


def clopper_pearson_oracle(k: int, n: int, level: float) -> tuple[float, float]:
    """Clopper–Pearson by its definition: lo with P(X ≥ k | lo) = level/2, hi with P(X ≤ k | hi) = level/2,
    each by bisection on the exact tail (to 2⁻⁶⁰)."""
    half = F(level) / 2

    def solve(increasing: bool, tail: object) -> float:
        low, high = F(0), F(1)
        for _ in range(60):
            mid = (low + high) / 2
            above = tail(mid) > half  # type: ignore[operator]
            low, high = (low, mid) if above == increasing else (mid, high)
        return float((low + high) / 2)

    lo = 0.0 if k == 0 else solve(True, lambda p: binomial_tail(k, n, p))
    hi = 1.0 if k == n else solve(False, lambda p: 1 - binomial_tail(k + 1, n, p))
    return lo, hi


def learned_risks(model: GuardModel) -> dict[int, Fraction]:
    """The learned chain's P(F unsafe) per transient state, solved over the rationals from its matrix's entries."""
    dtmc = model.dtmc
    dense = dtmc.matrix.toarray()
    transient = [i for i in range(dtmc.size) if not dtmc.absorbing[i]]
    system = [[F(int(r == c)) - F(float(dense[r, c])) for c in transient] for r in transient]
    rhs = [sum((F(float(dense[r, u])) for u in range(dtmc.size) if dtmc.unsafe[u]), F(0)) for r in transient]
    return dict(zip(transient, solve_fractions(system, rhs)))


def test_the_outcome_bound_on_the_toy_runs_by_hand(toy_model: GuardModel) -> None:
    """Five runs (conftest's toy_traces): NONE is visited by 4 runs, 2 of which then went wrong; A by 3 (2); B by
    2 (1); one run starts unsafe. Each state's bound is max(x̂ − lo, hi − x̂) with [lo, hi] Clopper–Pearson at
    δ/(m + 1), and the start's the same on (3 of 5 runs unsafe) around the learned start risk."""
    outcome = toy_model.pac.outcome
    assert outcome is not None
    dtmc = toy_model.dtmc
    transient = [i for i in range(dtmc.size) if not dtmc.absorbing[i]]
    level = toy_model.pac.delta / (len(transient) + 1)
    counts = {0: (4, 2), 1: (3, 2), 2: (2, 1)}  # abstract state → (runs visiting, of which went wrong)
    risks = learned_risks(toy_model)
    by_state = {s.state: s.bound for s in outcome.states}
    assert sorted(by_state) == transient
    for i in transient:
        visited, wrong = counts.get(dtmc.states[i], (0, 0))
        lo, hi = clopper_pearson_oracle(wrong, visited, level) if visited else (0.0, 1.0)
        expected = max(float(risks[i]) - lo, hi - float(risks[i]))
        assert math.isclose(by_state[i], expected, rel_tol=0, abs_tol=1e-12), (i, by_state[i], expected)
    assert outcome.worst_bound == max(by_state.values())
    runs = sum(dtmc.initial.values())
    start = sum((F(n, runs) * (risks[i] if i in risks else F(int(dtmc.unsafe[i]))) for i, n in dtmc.initial.items()),
                F(0))
    lo, hi = clopper_pearson_oracle(3, 5, level)
    assert math.isclose(outcome.initial_bound, max(float(start) - lo, hi - float(start)), abs_tol=1e-12)
    assert not outcome.satisfied and outcome.runs_factor is not None and outcome.runs_factor > 1


def test_the_widths_hold_the_learned_value_and_an_unvisited_state_is_anywhere() -> None:
    widths = outcome_widths(np.array([0.25, 0.9, 0.4]), np.array([0.0, 10.0, 0.0]), np.array([10.0, 10.0, 0.0]),
                            0.05)
    lo0, hi0 = clopper_pearson_oracle(0, 10, 0.05)
    lo1, hi1 = clopper_pearson_oracle(10, 10, 0.05)
    assert math.isclose(hi0, 1 - 0.025 ** 0.1, abs_tol=1e-12) and math.isclose(lo1, 0.025 ** 0.1, abs_tol=1e-12)
    assert np.allclose(widths, [max(0.25 - lo0, hi0 - 0.25), max(0.9 - lo1, hi1 - 0.9), 0.6], atol=1e-12, rtol=0)


def test_the_forecast_meets_epsilon_at_the_runs_it_names(toy_predicates: PredicateSet) -> None:
    """The runs factor is the smallest (to 3 %) at which the forecast every-state bound is ≤ ε; a learning from
    that many runs meets ε (in ≥ 1 − δ of learnings: tests/test_pac_forecast.py counts them)."""
    from forewarn.guard.pac.outcome import _forecast

    initial, chain = CHAINS["short"]
    dtmc, first_visits = simulate_runs(chain, initial, 300, np.random.default_rng(4), toy_predicates, 0.1)
    bound = outcome_bound(dtmc, first_visits, epsilon=0.05, delta=0.05)
    factor = bound.runs_factor
    assert factor is not None and factor > 1 and not bound.satisfied
    assert [s.state for s in bound.states] == np.flatnonzero(~dtmc.absorbing).tolist()
    again, visits = simulate_runs(chain, initial, math.ceil(300 * factor), np.random.default_rng(5),
                                  toy_predicates, 0.1)
    assert outcome_bound(again, visits, epsilon=0.05, delta=0.05).worst_bound <= 0.05
    reached, visited, spread = np.array([30.0]), np.array([100.0]), np.array([0.0005])
    assert _forecast(reached, visited, 0.01, 4.0, spread)[0] < _forecast(reached, visited, 0.01, 1.0, spread)[0]
    # the chain's own spread narrows the gap's share: the more the chain knows, the fewer runs
    assert _forecast(reached, visited, 0.01, 1.0, spread)[0] < _forecast(reached, visited, 0.01, 1.0, 0 * spread)[0]


def test_learn_and_check_carry_the_outcome_bound(toy_model: GuardModel, toy_model_path: Path, tmp_path: Path,
                                                 toy_traces: Path, toy_spec_path: Path, forewarn_here: CLI) -> None:
    outcome = toy_model.pac.outcome
    assert outcome is not None
    document = toy_model.to_document()
    assert document["pac"]["outcome"]["method"] == "first-visit-clopper-pearson"
    assert GuardModel.load(toy_model.save(tmp_path / "new.json")).pac.outcome == outcome
    del document["pac"]["outcome"]  # a file written before the bound existed
    del document["checksum"]
    document["checksum"] = _checksum(document)
    (tmp_path / "old.json").write_bytes(orjson.dumps(document))
    old = GuardModel.load(tmp_path / "old.json")
    assert old.pac.outcome is None and old.pac.joint == toy_model.pac.joint
    assert "outcome bound: not computed" in " ".join(forewarn_here("check", tmp_path / "old.json").stdout.split())
    checked = forewarn_here("check", toy_model_path, "--format", "json").json()
    assert isinstance(checked, dict)
    assert checked["pac"]["outcome"]["worst_bound"] == outcome.worst_bound
    assert checked["pac"]["joint"] is not None  # the keys before it are kept
    learned = forewarn_here("learn", toy_traces, "--spec", toy_spec_path, "-o", tmp_path / "m.json", "--format", "json")
    assert learned.returncode == 0, learned.stderr
    summary = learned.json()
    assert isinstance(summary, dict)
    assert summary["pac_outcome_worst_bound"] == round(outcome.worst_bound, 6)
    assert summary["pac_outcome_runs_factor"] == outcome.runs_factor
    assert summary["pac_outcome_initial_bound"] == round(outcome.initial_bound, 6)
    assert summary["pac_joint_worst_bound"] is not None  # the keys before it are kept
    text = " ".join(forewarn_here("learn", toy_traces, "--spec", toy_spec_path, "-o", tmp_path / "t.json",
                                  "--verbose").stdout.split())
    assert "PAC, outcome bound (95% confidence, from what the runs visiting each state went on to do)" in text
