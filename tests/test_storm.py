from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import stormpy

from _support import AB, Row, WriteRuns, bounded_reach, reach_probabilities, toy_run
from forewarn.errors import CheckError
from forewarn.guard.learning import LearnedDTMC
from forewarn.guard.model import GuardModel
from forewarn.guard.pipeline import learn_model
from forewarn.guard.spec import Spec
from forewarn.guard.storm import (
    Method,
    build_sparse_dtmc,
    check_dtmc,
    check_prism_file,
    check_sparse_model,
    ctl_verdicts,
    export_drn,
    labels_of,
    prism_text,
    validate_formula,
)

REACH = 'P=? [F "unsafe"]'


def exact_rows(dtmc: LearnedDTMC) -> dict[int, Row]:
    return {i: dict(dtmc.exact_row(i)) for i in range(dtmc.size)}


def unsafe_indices(dtmc: LearnedDTMC) -> set[int]:
    return {int(i) for i in np.flatnonzero(dtmc.unsafe)}


def test_exact_values_equal_the_hand_solution(toy_model: GuardModel) -> None:
    dtmc = toy_model.dtmc
    expected = reach_probabilities(exact_rows(dtmc), unsafe_indices(dtmc))
    outcome = check_dtmc(dtmc, REACH, method=Method.EXACT)
    assert outcome.values.tolist() == [float(expected[i]) for i in range(dtmc.size)]
    assert outcome.values[dtmc.states.index(AB)] == 1.0
    assert outcome.values[dtmc.end_index] == 0.0
    assert 0.0 < outcome.values[0] < 1.0


def test_sound_bounds_contain_the_exact_values(toy_model: GuardModel) -> None:
    dtmc = toy_model.dtmc
    expected = reach_probabilities(exact_rows(dtmc), unsafe_indices(dtmc))
    outcome = check_dtmc(dtmc, REACH, method=Method.SOUND, precision=1e-6)
    assert outcome.lower is not None and outcome.upper is not None
    for i in range(dtmc.size):
        assert Fraction(outcome.lower[i]) <= expected[i] <= Fraction(outcome.upper[i]), i
        assert math.isclose(outcome.values[i], expected[i], abs_tol=1e-5)
    # the model file caches exactly these certified values
    assert toy_model.outcome.method is Method.SOUND
    assert np.all(toy_model.outcome.lower <= toy_model.outcome.values)


@pytest.mark.parametrize("horizon", [0, 1, 2, 5])
def test_bounded_reachability_is_the_matrix_power(toy_model: GuardModel, horizon: int) -> None:
    dtmc = toy_model.dtmc
    expected = bounded_reach(exact_rows(dtmc), unsafe_indices(dtmc), horizon)
    formula = f'P=? [F<={horizon} "unsafe"]'
    exact = check_dtmc(dtmc, formula, method=Method.EXACT)
    assert exact.values.tolist() == [float(expected[i]) for i in range(dtmc.size)]
    sound = check_dtmc(dtmc, formula, method=Method.SOUND)
    assert all(math.isclose(sound.values[i], expected[i], abs_tol=1e-12) for i in range(dtmc.size))


def test_bounded_values_grow_to_the_unbounded_ones(toy_model: GuardModel) -> None:
    dtmc = toy_model.dtmc
    rows, unsafe = exact_rows(dtmc), unsafe_indices(dtmc)
    unbounded = reach_probabilities(rows, unsafe)
    previous = bounded_reach(rows, unsafe, 0)
    for h in range(1, 6):
        current = bounded_reach(rows, unsafe, h)
        assert all(previous[i] <= current[i] <= unbounded[i] for i in rows)
        previous = current


# -- Storm against an independent solver on random chains ------------------------------------


def random_chain(rng: np.random.Generator, n: int) -> tuple[sp.csr_matrix, list[int]]:
    """A random sparse chain: a few absorbing unsafe states, one absorbing end, and some
    transient states that may be trapped in loops that never reach unsafe."""
    n_unsafe = int(rng.integers(1, max(2, n // 10) + 1))
    unsafe = list(range(n - 1 - n_unsafe, n - 1))
    absorbing = set(unsafe) | {n - 1}
    trap = np.arange(int(rng.integers(0, 4)))  # a closed class of transient states: value 0
    rows, cols, vals = [], [], []
    for i in range(n):
        if i in absorbing:
            targets, probs = np.array([i]), np.array([1.0])
        else:
            pool = trap if i in trap else np.arange(n)
            k = int(rng.integers(1, min(5, pool.size) + 1))
            targets = np.sort(rng.choice(pool, size=k, replace=False))
            probs = rng.dirichlet(np.ones(k))
            probs[-1] = 1.0 - probs[:-1].sum()
            if probs[-1] <= 0:
                probs = np.full(k, 1.0 / k)
        rows += [i] * len(targets)
        cols += targets.tolist()
        vals += probs.tolist()
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, n)), unsafe


def independent_reach(matrix: sp.csr_matrix, unsafe: list[int]) -> tuple[np.ndarray, set[int]]:
    """P(F unsafe) by graph analysis plus a dense linear solve of (I − Q)x = b; and the
    states that reach unsafe at all."""
    n = matrix.shape[0]
    reach = set(unsafe)
    reverse = matrix.T.tocsr()
    frontier = list(unsafe)
    while frontier:
        j = frontier.pop()
        for i in reverse.indices[reverse.indptr[j]:reverse.indptr[j + 1]]:
            if int(i) not in reach:
                reach.add(int(i))
                frontier.append(int(i))
    maybe = np.array(sorted(reach - set(unsafe)), dtype=int)
    values = np.zeros(n)
    values[unsafe] = 1.0
    if maybe.size:
        dense = matrix.toarray()
        q = dense[np.ix_(maybe, maybe)]
        b = dense[np.ix_(maybe, np.array(unsafe, dtype=int))].sum(axis=1)
        values[maybe] = np.linalg.solve(np.eye(maybe.size) - q, b)
    return values, reach


@pytest.mark.parametrize("seed", range(20))
def test_storm_agrees_with_an_independent_solver_on_random_chains(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 61))
    matrix, unsafe = random_chain(rng, n)
    model = build_sparse_dtmc(matrix, {"unsafe": unsafe, "end": [n - 1], "init": [n // 2]})
    assert (model.nr_states, model.nr_transitions) == (n, matrix.nnz)
    expected, reach = independent_reach(matrix, unsafe)

    sound = check_sparse_model(model, REACH, method=Method.SOUND)
    assert sound.lower is not None and sound.upper is not None
    assert np.all(sound.lower <= expected + 1e-12) and np.all(expected <= sound.upper + 1e-12)
    assert np.all(sound.lower <= sound.values) and np.all(sound.values <= sound.upper)
    np.testing.assert_allclose(sound.values, expected, rtol=0, atol=1e-5)

    topological = check_sparse_model(model, REACH, method=Method.TOPOLOGICAL)
    assert topological.lower is None and topological.upper is None
    np.testing.assert_allclose(topological.values, expected, rtol=0, atol=1e-5)

    verdicts = ctl_verdicts(model)  # EF unsafe and AG !unsafe, from the graph alone
    assert verdicts["EF unsafe"].tolist() == [i in reach for i in range(n)]
    assert verdicts["AG !unsafe"].tolist() == [i not in reach for i in range(n)]


def test_exact_rows_build_a_rational_model() -> None:
    # 0 → {0: 1/3, 1: 1/3, 2: 1/3}; 1 unsafe; 2 end: P(F unsafe) from 0 is exactly 1/2
    rows = [[(0, Fraction(1, 3)), (1, Fraction(1, 3)), (2, Fraction(1, 3))], [(1, Fraction(1))],
            [(2, Fraction(1))]]
    matrix = sp.csr_matrix(([1 / 3, 1 / 3, 1 / 3, 1.0, 1.0], ([0, 0, 0, 1, 2], [0, 1, 2, 1, 2])), shape=(3, 3))
    model = build_sparse_dtmc(matrix, {"unsafe": [1], "end": [2], "init": [0]}, exact_rows=rows)
    outcome = check_sparse_model(model, REACH, method=Method.EXACT)
    assert outcome.values.tolist() == [0.5, 1.0, 0.0]


# -- export: PRISM and DRN read back through Storm -------------------------------------------


def test_prism_export_reads_back_with_the_same_chain_and_values(toy_model: GuardModel, tmp_path: Path) -> None:
    dtmc = toy_model.dtmc
    path = tmp_path / "toy.pm"
    path.write_text(prism_text(dtmc, name="toy"), encoding="utf-8")
    program = stormpy.parse_prism_program(str(path))
    options = stormpy.BuilderOptions()
    options.set_build_state_valuations()
    options.set_build_all_labels()
    model = stormpy.build_model(program, options=options)
    assert model.nr_states == dtmc.size
    # Storm numbers states in exploration order: map them back through the variable s
    s_of = [json.loads(str(model.state_valuations.to_json(k)))["s"] for k in range(model.nr_states)]
    assert sorted(s_of) == list(range(dtmc.size))
    assert {s_of[k] for k in model.initial_states} == set(dtmc.initial)

    labels = labels_of(dtmc)
    for k in range(model.nr_states):
        expected = {name for name, members in labels.items() if s_of[k] in members and name != "init"}
        assert set(model.labeling.get_labels_of_state(k)) - {"init"} == expected
        row = {s_of[t.column]: t.value for action in model.states[k].actions for t in action.transitions}
        learned = dtmc.matrix[s_of[k]].toarray().ravel()
        assert set(row) == set(np.flatnonzero(learned).tolist())
        # Storm reads decimals as rationals and rounds them back to doubles: within an ulp or two
        assert all(math.isclose(p, learned[j], rel_tol=1e-14) for j, p in row.items())

    exact = check_dtmc(dtmc, REACH, method=Method.EXACT).values
    for formula in (REACH, 'P=? [F<=3 "unsafe"]', 'P=? [!"end" U "a"]'):
        result = stormpy.model_checking(model, stormpy.parse_properties(formula, program)[0])
        from_prism = result.get_value_vector()
        ours = exact if formula == REACH else check_dtmc(dtmc, formula, method=Method.EXACT).values
        for k in range(model.nr_states):
            assert math.isclose(from_prism[k], ours[s_of[k]], abs_tol=1e-6), (formula, k)


def test_prism_export_keeps_every_initial_state(write_runs: WriteRuns, toy_spec: Spec) -> None:
    # with alpha 0, state B is reachable only as a start state
    path = write_runs([toy_run("p1", [0, 1, 3]), toy_run("p2", [2, 0])])
    dtmc = learn_model([path], toy_spec, alpha=0.0).dtmc
    text = prism_text(dtmc)
    assert "init s=0 | s=2 endinit" in text
    pm = path.with_suffix(".pm")
    pm.write_text(text, encoding="utf-8")
    model = stormpy.build_model(stormpy.parse_prism_program(str(pm)))
    assert model.nr_states == dtmc.size
    assert len(model.initial_states) == 2


def test_drn_export_round_trips(toy_model: GuardModel, tmp_path: Path) -> None:
    dtmc = toy_model.dtmc
    path = tmp_path / "toy.drn"
    export_drn(dtmc, path)
    model = stormpy.build_model_from_drn(str(path))
    assert model.model_type.name == "DTMC"
    assert model.nr_states == dtmc.size
    labels = labels_of(dtmc)
    for k in range(model.nr_states):  # DRN keeps Storm's numbering: state k is our state k
        assert set(model.labeling.get_labels_of_state(k)) == {n for n, m in labels.items() if k in m}
        row = {t.column: t.value for action in model.states[k].actions for t in action.transitions}
        learned = dtmc.matrix[k].toarray().ravel()
        assert row == {j: learned[j] for j in np.flatnonzero(learned).tolist()}  # 17 digits: exact
    result = stormpy.model_checking(model, stormpy.parse_properties(REACH)[0])
    exact = check_dtmc(dtmc, REACH, method=Method.EXACT).values
    np.testing.assert_allclose(result.get_value_vector(), exact, rtol=0, atol=1e-6)


# -- PRISM files people already have ---------------------------------------------------------

WALK = """\
dtmc
const int N;
const double p = 1/3;
module walk
  x : [0..N] init 1;
  [] x>0 & x<N -> p:(x'=x-1) + (1-p):(x'=x+1);
  [] x=0 | x=N -> 1:(x'=x);
endmodule
label "goal" = x=N;
"""


@pytest.fixture
def walk(tmp_path: Path) -> Path:
    path = tmp_path / "walk.pm"
    path.write_text(WALK, encoding="utf-8")
    return path


def gamblers_ruin(n: int, start: int, p_down: Fraction) -> Fraction:
    """P(reach N before 0) from ``start`` for a walk stepping down with p_down (closed form)."""
    r = p_down / (1 - p_down)
    return (1 - r**start) / (1 - r**n)


def test_prism_file_with_a_constant_given_on_the_command_line(walk: Path) -> None:
    result = check_prism_file(walk, 'P=? [F "goal"]', constants="N=3", method=Method.EXACT)
    assert result.states == 4
    assert result.initial == float(gamblers_ruin(3, 1, Fraction(1, 3)))  # 4/7
    assert sorted(result.values.tolist()) == sorted(float(gamblers_ruin(3, x, Fraction(1, 3))) for x in range(4))
    sound = check_prism_file(walk, 'P=? [F "goal"]', constants="N=3")
    assert math.isclose(sound.initial, 4 / 7, abs_tol=1e-5)
    bounded = check_prism_file(walk, 'P=? [F<=2 "goal"]', constants="N=3", method=Method.EXACT)
    assert bounded.initial == float(Fraction(2, 3) ** 2)  # up, up


@pytest.mark.parametrize(("formula", "constants", "match"), [
    ('P=? [F "goal"]', None, "undefined constants N"),
    ('P=? [F "goal"]', "M=3", "constants 'M=3'"),
    ('P=? [F "goal"', "N=3", "cannot parse property"),
    ('P=? [F "goal"]; P=? [F x=0]', "N=3", "exactly one property"),
])
def test_prism_file_errors(walk: Path, formula: str, constants: str | None, match: str) -> None:
    with pytest.raises(CheckError, match=match):
        check_prism_file(walk, formula, constants=constants)


def test_prism_file_that_is_not_a_dtmc(tmp_path: Path) -> None:
    path = tmp_path / "choice.pm"
    path.write_text("mdp\nmodule m\n  x : [0..1] init 0;\n  [a] x=0 -> (x'=1);\n  [b] x=0 -> true;\n"
                    "  [] x=1 -> true;\nendmodule\n", encoding="utf-8")
    with pytest.raises(CheckError, match="expected a DTMC, found a MDP"):
        check_prism_file(path, 'Pmax=? [F x=1]')


def test_prism_file_that_does_not_parse(tmp_path: Path) -> None:
    path = tmp_path / "broken.pm"
    path.write_text("dtmc\nmodule m\n  x : [0..1] init 0\nendmodule\n", encoding="utf-8")
    with pytest.raises(CheckError, match="PRISM model does not parse"):
        check_prism_file(path, 'P=? [F x=1]')


@pytest.mark.parametrize("formula", ['P=? [F "unsafe"', "nonsense", 'P=? [F "a"]; P=? [F "b"]'])
def test_formulas_storm_cannot_parse(formula: str) -> None:
    with pytest.raises(CheckError):
        validate_formula(formula)


def test_a_formula_over_an_unknown_label(toy_model: GuardModel) -> None:
    with pytest.raises(CheckError, match="could not check"):
        check_dtmc(toy_model.dtmc, 'P=? [F "nowhere"]')
