"""The joint PAC bound (guard/pac/joint.py): its parts against exact and hand-written oracles, its place in
the model file and the CLI. Coverage by simulation is in test_pac_coverage.py."""
from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import orjson
import pytest
from scipy.stats import beta

from _pac_sim import CHAINS, simulate
from _support import AB, CLI, NONE, A, B, solve_fractions
from forewarn.guard.learning import END, LearnedDTMC, TransitionCounts, learn_dtmc
from forewarn.guard.model import GuardModel
from forewarn.guard.pac import JOINT_SHARE, empirical_bound, joint_bound, pac_report
from forewarn.guard.pac.joint import upper_fundamental
from forewarn.guard.predicates import PredicateSet

Matrix = list[list[Fraction]]


def inverse(matrix: Matrix) -> Matrix:
    """(matrix)⁻¹ over the rationals, column by column."""
    n = len(matrix)
    columns = [solve_fractions(matrix, [Fraction(int(r == c)) for r in range(n)]) for c in range(n)]
    return [[columns[c][r] for c in range(n)] for r in range(n)]


def product(left: Matrix, right: Matrix) -> Matrix:
    return [[sum((left[r][k] * right[k][c] for k in range(len(right))), Fraction(0)) for c in range(len(right[0]))]
            for r in range(len(left))]


def minus_from_identity(matrix: Matrix) -> Matrix:
    return [[Fraction(int(r == c)) - v for c, v in enumerate(row)] for r, row in enumerate(matrix)]


def floats(matrix: Matrix) -> np.ndarray:
    return np.array([[float(v) for v in row] for row in matrix])


F = Fraction
Q_HAT = [[F(0), F(1, 2), F(3, 10)], [F(1, 5), F(0), F(0)], [F(0), F(3, 8), F(0)]]  # `short`'s jump chain
C = [[F(0), F(1, 20), F(1, 25)], [F(1, 30), F(0), F(0)], [F(0), F(1, 16), F(0)]]  # seen transitions' reach
E = [[F(0), F(0), F(0)], [F(0), F(0), F(1, 100)], [F(1, 100), F(0), F(0)]]  # never-seen transitions' bound
U = [F(0), F(1, 100), F(1, 100)]


def test_the_upper_fundamental_matrix_by_fractions() -> None:
    """N̄ is the smaller of (I − N̂(C + E))⁻¹N̂ and A + a·M̄ᵀ (K = (I − N̂C)⁻¹, A = K N̂, a = K N̂ U,
    M̄_j = max_s A_sj / (1 − max a)), exactly; and it bounds N for a true chain the intervals allow."""
    fundamental = inverse(minus_from_identity(Q_HAT))
    linear = product(inverse(minus_from_identity(product(fundamental, [[c + e for c, e in zip(cr, er)]
                                                                        for cr, er in zip(C, E)]))), fundamental)
    k = inverse(minus_from_identity(product(fundamental, C)))
    a_matrix = product(k, fundamental)
    a = [row[0] for row in product(product(k, fundamental), [[u] for u in U])]
    top = max(a)
    assert top < 1
    ceiling = [max(a_matrix[s][j] for s in range(3)) / (1 - top) for j in range(3)]
    global_form = [[a_matrix[s][j] + a[s] * ceiling[j] for j in range(3)] for s in range(3)]
    expected = [[min(x, y) for x, y in zip(lr, gr)] for lr, gr in zip(linear, global_form)]
    got = upper_fundamental(floats(fundamental), floats(C), floats(E), np.array([float(u) for u in U]))
    assert got is not None
    assert np.allclose(got, floats(expected), rtol=1e-12, atol=0)
    # a true chain within the intervals: each seen transition moved by its reach, a never-seen one present
    true_q = [[F(0), F(1, 2) + F(1, 20), F(3, 10) - F(1, 25)], [F(1, 5) + F(1, 30), F(0), F(1, 100)],
              [F(1, 100), F(3, 8) + F(1, 16), F(0)]]
    true_n = inverse(minus_from_identity(true_q))
    assert all(true_n[r][c] <= expected[r][c] for r in range(3) for c in range(3))
    assert all(expected[r][c] >= fundamental[r][c] for r in range(3) for c in range(3))
    assert true_n[1][1] > fundamental[1][1]  # returns to a grew more likely: N̂ alone would not bound N


def test_no_upper_fundamental_matrix_when_the_intervals_allow_a_chain_that_never_absorbs() -> None:
    fundamental = inverse(minus_from_identity(Q_HAT))
    wide = [[F(1, 2)] * 3 for _ in range(3)]
    assert upper_fundamental(floats(fundamental), floats(wide), floats(wide), np.ones(3)) is None


def hand_chain(predicates: PredicateSet) -> LearnedDTMC:
    counts = TransitionCounts(runs=600)
    counts.initial[NONE] = 600
    for (i, j), n in {(NONE, A): 300, (NONE, B): 200, (NONE, END): 100, (NONE, NONE): 40, (A, AB): 150,
                      (A, NONE): 50, (A, END): 200, (B, A): 100, (B, END): 150, (B, B): 30}.items():
        counts.counts[i, j] = n
    counts.unsafe.add(AB)
    return learn_dtmc(counts, predicates, alpha=0.1)


def hand_first_round(dtmc: LearnedDTMC, delta: float) -> np.ndarray:
    """One round from the box [0, 1], written out with loops: the jump chain; Clopper–Pearson per seen
    transition and (1 − (level/2)^(1/n)) per never-seen one; N̄; σ̄² by filling the rows' intervals from the
    largest (x − x̂_i)² down; G_s the smaller of Bernstein and the sub-Gaussian radius (proxy 1/4 on [0, 1]);
    then ε̂ = min(1, N̂b + G + N̂(C G + min(E G, U·max G over never-seen successors)))."""
    transient = [int(i) for i in np.flatnonzero(~dtmc.absorbing)]
    m, size = len(transient), dtmc.size
    dense, counts = dtmc.matrix.toarray(), dtmc.counts.toarray()
    for i in transient:
        stay = dense[i, i]
        dense[i, i] = counts[i, i] = 0.0
        dense[i] /= 1 - stay
    level = (1 - JOINT_SHARE) * delta / (m * (size - 1) + 1)
    log_joint = math.log(2 * m / (JOINT_SHARE * delta))
    index = np.array(transient)
    q_hat = dense[np.ix_(index, index)]
    fundamental = np.linalg.inv(np.eye(m) - q_hat)
    x_hat = np.zeros(size)
    x_hat[transient] = fundamental @ dense[np.ix_(index, np.flatnonzero(dtmc.unsafe))].sum(axis=1)
    x_hat[np.flatnonzero(dtmc.unsafe)] = 1.0
    c, e, u = np.zeros((m, m)), np.zeros((m, m)), np.zeros(m)
    n, shift, variance = np.zeros(m), np.zeros(m), np.zeros(m)
    unseen_of: list[list[int]] = []
    for r, i in enumerate(transient):
        n[r] = counts[i].sum()
        share = counts[i] / n[r]
        shift[r] = 0.5 * np.abs(dense[i] - share).sum()
        never = 1 - (level / 2) ** (1 / n[r])
        seen = [j for j in range(size) if counts[i, j] > 0]
        unseen = [j for j in range(size) if j != i and j not in seen]
        unseen_of.append([transient.index(j) for j in unseen if j in transient])
        lo = {j: beta.ppf(level / 2, counts[i, j], n[r] - counts[i, j] + 1) for j in seen}
        hi = {j: beta.ppf(1 - level / 2, counts[i, j] + 1, n[r] - counts[i, j]) if counts[i, j] < n[r] else 1.0
              for j in seen}
        mass = min(1 - sum(lo.values()), len(unseen) * never)
        for col, j in enumerate(transient):
            c[r, col] = abs(dense[i, j] - share[j])
            if j in seen:
                c[r, col] += max(share[j] - lo[j], hi[j] - share[j])
            elif j != i:
                e[r, col] = never
        u[r] = min(mass, len(unseen_of[-1]) * never)
        # values of (x_j − x̂_i)² at their largest on the box: transient j anywhere in [0, 1]
        centre = float(x_hat[i])

        def worst(j: int, centre: float = centre) -> float:
            if j in transient:
                return max(centre, 1 - centre) ** 2
            return (float(x_hat[j]) - centre) ** 2

        items = [(worst(j), hi[j] - lo[j]) for j in seen] + [(max(worst(j) for j in unseen), mass)]
        total, left = sum(lo[j] * worst(j) for j in seen), 1 - sum(lo.values())
        for value, cap in sorted(items, reverse=True):
            take = min(cap, max(left, 0.0))
            total, left = total + take * value, left - take
        variance[r] = min(total, 0.25)
    upper = upper_fundamental(fundamental, c, e, u)
    assert upper is not None
    joint = np.zeros(m)
    for s in range(m):
        step = max(upper[s, r] / n[r] for r in range(m))
        spread = sum(upper[s, r] ** 2 * variance[r] / n[r] for r in range(m))
        bernstein = step * log_joint / 3 + math.sqrt((step * log_joint) ** 2 / 9 + 2 * spread * log_joint)
        subgaussian = math.sqrt(2 * log_joint * sum(upper[s, r] ** 2 * 0.25 / n[r] for r in range(m)))
        joint[s] = min(bernstein, subgaussian)
    top = np.array([max((joint[k] for k in unseen_of[r]), default=0.0) for r in range(m)])
    second = fundamental @ (c @ joint + np.minimum(e @ joint, u * top))
    bound: np.ndarray = np.minimum(1.0, fundamental @ shift + joint + second)
    return bound


def test_the_joint_bound_by_hand_on_a_three_state_chain(toy_predicates: PredicateSet) -> None:
    dtmc = hand_chain(toy_predicates)
    first = joint_bound(dtmc, epsilon=0.05, delta=0.05, rounds=1)
    assert first is not None
    expected = hand_first_round(dtmc, 0.05)
    assert np.allclose([s.bound for s in first.states], expected, rtol=1e-7, atol=0)
    narrowed = joint_bound(dtmc, epsilon=0.05, delta=0.05)
    assert narrowed is not None
    assert all(s.bound <= f.bound + 1e-12 for s, f in zip(narrowed.states, first.states))  # rounds only narrow
    assert narrowed.worst_bound < first.worst_bound


def test_the_joint_bound_lets_independent_rows_cancel(toy_predicates: PredicateSet) -> None:
    """On `short` and `loops` the joint bound is narrower than the empirical-Bernstein one, and asks fewer runs."""
    for name in ("short", "loops"):
        initial, chain = CHAINS[name]
        dtmc = simulate(chain, initial, 3000, np.random.default_rng(5), toy_predicates, 0.1)
        joint, empirical = joint_bound(dtmc, epsilon=0.05, delta=0.05), empirical_bound(dtmc, epsilon=0.05, delta=0.05)
        assert joint is not None and joint.runs_factor is not None and empirical.runs_factor is not None
        assert joint.worst_bound < empirical.worst_bound and joint.initial_bound < empirical.initial_bound
        assert joint.runs_factor < empirical.runs_factor
        assert joint.worst_bound == max(s.bound for s in joint.states)
        assert joint.limiting and joint.initial_limiting


def test_the_model_file_and_check_carry_the_joint_bound(toy_model: GuardModel, toy_model_path: Path,
                                                        tmp_path: Path, forewarn_here: CLI) -> None:
    from forewarn.guard.model import _checksum

    joint = toy_model.pac.joint
    assert joint is not None
    document = toy_model.to_document()
    assert document["pac"]["joint"]["method"] == "joint-bernstein"
    assert GuardModel.load(toy_model.save(tmp_path / "new.json")).pac.joint == joint
    del document["pac"]["joint"]  # a file written before the bound existed
    del document["checksum"]
    document["checksum"] = _checksum(document)
    (tmp_path / "old.json").write_bytes(orjson.dumps(document))
    old = GuardModel.load(tmp_path / "old.json")
    assert old.pac.joint is None and old.pac.empirical == toy_model.pac.empirical
    assert "joint bound: not in this model file" in " ".join(forewarn_here("check", tmp_path / "old.json").stdout.split())
    checked = forewarn_here("check", toy_model_path, "--format", "json").json()
    assert isinstance(checked, dict)
    pac = checked["pac"]
    assert pac["joint"]["worst_bound"] == joint.worst_bound and pac["joint"]["runs_factor"] == joint.runs_factor
    assert pac["joint"]["initial"]["bound"] == joint.initial_bound
    assert "joint bound (95% confidence)" in " ".join(forewarn_here("check", toy_model_path).stdout.split())


def test_past_its_size_the_joint_bound_is_not_computed(toy_model: GuardModel, toy_predicates: PredicateSet,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from forewarn.guard.cli import _model_text
    from forewarn.guard.pac import joint as module

    monkeypatch.setattr(module, "JOINT_STATES", 2)
    dtmc = hand_chain(toy_predicates)
    assert joint_bound(dtmc, epsilon=0.05, delta=0.05) is None
    assert pac_report(dtmc, epsilon=0.05, delta=0.05).joint is None
    monkeypatch.setattr(_model_text, "JOINT_STATES", 2)
    monkeypatch.setattr(toy_model, "pac", replace(toy_model.pac, bounds={  # as learn writes it then
        name: bound for name, bound in toy_model.pac.bounds.items() if name != "joint"}))
    assert "PAC, joint bound: not computed past 2 transient states." in _model_text.pac_lines(toy_model)


def test_learn_reports_the_joint_bound(forewarn_here: CLI, toy_traces: Path, toy_spec_path: Path,
                                       tmp_path: Path) -> None:
    result = forewarn_here("learn", toy_traces, "--spec", toy_spec_path, "-o", tmp_path / "m.json", "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = result.json()
    assert isinstance(summary, dict)
    joint = GuardModel.load(tmp_path / "m.json").pac.joint
    assert joint is not None
    assert summary["pac_joint_worst_bound"] == round(joint.worst_bound, 6)
    assert summary["pac_joint_runs_factor"] == joint.runs_factor
    assert summary["pac_joint_initial_bound"] == round(joint.initial_bound, 6)
    table = forewarn_here("learn", toy_traces, "--spec", toy_spec_path, "-o", tmp_path / "t.json", "--verbose").stdout
    assert "PAC, joint bound (95% confidence)" in " ".join(table.split())


def test_a_state_never_left_is_one_and_the_others_still_bounded(toy_predicates: PredicateSet) -> None:
    """B was reached but never left: its row is unknown (and could make N anything), so its bound is 1; the
    others are bounded on the chain without it, moving into B costing at most 1 through N̂."""
    counts = TransitionCounts(runs=500)
    counts.initial[NONE] = 500
    for (i, j), n in {(NONE, A): 300, (NONE, B): 5, (NONE, END): 200, (A, AB): 100, (A, END): 200,
                      (A, NONE): 10}.items():
        counts.counts[i, j] = n
    counts.unsafe.add(AB)
    dtmc = learn_dtmc(counts, toy_predicates, alpha=0.1)
    joint, empirical = joint_bound(dtmc, epsilon=0.1, delta=0.05), empirical_bound(dtmc, epsilon=0.1, delta=0.05)
    assert joint is not None
    by_state = {dtmc.states[s.state]: s.bound for s in joint.states}
    assert by_state[B] == 1.0 and by_state[NONE] < 0.2 and by_state[A] < 0.2
    # NONE's error carries B's: at least the learned probability of moving there (5 + α smoothing of 505)
    assert by_state[NONE] > 5 / 505
    assert by_state[NONE] < {dtmc.states[s.state]: s.bound for s in empirical.states}[NONE]
    assert joint.runs_factor is not None
