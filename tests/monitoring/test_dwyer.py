"""Monitors against an independent LTL-on-finite-traces reading of Dwyer's mappings."""
from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _ltlf import DWYER_EXISTENCE_BETWEEN, bounded_response, dwyer, first_violation, holds, letters
from _support import reach_probabilities
from forewarn.guard import Method, parse_spec
from forewarn.guard.pipeline import learn_model_from_runs
from forewarn.guard.traces import parse_run
from forewarn.monitors import VIOL, BoundedResponse, Condition, Pattern, PatternMonitor, Scope
from forewarn.monitors.semantics import pattern_violation

NAMES = ["p", "s", "q", "r"]
P, S, Q, R = (Condition(name, NAMES) for name in NAMES)
p, s, q, r = 1, 2, 4, 8
traces = st.lists(st.integers(min_value=0, max_value=15), max_size=12)
# between-heavy traces: q often, r now and then, so that openers inside open scopes are common
busy = st.lists(st.sampled_from([0, p, s, q, q | p, q | s, r, p | s, q | r, 0, q, p]), max_size=12)


def monitor(pattern: Pattern, scope: Scope, within: int | None) -> PatternMonitor:
    return PatternMonitor("m", pattern, P, s=S, within=within, scope=scope, q=Q, r=R)


def semantics(pattern: Pattern, scope: Scope, within: int | None, trace: list[int]) -> int | None:
    def sig(bit: int) -> list[bool]:
        return [bool(x & bit) for x in trace]

    return pattern_violation(pattern.value, sig(p), s=sig(s), within=within, scope=scope.value, q=sig(q), r=sig(r))


def oracle(pattern: Pattern, scope: Scope, within: int | None, trace: list[int]) -> int | None:
    return first_violation(dwyer(pattern.value, scope.value, within), [letters(x) for x in trace])


@pytest.mark.parametrize(("pattern", "trace", "step"), [
    (Pattern.EXISTENCE, [q | p, q, r], 2),  # the q at step 1 opens a new obligation; r closes it unmet
    (Pattern.PRECEDENCE, [q | s, q | p], 1),  # the q at step 1 needs its own s before p
])
def test_a_q_inside_an_open_between_scope_opens_a_new_obligation(pattern: Pattern, trace: list[int],
                                                                 step: int) -> None:
    assert monitor(pattern, Scope.BETWEEN, None).first_violation(trace) == step
    assert semantics(pattern, Scope.BETWEEN, None, trace) == step
    assert oracle(pattern, Scope.BETWEEN, None, trace) == step


def test_bounded_existence_between_keeps_each_openers_deadline() -> None:
    m = monitor(Pattern.EXISTENCE, Scope.BETWEEN, 1)
    # q+p at 0 meets its obligation; q at 2 opens one due at step 3
    assert m.first_violation([q | p, 0, q, 0]) == 3
    assert m.first_violation([q | p, 0, q, p]) is None
    # a q while an obligation is pending does not move the earlier deadline
    assert m.first_violation([q, q, 0]) == 1
    assert oracle(Pattern.EXISTENCE, Scope.BETWEEN, 1, [q, q, 0]) == 1


@settings(max_examples=1500, deadline=None)
@given(trace=traces, pattern=st.sampled_from(list(Pattern)), scope=st.sampled_from(list(Scope)),
       within=st.one_of(st.none(), st.integers(min_value=0, max_value=4)))
def test_every_pattern_and_scope_agrees_with_dwyers_ltl_on_finite_runs(trace: list[int], pattern: Pattern,
                                                                      scope: Scope, within: int | None) -> None:
    if pattern in (Pattern.ABSENCE, Pattern.UNIVERSALITY, Pattern.PRECEDENCE):
        within = None
    if pattern in (Pattern.EXISTENCE, Pattern.RESPONSE) and within is None and scope in (Scope.GLOBALLY,
                                                                                         Scope.AFTER):
        return  # rejected: no finite prefix violates it
    expected = oracle(pattern, scope, within, trace)
    assert monitor(pattern, scope, within).first_violation(trace) == expected
    assert semantics(pattern, scope, within, trace) == expected


@settings(max_examples=1500, deadline=None)
@given(trace=busy, pattern=st.sampled_from(list(Pattern)),
       within=st.one_of(st.none(), st.integers(min_value=0, max_value=3)))
def test_between_with_openers_inside_open_scopes_agrees_with_dwyers_ltl(trace: list[int], pattern: Pattern,
                                                                       within: int | None) -> None:
    if pattern in (Pattern.ABSENCE, Pattern.UNIVERSALITY, Pattern.PRECEDENCE):
        within = None
    expected = oracle(pattern, Scope.BETWEEN, within, trace)
    assert monitor(pattern, Scope.BETWEEN, within).first_violation(trace) == expected
    assert semantics(pattern, Scope.BETWEEN, within, trace) == expected


@settings(max_examples=600, deadline=None)
@given(trace=busy)
def test_dwyers_printed_existence_between_formula_says_the_same_on_finite_runs(trace: list[int]) -> None:
    word = [letters(x) for x in trace]
    expected = first_violation(DWYER_EXISTENCE_BETWEEN, word)
    assert expected == first_violation(dwyer("existence", "between"), word)
    assert monitor(Pattern.EXISTENCE, Scope.BETWEEN, None).first_violation(trace) == expected


@settings(max_examples=400, deadline=None)
@given(trace=traces, within=st.integers(min_value=0, max_value=4))
def test_bounded_response_agrees_with_its_ltl_formula(trace: list[int], within: int) -> None:
    expected = first_violation(bounded_response(within), [letters(x) for x in trace])
    assert BoundedResponse("m", S, P, within).first_violation(trace) == expected


@settings(max_examples=300, deadline=None)
@given(trace=busy, pattern=st.sampled_from(list(Pattern)), scope=st.sampled_from(list(Scope)),
       within=st.integers(min_value=0, max_value=3))
def test_a_violation_stays_a_violation_on_every_longer_prefix(trace: list[int], pattern: Pattern, scope: Scope,
                                                             within: int) -> None:
    # the reading "first prefix that breaks the formula" is well defined: broken prefixes stay broken
    formula = dwyer(pattern.value, scope.value, within)
    word = [letters(x) for x in trace]
    broken = [not holds(formula, word[:t + 1])[0] for t in range(len(word))]
    assert broken == sorted(broken)


@pytest.mark.parametrize("pattern", list(Pattern))
@pytest.mark.parametrize("within", [None, 0, 3])
def test_restarting_between_obligations_keeps_the_one_scope_state_space(pattern: Pattern,
                                                                       within: int | None) -> None:
    if pattern in (Pattern.ABSENCE, Pattern.UNIVERSALITY, Pattern.PRECEDENCE) and within is not None:
        return
    m = monitor(pattern, Scope.BETWEEN, within)
    seen, frontier = {m.initial}, [m.initial]
    while frontier:  # every monitor state reachable on some run
        nxt = {m.step(x, bits) for x in frontier for bits in range(16)} - seen
        seen |= nxt
        frontier = list(nxt)
    assert max(seen) < m.state_bound
    # waiting, viol, and the inner states of one scope: K + 2 for existence, K + 1 for response
    inner = {Pattern.EXISTENCE: 1 if within is None else within + 1,
             Pattern.RESPONSE: 1 if within is None else max(within, 1)}.get(pattern, 1)
    assert len(seen) <= inner + 3


# -- the product with restarting monitors, exactly -------------------------------------

SPEC = """\
name: scoped
predicates: {p: state.p, s: state.s, q: state.q, r: state.r}
monitors:
  - {name: exist, kind: existence, p: p, scope: between, q: q, r: r}
  - {name: soon, kind: existence, p: p, scope: between, q: q, r: r, within: 1}
  - {name: first_s, kind: precedence, p: p, s: s, scope: between, q: q, r: r}
"""


def test_the_product_with_between_monitors_equals_a_hand_built_product() -> None:
    import random

    rng = random.Random(16)
    paths = [[rng.choice([0, p, s, q, q | p, q | s, r, q | r]) for _ in range(rng.randint(1, 7))] for _ in range(25)]
    runs = [parse_run(json.dumps({"id": f"r{i}", "steps": [{"state": {n: bool(b >> k & 1) for k, n in
                                                                      enumerate(NAMES)}} for b in path]}))
            for i, path in enumerate(paths)]
    model = learn_model_from_runs(runs, parse_spec(SPEC), alpha=0.0, method=Method.EXACT)
    mons = [monitor(Pattern.EXISTENCE, Scope.BETWEEN, None), monitor(Pattern.EXISTENCE, Scope.BETWEEN, 1),
            monitor(Pattern.PRECEDENCE, Scope.BETWEEN, None)]

    # the chain by counting (α = 0: maximum likelihood), then the product with scalar monitor steps
    counts: dict[int, dict[Any, int]] = {}  # successors: a valuation or "end"
    for path in paths:
        for a, b in zip(path, [*path[1:], "end"]):
            counts.setdefault(a, {}).setdefault(b, 0)
            counts[a][b] += 1
    rows: dict[Any, dict[Any, Fraction]] = {"end": {"end": Fraction(1)}}  # product states or "end"
    todo: list[Any] = [(bits, tuple(m.step(m.initial, bits) for m in mons)) for bits in counts]
    while todo:
        state = todo.pop()
        if state in rows:
            continue
        bits, qs = state
        if VIOL in qs:
            rows[state] = {state: Fraction(1)}
            continue
        total = sum(counts[bits].values())
        rows[state] = {}
        for nxt, n in counts[bits].items():
            succ = "end" if nxt == "end" else (nxt, tuple(m.step(x, nxt) for m, x in zip(mons, qs)))
            rows[state][succ] = Fraction(n, total)
            todo.append(succ) if succ != "end" else None
    exact: dict[Any, Fraction] = reach_probabilities(rows, {st_ for st_ in rows if st_ != "end" and VIOL in st_[1]})

    index = model.dtmc.product_index()
    assert len(index) == len(rows) - 1  # the same reachable product states
    for state, value in exact.items():
        if state != "end":
            assert model.outcome.values[index[state]] == float(value), state
    assert any(0 < v < 1 for v in exact.values())  # not a trivial chain
