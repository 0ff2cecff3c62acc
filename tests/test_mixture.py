"""learning.kinds: a mixture of chains over latent run kinds (guard/mixture.py, mixture_check.py, mixture_posterior.py).

Oracles: the single chain (one kind must be it, bit for bit), the known kinds of the two-types
fixture (bench/_coverage.py), and posteriors computed by hand in Fractions.
"""
from __future__ import annotations

import copy
import itertools
import math
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from _coverage import MIXTURES, kinds_coverage, simulate
from _support import AB, NONE, TOY_SPEC, A, B, toy_run, toy_state
from forewarn.errors import ModelFileError, SpecError
from forewarn.guard.intervals import IntervalMethod, clopper_pearson, estimated_entries
from forewarn.guard.learning import END, learn_dtmc
from forewarn.guard.mixture import choose_kinds, fit_mixture, path_table
from forewarn.guard.mixture_bounds import transition_moments
from forewarn.guard.mixture_check import kind_intervals, simplex_extreme
from forewarn.guard.mixture_posterior import Belief, KindColumns, KindMixture
from forewarn.guard.model import GuardModel
from forewarn.guard.pipeline import learn_model, model_from_counts, prepare
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.replay import replay_run
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import Spec, parse_spec
from forewarn.guard.storm import Method
from forewarn.guard.traces import Run

F = Fraction


def kinds_spec(kinds: int | str) -> Spec:
    return parse_spec(TOY_SPEC.replace("  delta: 0.05\n", f"  delta: 0.05\n  kinds: {kinds}\n"))


def simulated(name: str, runs: int, seed: int) -> tuple[PredicateSet, Counter[tuple[int, ...]], Any]:
    predicates = PredicateSet(parse_spec(TOY_SPEC))
    paths: Counter[tuple[int, ...]] = Counter()
    counts = simulate(MIXTURES[name], runs, np.random.default_rng(seed), predicates, paths=paths)
    return predicates, paths, counts


# -- one kind is today's chain -------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.0, 0.1, 1.0])
def test_one_kind_is_the_chain_bit_for_bit(alpha: float) -> None:
    predicates, paths, counts = simulated("two_types", 300, seed=1)
    chain = learn_dtmc(counts, predicates, alpha=alpha)
    mixture = fit_mixture(path_table(paths, predicates, chain), chain, 1, alpha)
    assert mixture.weights.tolist() == [1.0]
    assert np.array_equal(mixture.probabilities[0], chain.matrix.data)  # the same floats, not close ones
    # the weighted counts are the counts, exactly (as rationals)
    assert [F(x) for x in mixture.counts[0].tolist()] == [F(x) for x in chain.counts.data.tolist()]
    assert np.all(mixture.responsibilities == 1.0)


def test_kinds_one_and_auto_on_one_kind_learn_the_default_model() -> None:
    _, paths, counts = simulated("balanced", 300, seed=2)
    spec = parse_spec(TOY_SPEC)
    models = []
    for s in (spec, kinds_spec(1), kinds_spec("auto")):
        p, monitors = prepare(s)
        models.append(model_from_counts(counts, s, p, monitors, paths=paths))
    default, one, auto = models
    assert "kinds" not in default.to_document() and "kinds" not in one.to_document() and auto.kinds is None
    assert auto.provenance["levers"]["kinds"]["chosen"] == 1  # held-out runs found no second kind
    for other in (one, auto):
        for a, b in zip(default.properties, other.properties):
            assert np.array_equal(a.outcome.values, b.outcome.values)
            assert a.ci_low is not None and b.ci_low is not None and a.ci_high is not None and b.ci_high is not None
            assert np.array_equal(a.ci_low, b.ci_low) and np.array_equal(a.ci_high, b.ci_high)


# -- EM recovers known kinds -----------------------------------------------------------------------

def test_em_recovers_the_two_known_kinds_within_their_intervals() -> None:
    predicates, paths, counts = simulated("two_types", 3000, seed=5)
    chain = learn_dtmc(counts, predicates, alpha=0.1)
    table = path_table(paths, predicates, chain)
    mixture = fit_mixture(table, chain, 2, 0.1)
    rows = np.repeat(np.arange(chain.size), np.diff(chain.matrix.indptr))
    truth = [chain_of for _, chain_of in MIXTURES["two_types"]]
    index = chain.index()
    matrix = chain.matrix
    delta = 0.05
    matched = set()
    for k in range(2):
        part = learn_dtmc(counts, predicates, alpha=0.1)  # the pooled pattern, with kind k's numbers
        part.matrix.data[:] = mixture.probabilities[k]
        part.counts.data[:] = mixture.counts[k]
        moments = transition_moments(table.counts, table.weight, mixture.responsibilities[:, k], rows, chain.size)
        # the latent count's mean is the kind's weighted count (from the responsibilities one E-step later)
        assert np.allclose(moments[0], mixture.counts[k], rtol=1e-4, atol=1e-3)
        lower, upper, _, _ = kind_intervals(part, moments[1:], delta / 2, IntervalMethod.CLOPPER_PEARSON,
                                            estimated_entries(part))
        # the kind that goes to B first intends the hazard (fixture order: truth[0])
        goes_to_b = mixture.probabilities[k][_entry(matrix, index[NONE], index[B])] > 0.5
        true = truth[0] if goes_to_b else truth[1]
        matched.add(goes_to_b)
        for source, row in true.items():
            i = index[source]
            for target in [NONE, A, B, AB, END]:
                j = chain.end_index if target == END else index.get(target)
                if j is None:
                    continue
                e = _entry(matrix, i, j)
                if e is None:
                    assert row.get(target, 0) == 0
                    continue
                p = float(row.get(target, 0))
                assert lower[e] - 1e-12 <= p <= upper[e] + 1e-12, (source, target, p)
        # the kind's weight inside the exact interval of its share of runs
        low, high = clopper_pearson(np.array([round(mixture.weights[k] * 3000)]), np.array([3000]), delta)
        assert low[0] <= 0.5 <= high[0]
    assert matched == {True, False}  # one kind each


def _entry(matrix: Any, i: int, j: int) -> int | None:
    row = matrix.indices[matrix.indptr[i]:matrix.indptr[i + 1]].tolist()
    return int(matrix.indptr[i]) + row.index(j) if j in row else None


def test_auto_finds_two_kinds_where_there_are_two_and_says_why() -> None:
    predicates, paths, counts = simulated("two_types", 400, seed=3)
    chain = learn_dtmc(counts, predicates, alpha=0.1)
    table = path_table(paths, predicates, chain)
    kinds, scores = choose_kinds(table, chain, 0.1)
    assert kinds == 2
    assert scores[2] < scores[1] and scores[2] < scores[3]  # BIC: lower is better, and a third kind does not help
    for k in (1, 2, 3):  # each score is −2·log L + d·ln R of the fit, with d counted by hand for this chain
        fitted = fit_mixture(table, chain, k, 0.1)
        lengths = np.diff(chain.matrix.indptr)
        per_kind = int((lengths[(~chain.absorbing) & (lengths >= 2)] - 1).sum()) + len(table.starts) - 1
        assert scores[k] == pytest.approx(-2 * fitted.log_likelihood + (k * per_kind + k - 1) * math.log(400))


def test_the_fit_is_deterministic() -> None:
    predicates, paths, counts = simulated("two_types", 200, seed=4)
    chain = learn_dtmc(counts, predicates, alpha=0.1)
    table = path_table(paths, predicates, chain)
    first, second = fit_mixture(table, chain, 2, 0.1), fit_mixture(table, chain, 2, 0.1)
    assert np.array_equal(first.probabilities, second.probabilities)
    assert np.array_equal(first.weights, second.weights)


# -- the runtime posterior, against Fractions ------------------------------------------------------

def hand_mixture() -> tuple[KindMixture, list[list[Fraction]], list[list[Fraction]], list[Fraction]]:
    """Three states (0, 1 and the absorbing 2), entries 0→0, 0→1, 1→0, 1→2, 2→2; two kinds."""
    indptr, indices = np.array([0, 2, 4, 5]), np.array([0, 1, 0, 2, 2])
    weights = [F(1, 3), F(2, 3)]
    initial = [[F(1, 2), F(1, 2), F(0)], [F(1, 4), F(3, 4), F(0)]]
    transitions = [[F(1, 4), F(3, 4), F(1, 2), F(1, 2), F(1)], [F(7, 8), F(1, 8), F(1, 5), F(4, 5), F(1)]]
    values = [np.array([0.25, 0.5, 1.0]), np.array([0.75, 0.625, 1.0])]
    columns = [[KindColumns(v, v - 0.0, v + 0.0, v * 0.5, np.minimum(v * 1.5, 1.0))] for v in values]
    mixture = KindMixture(np.array([float(w) for w in weights]), np.array([[float(x) for x in r] for r in initial]),
                          np.array([[float(x) for x in r] for r in transitions]), np.ones((2, 5)), columns,
                          indptr, indices)
    return mixture, initial, transitions, weights


def oracle(prefix: list[int], weights: list[Fraction], initial: list[list[Fraction]],
           transitions: list[list[Fraction]]) -> list[Fraction]:
    entry = {(0, 0): 0, (0, 1): 1, (1, 0): 2, (1, 2): 3, (2, 2): 4}
    joint = []
    for k in range(2):
        p = weights[k] * initial[k][prefix[0]]
        for a, b in itertools.pairwise(prefix):
            p *= transitions[k][entry[a, b]]
        joint.append(p)
    total = sum(joint)
    return [j / total for j in joint]


@pytest.mark.parametrize("prefix", [[0], [1], [0, 1], [0, 0, 0, 1], [1, 0, 1, 0, 0], [0, 1, 2]])
def test_the_posterior_follows_the_hand_computed_prefix(prefix: list[int]) -> None:
    mixture, initial, transitions, weights = hand_mixture()
    belief = mixture.start(prefix[0])
    for state in prefix[1:]:
        belief = mixture.step(belief, state)
    expected = oracle(prefix, weights, initial, transitions)
    for got, want in zip(belief.weights, expected):
        assert math.isclose(got, float(want), rel_tol=1e-12)
    value, lower, upper, ci_low, ci_high = mixture.mix(belief, 0, prefix[-1])
    v = [F(0.25), F(0.5), F(1)], [F(0.75), F(0.625), F(1)]
    want_value = sum(w * v[k][prefix[-1]] for k, w in enumerate(expected))
    assert math.isclose(value, float(want_value), rel_tol=1e-12)
    assert lower is not None and upper is not None and math.isclose(lower, value) and math.isclose(upper, value)
    assert ci_low is not None and ci_high is not None and ci_low <= value <= ci_high


def test_a_step_the_model_cannot_place_leaves_the_posterior() -> None:
    mixture, *_ = hand_mixture()
    belief = mixture.step(mixture.start(0), 1)
    assert mixture.step(belief, None).log_weights == belief.log_weights  # an unseen state
    lost = mixture.step(belief, None)
    assert mixture.step(lost, 0).log_weights == belief.log_weights  # and the step after it is not scored
    assert mixture.step(mixture.start(0), 2).log_weights == mixture.start(0).log_weights  # 0 → 2 is no entry
    assert mixture.start(None) == Belief(mixture.prior().log_weights, None)


def test_the_posterior_stays_finite_over_a_long_run() -> None:
    mixture, *_ = hand_mixture()
    belief = mixture.start(0)
    for _ in range(20_000):  # a product of probabilities would underflow long before
        belief = mixture.step(belief, 0)
    assert all(math.isfinite(x) for x in belief.log_weights)
    assert math.isclose(sum(belief.weights), 1.0)
    assert belief.weights[1] > 1 - 1e-12  # 7/8 against 1/4 per step: the second kind


def test_simplex_extreme_solves_the_box_cut_by_the_simplex() -> None:
    values = np.array([[0.1, 0.9], [0.5, 0.2]])
    low, high = np.array([[0.2, 0.3], [0.0, 0.0]]), np.array([[0.6, 0.8], [1.0, 1.0]])
    # row 0: ω ∈ [0.2, 0.6] × [0.3, 0.8], Σ = 1: min puts 0.6 on the smaller value, max 0.8 on the larger
    assert np.allclose(simplex_extreme(values, low, high), [0.6 * 0.1 + 0.4 * 0.9, 0.2])
    assert np.allclose(simplex_extreme(values, low, high, largest=True), [0.2 * 0.1 + 0.8 * 0.9, 0.5])


# -- coverage on the two-types construction --------------------------------------------------------

def test_the_kinds_cover_the_true_rates_of_the_two_types() -> None:
    """40 learnings here (bench/kinds_check.py runs 200 and more): every state's true first-visit risk
    inside its interval in ≥ 95 % of learnings."""
    result = kinds_coverage("two_types", learnings=40, runs=200, kinds=2, seed=23)
    print(result.line())
    assert result.rate >= 0.95
    assert result.start_rate >= 0.95
    assert float(np.mean(result.point_errors)) < 0.06


# -- the model file, the guard and its sessions ----------------------------------------------------

def two_type_runs(count: int, seed: int) -> list[dict[str, Any]]:
    _, paths, _ = simulated("two_types", count, seed)
    runs: list[dict[str, Any]] = []
    for path, copies in sorted(paths.items()):
        runs += [toy_run(f"r{len(runs) + c}", list(path)) for c in range(copies)]
    return runs


@pytest.fixture(scope="module")
def kinds_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("kinds")
    traces = folder / "runs.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in two_type_runs(400, seed=7)) + b"\n")
    spec = kinds_spec(2)
    model = learn_model([traces], spec, method=Method.TOPOLOGICAL)
    return model.save(folder / "model.json")


def test_a_model_with_kinds_round_trips(kinds_model: Path) -> None:
    model = GuardModel.load(kinds_model)
    assert model.kinds is not None and model.kinds.kinds == 2
    document = orjson.loads(kinds_model.read_bytes())
    assert len(document["kinds"]["components"]) == 2
    again = GuardModel.from_document(model.to_document())
    assert again.kinds is not None
    assert np.array_equal(again.kinds.probabilities, model.kinds.probabilities)


def test_a_session_weighs_the_kinds_by_its_prefix(kinds_model: Path) -> None:
    guard = Guard(GuardModel.load(kinds_model))
    # A after B: the hazard kind's path; A first: the other kind's
    hazard, other = guard.session(), guard.session()
    for bits in (NONE, B):
        hazard.observe(toy_state(bits))
    other.observe(toy_state(NONE))
    at_a_hazard = hazard.preview(toy_state(A))
    at_a_other = other.preview(toy_state(A))
    assert len(hazard.history) == 2  # preview commits nothing
    assert at_a_hazard.p_unsafe is not None and at_a_other.p_unsafe is not None
    assert at_a_hazard.p_unsafe > 0.6 > 0.1 > at_a_other.p_unsafe
    observed = hazard.observe(toy_state(A))
    assert observed.p_unsafe == at_a_hazard.p_unsafe
    assert hazard.belief is not None and hazard.belief.weights[_hazard_kind(guard)] > 0.9
    assert observed.ci_low is not None and observed.ci_high is not None
    assert observed.ci_low <= observed.p_unsafe <= observed.ci_high
    # without a session, a state's stored value weighs the kinds by their share among the runs there
    static = guard.decide_bits(A)
    assert static.p_unsafe is not None and at_a_other.p_unsafe < static.p_unsafe < at_a_hazard.p_unsafe


def _hazard_kind(guard: Guard) -> int:
    assert guard.kinds is not None
    index = guard.model.dtmc.index()
    entries = guard.kinds.indices[guard.kinds.indptr[index[NONE]]:guard.kinds.indptr[index[NONE] + 1]].tolist()
    to_b = int(guard.kinds.indptr[index[NONE]]) + entries.index(index[B])
    return int(np.argmax(guard.kinds.probabilities[:, to_b]))


def test_restoring_a_session_replays_its_posterior(kinds_model: Path) -> None:
    guard = Guard(GuardModel.load(kinds_model))
    live = guard.session()
    for bits in (NONE, B, A):
        live.observe(toy_state(bits))
    resumed = guard.session()
    resumed.restore([(h.abstract, h.monitors) for h in live.history])
    assert resumed.belief == live.belief
    assert resumed.preview(toy_state(AB)).p_unsafe == live.preview(toy_state(AB)).p_unsafe


def test_replay_weighs_the_kinds_as_a_session_does(kinds_model: Path) -> None:
    guard = Guard(GuardModel.load(kinds_model))
    run = Run("x", toy_run("x", [NONE, B, A])["steps"])
    session = guard.session()
    risks = [session.observe(step["state"]).p_unsafe for step in run.steps]
    assert replay_run(guard, run).p_unsafe == risks


def edited(path: Path, change: Any) -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads(path.read_bytes())
    document = copy.deepcopy(document)
    change(document)
    from forewarn.guard.model import _checksum  # the edit re-signed, so the check under test is reached

    document["checksum"] = _checksum(document)
    return document


@pytest.mark.parametrize(("change", "problem"), [
    (lambda d: d["kinds"]["components"][0].update(weight=0.9), "sum to"),
    (lambda d: d["kinds"]["components"][1]["probabilities"].pop(), "one value per transition"),
    (lambda d: d["kinds"]["components"][0]["properties"][0]["values"].__setitem__(0, 1.5), "values"),
    (lambda d: d["kinds"]["components"][0]["properties"].append(d["kinds"]["components"][0]["properties"][0]),
     "one entry per guarded property"),
    (lambda d: d["kinds"].update(components=d["kinds"]["components"][:1]), "kinds.components"),
    (lambda d: d.update(spec=d["spec"].replace("kinds: 2", "kinds: 1")), "learning.kinds is 1"),
])
def test_a_bad_kinds_block_is_refused_with_its_field(kinds_model: Path, change: Any, problem: str) -> None:
    with pytest.raises(ModelFileError, match=problem):
        GuardModel.from_document(edited(kinds_model, change))


def test_kinds_with_memory_is_refused_in_the_spec() -> None:
    with pytest.raises(SpecError, match="kinds mixes memoryless chains"):
        parse_spec(TOY_SPEC.replace("  delta: 0.05\n", "  delta: 0.05\n  kinds: 2\n  memory: {previous: true}\n"))
    with pytest.raises(SpecError, match=r"learning\.kinds: expected 'auto' or a whole number"):
        kinds_spec(0)


def test_the_session_interval_allows_for_the_posterior_hand_computed() -> None:
    """Likelihood bounds along the prefix give the posterior's bounds; the interval is the extreme weighted end
    over them (Fractions for the bounds, both ends of the feasible ω₁ segment for the extremes)."""
    mixture, initial, transitions, weights = hand_mixture()
    t_low = [[p * F(9, 10) for p in row] for row in transitions]
    t_high = [[min(p * F(11, 10), F(1)) for p in row] for row in transitions]
    s_low = [[w * p * F(4, 5) for p in row] for w, row in zip(weights, initial)]
    s_high = [[w * p * F(6, 5) for p in row] for w, row in zip(weights, initial)]

    def arr(rows: list[list[Fraction]]) -> np.ndarray:
        return np.array([[float(x) for x in r] for r in rows])

    bounded = KindMixture(mixture.weights, mixture.initial, mixture.probabilities, mixture.counts, mixture.columns,
                          mixture.indptr, mixture.indices, transition_bounds=(arr(t_low), arr(t_high)),
                          start_bounds=(arr(s_low), arr(s_high)))
    entry = {(0, 0): 0, (0, 1): 1, (1, 0): 2, (1, 2): 3}
    prefix = [0, 1, 0, 0]
    belief = bounded.start(prefix[0])
    low = [s_low[k][prefix[0]] for k in range(2)]
    high = [s_high[k][prefix[0]] for k in range(2)]
    for a, b in itertools.pairwise(prefix):
        belief = bounded.step(belief, b)
        low = [x * t_low[k][entry[a, b]] for k, x in enumerate(low)]
        high = [x * t_high[k][entry[a, b]] for k, x in enumerate(high)]
    box = belief.weight_bounds()
    assert box is not None
    want_low = [low[0] / (low[0] + high[1]), low[1] / (low[1] + high[0])]
    want_high = [high[0] / (high[0] + low[1]), high[1] / (high[1] + low[0])]
    for got, want in zip([*box[0], *box[1]], [*want_low, *want_high]):
        assert math.isclose(got, float(want), rel_tol=1e-12)
    value, _, _, ci_low, ci_high = bounded.mix(belief, 0, 0)
    ends_low = [0.125, 0.375]  # each kind's ci_low at state 0 (hand_mixture: half the value)
    ends_high = [0.375, 1.0]  # and ci_high (1.5 × the value, at most 1)
    # ω₁ ranges over its bounds and 1 − ω₂'s; the linear objective is extreme at the segment's ends
    first = max(want_low[0], 1 - want_high[1]), min(want_high[0], 1 - want_low[1])
    lows = [float(w) * ends_low[0] + (1 - float(w)) * ends_low[1] for w in first]
    highs = [float(w) * ends_high[0] + (1 - float(w)) * ends_high[1] for w in first]
    assert ci_low is not None and ci_high is not None
    assert math.isclose(ci_low, min(*lows, value), rel_tol=1e-12)
    assert math.isclose(ci_high, max(*highs, value), rel_tol=1e-12)
    assert ci_low < value < ci_high


@pytest.mark.parametrize("intervals", ["clopper_pearson", "none"])
def test_kinds_with_a_monitor_and_without_intervals(tmp_path: Path, intervals: str) -> None:
    monitor = "monitors:\n  - name: b_after_a\n    kind: bounded_response\n    trigger: a\n    response: b\n    within: 2\n"
    text = TOY_SPEC.replace("  delta: 0.05\n", f"  delta: 0.05\n  kinds: 2\n  intervals: {intervals}\n") + monitor
    traces = tmp_path / "runs.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in two_type_runs(200, seed=9)) + b"\n")
    model = GuardModel.load(learn_model([traces], parse_spec(text), method=Method.TOPOLOGICAL).save(tmp_path / "m.json"))
    assert model.kinds is not None and model.dtmc.monitors == ["b_after_a"]
    assert model.kinds.probabilities.shape[1] == model.dtmc.matrix.nnz  # the kinds on the product's sparsity
    session = Guard(model).session()
    decisions = [session.observe(toy_state(bits)) for bits in (NONE, B, A)]
    assert all(d.p_unsafe is not None for d in decisions)
    if intervals == "none":
        assert all(d.ci_low is None and d.ci_high is None for d in decisions)
    else:
        assert all(d.ci_low is not None and d.ci_high is not None and d.ci_low <= d.p_unsafe <= d.ci_high
                   for d in decisions if d.p_unsafe is not None)
