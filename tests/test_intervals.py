"""Confidence intervals: exact interval values, Storm's interval-chain bounds against an exact
oracle, coverage by simulation, the model file, decisions and bad input."""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import scipy.sparse as sp

from _coverage import coverage
from _support import AB, CLI, NONE, TOY_SPEC, A, B, reach_probabilities, toy_run, toy_state
from forewarn.errors import ForewarnError, ModelFileError, SpecError
from forewarn.guard import Guard
from forewarn.guard.intervals import (
    IntervalMethod,
    clopper_pearson,
    estimated_entries,
    hoeffding,
    transition_intervals,
    visits,
)
from forewarn.guard.learning import END, LearnedDTMC
from forewarn.guard.model import GuardModel, _checksum
from forewarn.guard.pipeline import learn_model
from forewarn.guard.policy import Policy
from forewarn.guard.spec import Action, Thresholds, parse_spec
from forewarn.guard.storm import GRAPH_FLOOR, build_interval_dtmc, interval_bounds

F = Fraction


# -- per-entry intervals: exact values -----------------------------------------------------


@pytest.mark.parametrize("n", [1, 5, 40])
def test_clopper_pearson_closed_forms_at_the_ends(n: int) -> None:
    delta = 0.01
    low, high = clopper_pearson(np.array([0, n]), np.array([n, n]), delta)
    # x = 0: [0, 1 − (δ/2)^(1/n)];  x = n: [(δ/2)^(1/n), 1]
    assert low[0] == 0.0 and high[1] == 1.0
    assert high[0] == pytest.approx(1 - (delta / 2) ** (1 / n), abs=1e-12)
    assert low[1] == pytest.approx((delta / 2) ** (1 / n), abs=1e-12)


def _binomial_tail(n: int, p: Fraction, at_least: int) -> Fraction:
    return sum((math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(at_least, n + 1)), F(0))


@pytest.mark.parametrize("x,n", [(1, 4), (3, 10), (7, 9), (20, 50)])
def test_clopper_pearson_ends_solve_the_binomial_tail_equations(x: int, n: int) -> None:
    """P[Bin(n, low) ≥ x] = δ/2 and P[Bin(n, high) ≤ x] = δ/2, evaluated exactly at the float ends."""
    delta = 0.05
    low, high = clopper_pearson(np.array([x]), np.array([n]), delta)
    assert float(_binomial_tail(n, F(float(low[0])), x)) == pytest.approx(delta / 2, rel=1e-9)
    assert float(1 - _binomial_tail(n, F(float(high[0])), x + 1)) == pytest.approx(delta / 2, rel=1e-9)


def test_hoeffding_closed_form() -> None:
    low, high = hoeffding(np.array([30, 0]), np.array([100, 100]), 0.1)
    radius = math.sqrt(math.log(2 / 0.1) / 200)
    assert low[0] == pytest.approx(0.3 - radius) and high[0] == pytest.approx(0.3 + radius)
    assert low[1] == 0.0 and high[1] == pytest.approx(radius)  # clipped at 0


def _hand_chain() -> LearnedDTMC:
    """States 0, 1 (transient), 2 (unsafe), 3 (end). Row 0: counts 6→0, 3→2, 1→end (α = 0.5);
    row 1 was never left (uniform over 0, 2, end)."""
    counts = sp.csr_matrix(np.array([[6, 0, 3, 1], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], dtype=float))
    counts = sp.csr_matrix((np.array([6, 3, 1, 0, 0, 0, 0, 0], dtype=float),
                            np.array([0, 2, 3, 0, 2, 3, 2, 3]), np.array([0, 3, 6, 7, 8])), shape=(4, 4))
    probs = np.array([6.5 / 11.5, 3.5 / 11.5, 1.5 / 11.5, 1 / 3, 1 / 3, 1 / 3, 1.0, 1.0])
    matrix = sp.csr_matrix((probs, counts.indices.copy(), counts.indptr.copy()), shape=(4, 4))
    return LearnedDTMC(predicates=["a", "b"], states=[0, 1, 3, END], unsafe=np.array([False, False, True, False]),
                       initial={0: 10}, counts=counts, matrix=matrix, alpha=0.5)


def test_transition_intervals_on_a_hand_built_chain() -> None:
    chain = _hand_chain()
    assert visits(chain).tolist() == [10, 0, 0, 0]
    assert estimated_entries(chain) == 6  # two transient rows of three successors
    iv = transition_intervals(chain, delta=0.06)
    assert iv.delta_per_entry == pytest.approx(0.01) and iv.entries == 6
    cp_low, cp_high = clopper_pearson(np.array([6, 3, 1]), np.array([10, 10, 10]), 0.01)
    point = chain.matrix.data
    # row 0: Clopper–Pearson at δ/6, widened to contain the smoothed estimate
    assert iv.lower[:3].tolist() == np.minimum(cp_low, point[:3]).tolist()
    assert iv.upper[:3].tolist() == np.maximum(cp_high, point[:3]).tolist()
    # row 1, never left: [0, 1]; absorbing rows: [1, 1]
    assert iv.lower[3:6].tolist() == [0, 0, 0] and iv.upper[3:6].tolist() == [1, 1, 1]
    assert iv.lower[6:].tolist() == [1, 1] and iv.upper[6:].tolist() == [1, 1]
    # the point estimate inside, so lower sums ≤ 1 ≤ upper sums per row
    assert np.all(iv.lower <= point) and np.all(point <= iv.upper)
    rows = np.repeat(np.arange(4), np.diff(chain.matrix.indptr))
    assert np.all(np.bincount(rows, iv.lower) <= 1 + 1e-12) and np.all(np.bincount(rows, iv.upper) >= 1 - 1e-12)
    wider = transition_intervals(chain, delta=0.06, method="hoeffding")
    assert np.all(wider.upper[:3] - wider.lower[:3] >= iv.upper[:3] - iv.lower[:3] - 1e-12)


def test_the_smoothed_estimate_widens_an_interval() -> None:
    """With a large α the estimate leaves the count's interval; the interval grows to hold it."""
    chain = _hand_chain()
    chain.matrix.data[:3] = [0.1, 0.1, 0.8]  # as if α were huge: far from 6/10, 3/10, 1/10
    iv = transition_intervals(chain, delta=0.06)
    cp_low, cp_high = clopper_pearson(np.array([6, 1]), np.array([10, 10]), 0.01)
    assert cp_low[0] > 0.1 and iv.lower[0] == 0.1
    assert cp_high[1] < 0.8 and iv.upper[2] == 0.8


@pytest.mark.parametrize("delta", [0.0, 1.0, -0.1, 1.5])
def test_delta_outside_the_unit_interval_is_refused(delta: float) -> None:
    with pytest.raises(ValueError, match="delta must lie in"):
        transition_intervals(_hand_chain(), delta=delta)


# -- Storm's interval chain against an exact oracle ----------------------------------------


def _vertices(low: list[Fraction], high: list[Fraction]) -> list[list[Fraction]]:
    """Vertices of {p : low ≤ p ≤ high, Σp = 1}: all but one entry at an end, the last one free."""
    out = []
    k = len(low)
    for free in range(k):
        others = [j for j in range(k) if j != free]
        for ends in itertools.product((0, 1), repeat=k - 1):
            p = [F(0)] * k
            for j, e in zip(others, ends):
                p[j] = high[j] if e else low[j]
            p[free] = 1 - sum(p, F(0))
            if low[free] <= p[free] <= high[free]:
                out.append(p)
    return out


def _exact_extremes(rows: dict[int, list[tuple[int, Fraction, Fraction]]], target: int,
                    absorbing: list[int]) -> tuple[dict[int, Fraction], dict[int, Fraction]]:
    """Min and max reach probability over every choice of one vertex per state (optimal policies
    are stationary and pick vertices), each chain solved exactly with Fractions."""
    states = sorted(rows)
    choices = [[dict(zip([j for j, _, _ in rows[s]], v)) for v in
                _vertices([lo for _, lo, _ in rows[s]], [hi for _, _, hi in rows[s]])] for s in states]
    low: dict[int, Fraction] = {}
    high: dict[int, Fraction] = {}
    for pick in itertools.product(*choices):
        chain = dict(zip(states, pick)) | {a: {a: F(1)} for a in absorbing}
        values = reach_probabilities(chain, {target})
        for s in states:
            low[s] = min(low.get(s, F(2)), values[s])
            high[s] = max(high.get(s, F(-1)), values[s])
    return low, high


def test_storm_interval_bounds_match_the_exact_vertex_oracle() -> None:
    # states 0, 1 transient; 2 unsafe; 3 end
    rows = {0: [(0, F(1, 10), F(3, 10)), (1, F(2, 10), F(5, 10)), (2, F(1, 20), F(2, 10)), (3, F(1, 10), F(4, 10))],
            1: [(0, F(1, 10), F(6, 10)), (2, F(1, 10), F(3, 10)), (3, F(2, 10), F(5, 10))]}
    entries = [(s, j, lo, hi) for s in (0, 1) for j, lo, hi in rows[s]] + [(2, 2, F(1), F(1)), (3, 3, F(1), F(1))]
    matrix = sp.csr_matrix((np.ones(len(entries)), ([e[0] for e in entries], [e[1] for e in entries])), shape=(4, 4))
    lower = np.array([float(e[2]) for e in entries])
    upper = np.array([float(e[3]) for e in entries])
    model = build_interval_dtmc(matrix, lower, upper, {"unsafe": [2], "end": [3]})
    bounds = interval_bounds(model, 'P=? [F "unsafe"]', precision=1e-10)
    assert bounds is not None
    low, high, _ = bounds
    exact_low, exact_high = _exact_extremes(rows, 2, [2, 3])
    for s in (0, 1):
        assert low[s] == pytest.approx(float(exact_low[s]), abs=1e-8)
        assert high[s] == pytest.approx(float(exact_high[s]), abs=1e-8)
    assert low[2] == high[2] == 1.0 and low[3] == high[3] == 0.0
    # G φ is read as 1 − F ¬φ
    safe = interval_bounds(model, 'P=? [G !"unsafe"]', precision=1e-10)
    assert safe is not None
    assert safe[0][:2] == pytest.approx(1 - high[:2], abs=1e-8)
    assert safe[1][:2] == pytest.approx(1 - low[:2], abs=1e-8)
    # an LTL formula Storm cannot check on interval models: no bounds, no error
    assert interval_bounds(model, 'P=? [F G "unsafe"]') is None


def test_zero_lower_ends_get_the_graph_floor() -> None:
    """Storm needs positive lower ends; an entry [0, h] is checked as [GRAPH_FLOOR, h]."""
    matrix = sp.csr_matrix((np.ones(5), ([0, 0, 0, 1, 2], [0, 1, 2, 1, 2])), shape=(3, 3))
    model = build_interval_dtmc(matrix, np.array([0.0, 0.0, 0.5, 1, 1]), np.array([0.5, 0.5, 1.0, 1, 1]),
                                {"unsafe": [1], "end": [2]})
    bounds = interval_bounds(model, 'P=? [F "unsafe"]', precision=1e-10)
    assert bounds is not None
    assert bounds[1][0] == pytest.approx(0.5, abs=1e-7)  # the adversary sends 1/2 to unsafe, 1/2 to end
    assert bounds[0][0] == pytest.approx(GRAPH_FLOOR / (GRAPH_FLOOR + 1.0), abs=1e-7)


# -- coverage by simulation ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["balanced", "rare", "sticky"])
def test_coverage_by_simulation(name: str) -> None:
    """≥ 200 learnings from simulated runs of a known chain: the exact risk of every learned state
    lies inside its interval in at least 1 − δ of them (bench/interval_check.py runs more)."""
    result = coverage(name, learnings=200, runs=100, delta=0.1, seed=hash(name) % 1000)
    print(result.line())  # the point estimate's error beside the coverage (pytest -s shows it)
    assert result.learnings == 200
    assert result.rate >= 1 - 0.1
    # the point estimate alone is almost never exact: coverage is the interval's doing
    assert np.mean(np.array(result.point_errors) > 1e-3) > 0.5


def test_hoeffding_coverage_and_width() -> None:
    hf = coverage("rare", learnings=200, runs=100, delta=0.1, seed=5, method=IntervalMethod.HOEFFDING)
    cp = coverage("rare", learnings=40, runs=100, delta=0.1, seed=5)  # the first 40 of the same learnings
    print(hf.line())
    assert hf.rate >= 0.9
    assert np.mean(hf.widths[:len(cp.widths)]) > np.mean(cp.widths)  # same data: Hoeffding is the wider


# -- learned models, the model file and decisions ------------------------------------------


RUNS = [toy_run("r1", [0, 1, 3]), toy_run("r2", [0, 2, 2]), toy_run("r3", [0, 1, 0]), toy_run("r4", [0, 2, 1, 3]),
        toy_run("r5", [0, 0, 2])] * 4


@pytest.fixture
def learned(tmp_path: Path) -> GuardModel:
    traces = tmp_path / "t.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in RUNS) + b"\n")
    return learn_model([traces], parse_spec(TOY_SPEC))


def test_a_learned_model_carries_intervals_that_hold_its_values(learned: GuardModel) -> None:
    prop = learned.properties[0]
    assert prop.ci_low is not None and prop.ci_high is not None
    values = prop.outcome.values
    assert np.all(prop.ci_low <= values) and np.all(values <= prop.ci_high)
    assert learned.intervals is not None and learned.intervals.method is IntervalMethod.CLOPPER_PEARSON
    assert learned.intervals.delta == 0.05
    index = learned.dtmc.index()
    assert learned.visits[index[NONE]] == 28  # 20 runs start there, 8 stay a step
    assert learned.visits[index[AB]] == 0  # unsafe: absorbing
    wide = prop.ci_high[index[NONE]] - prop.ci_low[index[NONE]]
    assert 0.2 < wide < 1.0


def test_model_file_round_trip_and_older_files(learned: GuardModel, tmp_path: Path) -> None:
    path = learned.save(tmp_path / "m.json")
    again = GuardModel.load(path)
    again_low, learned_low = again.properties[0].ci_low, learned.properties[0].ci_low
    assert again_low is not None and learned_low is not None and again_low.tolist() == learned_low.tolist()
    assert again.intervals == learned.intervals
    document = orjson.loads(path.read_bytes())
    assert document["visits"] == learned.visits.tolist()
    # a file written before intervals existed
    for key in ("intervals", "visits"):
        del document[key]
    for prop in document["properties"]:
        del prop["ci_low"], prop["ci_high"]
        prop.pop("markov_mismatch", None)  # written since the Markov test, with the intervals
    document["checksum"] = _checksum(document)
    old = GuardModel.from_document(document)
    assert old.intervals is None and old.properties[0].ci_low is None
    decision = Guard(old).decide(toy_state(NONE))
    assert decision.ci_low is None and decision.ci_high is None and decision.visits == 28


def _tampered(learned: GuardModel, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    document = learned.to_document()
    change(document)
    document["checksum"] = _checksum(document)
    return document


def test_intervals_that_miss_the_value_are_rejected(learned: GuardModel) -> None:
    state = learned.dtmc.index()[A]

    def shrink(document: dict[str, Any]) -> None:
        prop = document["properties"][0]
        prop["ci_low"][state] = prop["values"][state] + 0.01

    with pytest.raises(ModelFileError, match=rf"properties\[0\] \(unsafe\): state {state}'s confidence interval"):
        GuardModel.from_document(_tampered(learned, shrink))

    def outside(document: dict[str, Any]) -> None:
        document["properties"][0]["ci_high"][state] = 1.5

    with pytest.raises(ModelFileError, match=rf"ci_high: probabilities must lie in \[0, 1\] \(state {state}"):
        GuardModel.from_document(_tampered(learned, outside))

    def half(document: dict[str, Any]) -> None:
        document["properties"][0]["ci_high"] = None

    with pytest.raises(ModelFileError, match="give both ci_low and ci_high"):
        GuardModel.from_document(_tampered(learned, half))

    def miscount(document: dict[str, Any]) -> None:
        document["visits"][state] += 1

    with pytest.raises(ModelFileError, match="visits must give"):
        GuardModel.from_document(_tampered(learned, miscount))


def test_decisions_carry_the_interval_and_the_visits(learned: GuardModel) -> None:
    guard = Guard(learned, policy=Policy(Thresholds(reflect=0.99)))
    decision = guard.decide(toy_state(A))
    index = learned.dtmc.index()[A]
    prop = learned.properties[0]
    assert prop.ci_low is not None and prop.ci_high is not None
    assert decision.ci_low == prop.ci_low[index] and decision.ci_high == prop.ci_high[index]
    assert decision.visits == learned.visits[index] == 12
    assert decision.lower is not None and decision.upper is not None
    assert decision.upper - decision.lower < 1e-5  # Storm's, unchanged
    data = decision.to_dict()
    assert data["ci_low"] == decision.ci_low and data["ci_high"] == decision.ci_high and data["visits"] == 12
    assert data["properties"][0]["ci_low"] == decision.ci_low
    assert decision.action is Action.REFLECT
    assert (f"{decision.p_unsafe:.1%} (95% interval [{decision.ci_low:.1%}, {decision.ci_high:.1%}], "
            "from 12 visits)") in decision.message


def test_act_on_the_upper_end(learned: GuardModel) -> None:
    index = learned.dtmc.index()[B]
    prop = learned.properties[0]
    assert prop.ci_high is not None
    p, high = prop.outcome.values[index], prop.ci_high[index]
    theta = 1 - (p + high) / 2  # p_safe is above it, the pessimistic p_safe below
    point = Guard(learned, policy=Policy(Thresholds(stop=theta))).decide(toy_state(B))
    upper = Guard(learned, policy=Policy(Thresholds(stop=theta), act_on="upper")).decide(toy_state(B))
    assert point.action is Action.ALLOW
    assert upper.action is Action.STOP and "pessimistic probability of staying safe" in upper.message
    assert upper.p_unsafe == point.p_unsafe  # the point estimate is still reported as is


def test_min_visits_treats_thin_evidence_as_unseen(learned: GuardModel) -> None:
    policy = Policy(Thresholds(stop=0.01), unseen_state=Action.ASK_HUMAN, min_visits=13)
    guard = Guard(learned, policy=policy)
    thin = guard.decide(toy_state(A))  # 12 visits
    assert thin.action is Action.ASK_HUMAN and thin.visits == 12 and thin.p_unsafe is not None
    assert "left only 12 times" in thin.message and "min_visits 13" in thin.message
    assert guard.decide(toy_state(B)).action is Action.ALLOW  # 16 visits
    assert guard.decide(toy_state(AB)).action is Action.STOP  # a violation is never "unseen"
    overridden = Guard(learned).session(Policy(Thresholds(stop=0.01)).with_overrides({"min_visits": 0})).guard
    assert overridden.decide(toy_state(A)).action is Action.ALLOW


def test_satisfaction_properties_flip_their_interval(tmp_path: Path) -> None:
    spec = parse_spec(TOY_SPEC.replace("guard:\n", "guard:\n  properties:\n    - name: safe\n"
                                       "      formula: 'G !\"unsafe\"'\n      meaning: satisfaction\n"))
    traces = tmp_path / "t.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in RUNS) + b"\n")
    model = learn_model([traces], spec)
    prop = model.properties[0]
    assert prop.ci_low is not None and prop.ci_high is not None  # G is checked as 1 − F ¬
    index = model.dtmc.index()[A]
    decision = Guard(model).decide(toy_state(A))
    assert decision.p_unsafe == pytest.approx(1 - prop.outcome.values[index])
    assert decision.ci_low == pytest.approx(1 - prop.ci_high[index])
    assert decision.ci_high == pytest.approx(1 - prop.ci_low[index])


def test_interval_method_none_and_hoeffding(tmp_path: Path) -> None:
    traces = tmp_path / "t.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in RUNS) + b"\n")
    none = learn_model([traces], parse_spec(TOY_SPEC.replace("  delta: 0.05\n", "  delta: 0.05\n  intervals: none\n")))
    assert none.intervals is None and none.properties[0].ci_low is None
    assert Guard(none).decide(toy_state(A)).ci_low is None
    cp = learn_model([traces], parse_spec(TOY_SPEC))
    hf = learn_model([traces], parse_spec(TOY_SPEC.replace("  delta: 0.05\n", "  delta: 0.05\n  intervals: hoeffding\n")))
    assert hf.intervals is not None and hf.intervals.method is IntervalMethod.HOEFFDING
    i = hf.dtmc.index()[A]
    (hf_low, hf_high), (cp_low, cp_high) = [(m.properties[0].ci_low, m.properties[0].ci_high) for m in (hf, cp)]
    assert hf_low is not None and hf_high is not None and cp_low is not None and cp_high is not None
    assert hf_high[i] - hf_low[i] >= cp_high[i] - cp_low[i]


def test_products_with_monitors_inherit_their_chain_intervals(tmp_path: Path) -> None:
    spec = parse_spec(TOY_SPEC + "monitors:\n  - name: b_after_a\n    kind: bounded_response\n    trigger: a\n"
                                 "    response: b\n    within: 1\n")
    traces = tmp_path / "t.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in RUNS) + b"\n")
    model = learn_model([traces], spec)
    product = model.dtmc
    assert product.monitors and model.properties[0].ci_low is not None
    chain_spec = parse_spec(TOY_SPEC)
    chain_model = learn_model([traces], chain_spec)
    # the same counts per chain state, so the same visits and the same union bound
    chain_index = chain_model.dtmc.index()
    for i, bits in enumerate(product.states[:-1]):
        if not product.unsafe[i]:
            assert model.visits[i] == chain_model.visits[chain_index[bits]]
    assert model.intervals is not None and chain_model.intervals is not None
    assert model.intervals.entries == chain_model.intervals.entries
    # every product transition has exactly its chain transition's interval
    ours = transition_intervals(product, delta=0.05, entries=model.intervals.entries)
    theirs = transition_intervals(chain_model.dtmc, delta=0.05)
    chain_of = [chain_index.get(bits, chain_model.dtmc.end_index) for bits in product.states]
    chain_of[-1] = chain_model.dtmc.end_index
    m, c = product.matrix, chain_model.dtmc.matrix
    for i in range(product.size - 1):
        if product.absorbing[i]:
            continue
        for k in range(m.indptr[i], m.indptr[i + 1]):
            src, dst = chain_of[i], chain_of[m.indices[k]]
            row = range(c.indptr[src], c.indptr[src + 1])
            (e,) = [e for e in row if c.indices[e] == dst]
            assert (ours.lower[k], ours.upper[k]) == (theirs.lower[e], theirs.upper[e])
    values = model.properties[0].outcome.values
    assert np.all(model.properties[0].ci_low <= values) and np.all(values <= model.properties[0].ci_high)


# -- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize("text,where", [
    ("learning:\n  delta: 1.5\n", "delta"),
    ("learning:\n  delta: 0\n", "delta"),
    ("learning:\n  intervals: wilson\n", "intervals"),
    ("guard:\n  min_visits: -1\n", "min_visits"),
    ("guard:\n  act_on: lower\n", "act_on"),
])
def test_bad_settings_in_the_spec(text: str, where: str) -> None:
    base = "name: t\npredicates:\n  a: 'state.a'\nunsafe: 'a'\n"
    with pytest.raises(SpecError, match=where) as info:
        parse_spec(base + text, source="spec.yaml")
    assert "spec.yaml" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("overrides,problem", [
    ({"min_visits": -2}, "min_visits must be a whole number >= 0"),
    ({"min_visits": 1.5}, "min_visits must be a whole number >= 0"),
    ({"act_on": "lower"}, "act_on must be 'point' or 'upper'"),
])
def test_bad_policy_overrides(overrides: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Policy(Thresholds(stop=0.2)).with_overrides(overrides)


def test_bad_delta_from_a_caller(tmp_path: Path) -> None:
    traces = tmp_path / "t.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in RUNS) + b"\n")
    with pytest.raises(ForewarnError, match=r"learning delta must lie strictly between 0 and 1, got 1.5"):
        learn_model([traces], parse_spec(TOY_SPEC), delta=1.5)


# -- surfaces: CLI, HTTP, middleware -------------------------------------------------------


def test_cli_check_and_learn_show_the_intervals(tmp_path: Path, forewarn_here: CLI,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    traces = tmp_path / "t.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in RUNS) + b"\n")
    spec = tmp_path / "toy.yaml"
    spec.write_text(TOY_SPEC, encoding="utf-8")
    model = tmp_path / "m.json"
    learned = forewarn_here("learn", traces, "--spec", spec, "-o", model, "--format", "json")
    assert learned.returncode == 0, learned.stderr
    summary = orjson.loads(learned.stdout)["initial_interval"]
    assert summary["ci_low"] < orjson.loads(learned.stdout)["initial_risk"] < summary["ci_high"]
    assert summary["confidence"] == 0.95 and summary["visits"] == 28
    table = forewarn_here("learn", traces, "--spec", spec, "-o", model)
    assert "95% interval [" in table.stdout and "from 28 visits" in table.stdout
    assert "The interval is wide" in table.stdout  # [2.5 %, 95.0 %] from 20 runs
    checked = forewarn_here("check", model, "--format", "json")
    assert checked.returncode == 0 and checked.stderr == ""  # Storm's notices stay off both streams
    document = orjson.loads(checked.stdout)
    loaded = GuardModel.load(model)
    assert loaded.properties[0].ci_low is not None and loaded.properties[0].ci_high is not None
    for i, row in enumerate(document["states"]):
        assert row["ci_low"] == loaded.properties[0].ci_low[i] and row["ci_high"] == loaded.properties[0].ci_high[i]
        assert row["visits"] == loaded.visits[i]
    assert document["intervals"]["method"] == "clopper_pearson+outcomes"
    query = orjson.loads(forewarn_here("check", model, "-p", 'P=? [F<=2 "unsafe"]', "--format", "json").stdout)
    for row in query["states"]:  # a new property gets its interval from the same interval chain
        assert row["ci_low"] <= row["value"] <= row["ci_high"]
    listed = orjson.loads(forewarn_here("states", model, "--format", "json").stdout)["states"]
    guard = Guard(loaded)
    for row in listed:  # `forewarn states` reads them from the decisions
        decision = guard.decide_bits(loaded.dtmc.states[row["index"]])
        assert (row["ci_low"], row["ci_high"]) == (decision.ci_low, decision.ci_high)
        assert row["ci_low"] is not None and row["visits"] == loaded.visits[row["index"]]
    from forewarn.guard.cli._options import out

    monkeypatch.setattr(out, "width", 200)
    text = forewarn_here("check", model).stdout
    i = loaded.dtmc.index()[A]
    assert "95% interval" in text and f"[{loaded.properties[0].ci_low[i]:.3f}, " in text


def test_cli_refuses_a_bad_delta_in_one_line(tmp_path: Path, forewarn_here: CLI) -> None:
    traces = tmp_path / "t.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in RUNS) + b"\n")
    spec = tmp_path / "toy.yaml"
    spec.write_text(TOY_SPEC, encoding="utf-8")
    result = forewarn_here("learn", traces, "--spec", spec, "-o", tmp_path / "m.json", "--delta", "1.5")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "delta must lie strictly between 0 and 1, got 1.5" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m.json").exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text(TOY_SPEC.replace("  unseen_state: ask_human\n", "  unseen_state: ask_human\n  min_visits: -1\n"),
                   encoding="utf-8")
    result = forewarn_here("learn", traces, "--spec", bad, "-o", tmp_path / "m.json")
    assert result.returncode == 2 and "bad.yaml:15: guard.min_visits" in result.stderr


def test_an_ltl_property_storm_cannot_bound_has_no_interval(tmp_path: Path, forewarn_here: CLI) -> None:
    """Storm checks LTL on point chains but not on interval chains: that property gets no interval,
    the others do, and Storm's notice stays out of the CLI's JSON."""
    spec = tmp_path / "ltl.yaml"
    spec.write_text(TOY_SPEC.replace("guard:\n", "guard:\n  properties:\n"
                                     "    - {name: unsafe, formula: 'F \"unsafe\"'}\n"
                                     "    - {name: a_then_leave, formula: '(F \"a\") & (X !\"a\")'}\n"), encoding="utf-8")
    traces = tmp_path / "t.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in RUNS) + b"\n")
    result = forewarn_here("learn", traces, "--spec", spec, "-o", tmp_path / "m.json", "--format", "json")
    # stderr holds only the start-risk warnings (the toy thresholds are crossed at the start)
    assert result.returncode == 0 and all(line.startswith("warning: ") for line in result.stderr.splitlines())
    assert orjson.loads(result.stdout)["initial_interval"] is not None  # valid JSON, nothing else on stdout
    model = GuardModel.load(tmp_path / "m.json")
    assert model.properties[0].ci_low is not None and model.properties[1].ci_low is None
    decision = Guard(model).decide(toy_state(A))
    assert {p.name: p.ci_low is None for p in decision.properties} == {"unsafe": False, "a_then_leave": True}
