"""Direct outcome intervals (guard/outcomes.py): first-visit counting on hand-made runs, exact
Clopper–Pearson values against Fraction binomial tails, the runs' interval where runs visited (the
chain's elsewhere), the model file, decisions, products with monitors and memory."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import orjson
import pytest

from _coverage import coverage
from _support import AB, NONE, TOY_SPEC, A, B, toy_run, toy_state
from forewarn.guard import Guard
from forewarn.guard.intervals import IntervalMethod, clopper_pearson
from forewarn.guard.model import CheckedProperty, GuardModel, _checksum
from forewarn.guard.outcomes import OutcomeCounts, assumption_free, direct_intervals, first_visit_counts
from forewarn.guard.pipeline import learn_model, with_intervals
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.shrinkage import label_test, summarize_paths
from forewarn.guard.spec import parse_spec
from forewarn.guard.storm import labels_of

F = Fraction
RUNS = [toy_run("r1", [0, 1, 3]), toy_run("r2", [0, 2, 2]), toy_run("r3", [0, 1, 0]), toy_run("r4", [0, 2, 1, 3]),
        toy_run("r5", [0, 0, 2])] * 4


def _tail(n: int, p: Fraction, at_least: int) -> Fraction:
    return sum((math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(at_least, n + 1)), F(0))


def _assert_clopper_pearson(low: float, high: float, k: int, n: int, delta: float) -> None:
    """The ends solve P[Bin(n, low) ≥ k] = δ/2 and P[Bin(n, high) ≤ k] = δ/2, exactly at the floats."""
    if k == 0:
        assert low == 0.0
    else:
        assert float(_tail(n, F(low), k)) == pytest.approx(delta / 2, rel=1e-9)
    if k == n:
        assert high == 1.0
    else:
        assert float(1 - _tail(n, F(high), k + 1)) == pytest.approx(delta / 2, rel=1e-9)


# -- first visits on hand-made runs ---------------------------------------------------------


def test_a_run_that_revisits_a_state_counts_once_with_its_first_visits_outcome() -> None:
    predicates = PredicateSet(parse_spec(TOY_SPEC))
    unsafe = label_test("unsafe", predicates, [])
    assert unsafe is not None
    paths = Counter({(NONE, A, NONE, A, AB): 1, (NONE, B, B): 2, (NONE, A): 1})
    index: dict[tuple[int, tuple[int, ...]], int] = {(bits, ()): i for i, bits in enumerate([NONE, A, B, AB])}
    # F "unsafe": NONE in 4 runs (5 visits), 1 reaches; A in 2 runs (3 visits), 1 reaches; B in 2 runs
    summaries = summarize_paths(paths, predicates, [], [(unsafe, None), (unsafe, 2)])
    eventually, within2 = first_visit_counts(summaries.values(), 2, index, 4)
    assert eventually.runs.tolist() == [4, 2, 2, 0] and eventually.reached.tolist() == [1, 1, 0, 0]
    # every-visit counts (shrinkage's) differ: NONE 5 visits, 2 followed by unsafe
    assert summaries[(NONE, A, NONE, A, AB)].visits[(NONE, ())] == 2
    assert summaries[(NONE, A, NONE, A, AB)].hits[0][(NONE, ())] == 2
    # F<=2: in the first run unsafe is 4 steps after the first NONE and 3 after the first A, so
    # neither first visit counts, though the second visits (2 and 1 steps before) would
    assert within2.runs.tolist() == [4, 2, 2, 0] and within2.reached.tolist() == [0, 0, 0, 0]
    assert summaries[(NONE, A, NONE, A, AB)].hits[1] == {(NONE, ()): 1, (A, ()): 1}


def test_direct_intervals_are_clopper_pearson_and_vacuous_where_unvisited() -> None:
    counts = OutcomeCounts(np.array([20, 12, 0, 5]), np.array([8, 0, 0, 5]))
    low, high = direct_intervals(counts, 0.01)
    for s, (k, n) in enumerate([(8, 20), (0, 12)]):
        _assert_clopper_pearson(float(low[s]), float(high[s]), k, n, 0.01)
    assert (low[2], high[2]) == (0.0, 1.0)
    _assert_clopper_pearson(float(low[3]), float(high[3]), 5, 5, 0.01)


def test_the_direct_interval_where_runs_visited_then_widening_to_the_point_values() -> None:
    chain = (np.array([0.0, 0.1, 0.6, 0.0]), np.array([1.0, 0.5, 0.9, 0.2]))
    direct = (np.array([0.2, 0.3, 0.1, 0.4]), np.array([0.4, 0.9, 0.5, 0.6]))
    point = np.array([0.3, 0.35, 0.55, 0.1])
    visited = np.array([True, True, True, False])
    low, high = assumption_free(chain, direct, visited, [point])
    # visited: the runs' interval, however the chain's lies (state 2's chain interval misses it entirely)
    assert low.tolist() == [0.2, 0.3, 0.1, 0.0]
    assert high.tolist() == [0.4, 0.9, 0.55, 0.2]  # state 2 widened to its point; state 3 unvisited: the chain's
    assert np.all(low <= point) and np.all(point <= high)


# -- a learned model: exact values ----------------------------------------------------------


@pytest.fixture
def learned(tmp_path: Path) -> GuardModel:
    traces = tmp_path / "t.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in RUNS) + b"\n")
    return learn_model([traces], parse_spec(TOY_SPEC))


def test_a_learned_model_takes_the_runs_outcome_interval_where_runs_visited(learned: GuardModel) -> None:
    report = learned.intervals
    assert report is not None and report.construction == "clopper_pearson+outcomes"
    # runs through NONE: all 20, 8 reach AB (r1, r4); A: r1, r3, r4 → 8 of 12; B: r2, r4, r5 → 4 of 12
    assert report.outcomes == 3 and report.delta_per_outcome == pytest.approx(0.05 / 2 / 3)
    dtmc, prop = learned.dtmc, learned.properties[0]
    assert prop.ci_low is not None and prop.ci_high is not None
    index = dtmc.index()
    # the chain's own interval at δ/2, as with_intervals computes it without outcomes
    bare = CheckedProperty(prop.definition, prop.outcome)
    (chain,), chain_report = with_intervals(dtmc, labels_of(dtmc), [bare], method=IntervalMethod.CLOPPER_PEARSON,
                                            delta=0.025, entries=report.entries)
    assert chain_report is not None and chain_report.delta_per_entry == report.delta_per_entry
    assert chain.ci_low is not None and chain.ci_high is not None
    for bits, k, n in [(NONE, 8, 20), (A, 8, 12), (B, 4, 12)]:
        s = index[bits]
        low, high = clopper_pearson(np.array([k]), np.array([n]), 0.05 / 6)
        _assert_clopper_pearson(float(low[0]), float(high[0]), k, n, 0.05 / 6)
        value = prop.outcome.values[s]
        assert prop.ci_low[s] == min(low[0], value)
        assert prop.ci_high[s] == max(high[0], value)
    s = index[NONE]  # here the runs say more than the chain: strictly narrower
    assert prop.ci_high[s] - prop.ci_low[s] < chain.ci_high[s] - chain.ci_low[s]


def test_model_file_round_trip_and_files_without_outcomes(learned: GuardModel, tmp_path: Path) -> None:
    path = learned.save(tmp_path / "m.json")
    document = orjson.loads(path.read_bytes())
    entry = document["intervals"]
    assert entry["method"] == "clopper_pearson+outcomes" and entry["outcomes"] == 3
    again = GuardModel.load(path)
    assert again.intervals == learned.intervals
    again_low, learned_low = again.properties[0].ci_low, learned.properties[0].ci_low
    assert again_low is not None and learned_low is not None and again_low.tolist() == learned_low.tolist()
    # a file from before outcome intervals: the chain's method, no outcome fields
    entry["method"] = "clopper_pearson"
    del entry["outcomes"], entry["delta_per_outcome"]
    document["checksum"] = _checksum(document)
    old = GuardModel.from_document(document)
    assert old.intervals is not None and old.intervals.outcomes is None
    assert old.intervals.construction == "clopper_pearson"
    assert old.to_document()["intervals"]["method"] == "clopper_pearson"


def test_decisions_carry_the_stored_interval(learned: GuardModel) -> None:
    decision = Guard(learned).decide(toy_state(NONE))
    s = learned.dtmc.index()[NONE]
    prop = learned.properties[0]
    assert prop.ci_low is not None and prop.ci_high is not None
    assert (decision.ci_low, decision.ci_high, decision.visits) == (prop.ci_low[s], prop.ci_high[s], 28)


def test_a_non_reach_property_keeps_the_chain_interval(tmp_path: Path) -> None:
    traces = tmp_path / "t.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in RUNS) + b"\n")
    spec = parse_spec(TOY_SPEC.replace("  unseen_state: ask_human\n", "  unseen_state: ask_human\n  properties:\n"
                                       "    - {name: unsafe, formula: 'F \"unsafe\"'}\n"
                                       "    - {name: stay, formula: '\"a\" U \"unsafe\"'}\n"))
    model = learn_model([traces], spec)
    assert model.intervals is not None and model.intervals.outcomes == 3  # only the reach property's states
    dtmc, (_, until) = model.dtmc, model.properties
    (chain_until,), _ = with_intervals(dtmc, labels_of(dtmc), [CheckedProperty(until.definition, until.outcome)],
                                       method=IntervalMethod.CLOPPER_PEARSON, delta=0.025,
                                       entries=model.intervals.entries)
    assert until.ci_low is not None and until.ci_high is not None
    assert chain_until.ci_low is not None and chain_until.ci_high is not None
    assert until.ci_low.tolist() == chain_until.ci_low.tolist()
    assert until.ci_high.tolist() == chain_until.ci_high.tolist()


# -- products with monitors and memory ------------------------------------------------------


def test_products_with_a_monitor_count_outcomes_per_product_state(tmp_path: Path) -> None:
    spec = parse_spec(TOY_SPEC + "monitors:\n  - name: b_after_a\n    kind: bounded_response\n    trigger: a\n"
                                 "    response: b\n    within: 1\n")
    traces = tmp_path / "t.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in RUNS) + b"\n")
    model = learn_model([traces], spec)
    assert model.intervals is not None and model.intervals.construction == "clopper_pearson+outcomes"
    # every run starts in the same product state; r1, r4 reach AB and r3 violates the monitor
    (start,) = model.dtmc.initial
    prop = model.properties[0]
    assert model.intervals.delta_per_outcome is not None and prop.ci_low is not None and prop.ci_high is not None
    low, high = clopper_pearson(np.array([12]), np.array([20]), model.intervals.delta_per_outcome)
    value = prop.outcome.values[start]
    assert prop.ci_low[start] >= min(low[0], value) and prop.ci_high[start] <= max(high[0], value)
    assert np.all(prop.ci_low <= prop.outcome.values) and np.all(prop.outcome.values <= prop.ci_high)


def test_memory_states_get_their_own_outcome_counts(tmp_path: Path) -> None:
    runs = [[NONE, NONE, A, AB], [NONE, A, A, NONE], [NONE, NONE, NONE, B], [A, A, AB]] * 5
    traces = tmp_path / "t.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(toy_run(f"r{i}", r)) for i, r in enumerate(runs)) + b"\n")
    spec = parse_spec(TOY_SPEC.replace("learning:\n  alpha: 0.1\n", "learning:\n  alpha: 0.1\n  memory: {dwell: 2}\n"))
    model = learn_model([traces], spec)
    guard = Guard(model)
    memory = guard.memory
    assert memory is not None
    # oracle: per chain state (abstract state with its dwell label), the runs containing it, and the unsafe ones
    n: Counter[int] = Counter()
    k: Counter[int] = Counter()
    for bits_run in runs:
        encoded = memory.encode_run(bits_run)
        seen = {c for b, c in zip(bits_run, encoded) if b != AB}
        for c in seen:
            n[c] += 1
            k[c] += AB in bits_run
    index = model.dtmc.product_index()
    assert model.intervals is not None and model.intervals.outcomes == len(n)
    assert model.intervals.delta_per_outcome is not None
    prop = model.properties[0]
    assert prop.ci_low is not None and prop.ci_high is not None
    for c in n:
        s = index[(c, ())]
        low, high = clopper_pearson(np.array([k[c]]), np.array([n[c]]), model.intervals.delta_per_outcome)
        value = prop.outcome.values[s]
        assert prop.ci_low[s] >= min(low[0], value) - 1e-12 and prop.ci_high[s] <= max(high[0], value) + 1e-12
    # the decision reads its memory state's interval
    session = guard.session()
    decision = session.observe(toy_state(NONE))
    decision = session.observe(toy_state(NONE))
    assert session.monitor_states is not None
    s = index[(memory.encode(NONE, session.monitor_states[-1]), ())]
    assert (decision.ci_low, decision.ci_high) == (prop.ci_low[s], prop.ci_high[s])


# -- coverage: the runs' interval keeps 1 − δ and is narrower ---------------------------------


def test_outcome_intervals_keep_coverage_on_the_rare_chain_and_narrow_it() -> None:
    both = coverage("rare", learnings=200, runs=100, delta=0.1, seed=11)
    chain = coverage("rare", learnings=40, runs=100, delta=0.1, seed=11, outcomes=False)  # the same first 40
    print(both.line())
    assert both.learnings == 200 and both.rate >= 0.9
    assert np.mean(both.widths[:len(chain.widths)]) < 0.75 * np.mean(chain.widths)


def test_with_intervals_without_outcomes_is_the_chain_alone(learned: GuardModel) -> None:
    prop = learned.properties[0]
    bare = CheckedProperty(prop.definition, prop.outcome)
    (plain,), report = with_intervals(learned.dtmc, labels_of(learned.dtmc), [bare],
                                      method=IntervalMethod.CLOPPER_PEARSON, delta=0.05)
    assert report is not None and report.outcomes is None and report.construction == "clopper_pearson"
    empty = OutcomeCounts(np.zeros(learned.dtmc.size, dtype=np.int64), np.zeros(learned.dtmc.size, dtype=np.int64))
    (none_seen,), r2 = with_intervals(learned.dtmc, labels_of(learned.dtmc), [replace(bare)],
                                      method=IntervalMethod.CLOPPER_PEARSON, delta=0.05, outcomes={0: empty})
    assert r2 is not None and r2.outcomes is None  # nothing visited: no direct interval, so the chain keeps all of δ
    assert none_seen.ci_low is not None and none_seen.ci_high is not None
    assert plain.ci_low is not None and plain.ci_high is not None
    assert none_seen.ci_low.tolist() == plain.ci_low.tolist() and none_seen.ci_high.tolist() == plain.ci_high.tolist()
