"""Monitors against the direct finite-run semantics, and the product against exact values."""
from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forewarn.errors import ThresholdWarning
from forewarn.guard import Guard, GuardModel, Method, parse_spec
from forewarn.guard.monitoring import build_monitors
from forewarn.guard.pipeline import learn_model_from_runs
from forewarn.guard.traces import parse_run
from forewarn.monitors import VIOL, BoundedResponse, Condition, Pattern, PatternMonitor, Scope
from forewarn.monitors.semantics import bounded_response_violation, pattern_violation

NAMES = ["p", "s", "q", "r"]
P, S, Q, R = (Condition(name, NAMES) for name in NAMES)
traces = st.lists(st.integers(min_value=0, max_value=15), max_size=14)


def signal(trace: list[int], bit: int) -> list[bool]:
    return [bool(x >> bit & 1) for x in trace]


@settings(max_examples=400, deadline=None)
@given(trace=traces, within=st.integers(min_value=0, max_value=5), restart=st.booleans())
def test_bounded_response_enters_viol_exactly_when_the_formula_is_broken(trace: list[int], within: int,
                                                                          restart: bool) -> None:
    monitor = BoundedResponse("m", S, P, within, restart=restart)
    expected = bounded_response_violation(signal(trace, 1), signal(trace, 0), within, restart=restart)
    assert monitor.first_violation(trace) == expected


@settings(max_examples=1500, deadline=None)
@given(trace=traces, pattern=st.sampled_from(list(Pattern)), scope=st.sampled_from(list(Scope)),
       within=st.one_of(st.none(), st.integers(min_value=0, max_value=4)))
def test_every_pattern_and_scope_agrees_with_its_finite_run_semantics(trace: list[int], pattern: Pattern,
                                                                     scope: Scope, within: int | None) -> None:
    if pattern in (Pattern.ABSENCE, Pattern.UNIVERSALITY, Pattern.PRECEDENCE):
        within = None
    if pattern in (Pattern.EXISTENCE, Pattern.RESPONSE) and within is None and scope in (Scope.GLOBALLY,
                                                                                         Scope.AFTER):
        return  # rejected: see the test below
    monitor = PatternMonitor("m", pattern, P, s=S, within=within, scope=scope, q=Q, r=R)
    expected = pattern_violation(pattern.value, signal(trace, 0), s=signal(trace, 1), within=within,
                                 scope=scope.value, q=signal(trace, 2), r=signal(trace, 3))
    assert monitor.first_violation(trace) == expected
    if expected is not None:  # viol is absorbing
        assert all(q == VIOL for q in monitor.run(trace)[expected:])


def test_definition_6_is_counted_so_that_the_automaton_and_the_formula_agree() -> None:
    monitor = BoundedResponse("m", S, P, 2)
    trigger, idle = 0b10, 0b00
    # trigger at step 0; no response at steps 0, 1, 2 -> violation on reading step 2 = t + K
    assert monitor.first_violation([trigger, idle, idle]) == 2
    assert monitor.first_violation([trigger, idle, 0b01]) is None  # response at t + K discharges
    assert monitor.first_violation([0b11]) is None  # trigger and response together
    assert BoundedResponse("m", S, P, 0).first_violation([trigger]) == 0  # K = 0: at once
    # a pending obligation when the run ends is not a violation (weak semantics)
    assert monitor.first_violation([trigger, idle]) is None


def test_a_new_trigger_does_not_restart_the_count_unless_asked() -> None:
    trigger, idle = 0b10, 0b00
    run = [trigger, idle, trigger, idle]
    assert BoundedResponse("m", S, P, 2).first_violation(run) == 2
    assert BoundedResponse("m", S, P, 2, restart=True).first_violation(run) is None


def test_unbounded_existence_over_the_whole_run_cannot_be_monitored() -> None:
    import pytest

    from forewarn.monitors import MonitorSemanticsError

    with pytest.raises(MonitorSemanticsError, match="cannot be monitored on finite runs"):
        PatternMonitor("m", Pattern.EXISTENCE, P)
    assert PatternMonitor("m", Pattern.EXISTENCE, P, scope=Scope.BEFORE, r=R).first_violation([0b1000]) == 0


# -- the product, exactly -------------------------------------------------------------

SPEC = """\
name: respond
predicates:
  t: state.t
  r: state.r
learning:
  shrink: off  # the chain's own values, which the exact oracles below compute
monitors:
  - name: answer
    kind: bounded_response
    trigger: t
    response: r
    within: {within}
"""
S0, S1, S2 = {"t": False, "r": False}, {"t": True, "r": False}, {"t": False, "r": True}


def learn(within: int, method: Method = Method.EXACT) -> GuardModel:
    # With alpha = 0 the chain is the maximum-likelihood one:
    # s0 -> s1 1/2, end 1/2;  s1 -> s1 1/3, s2 1/3, end 1/3;  s2 -> s0 1/2, end 1/2.
    paths = [[S2, S0, S1, S1, S2], [S0], [S1]]
    runs = [parse_run(json.dumps({"id": f"r{i}", "steps": [{"state": s} for s in path]}))
            for i, path in enumerate(paths)]
    return learn_model_from_runs(runs, parse_spec(SPEC.format(within=within)), alpha=0.0, method=method)


def value(model: GuardModel, state: dict[str, bool], monitor: str) -> float:
    dtmc = model.dtmc
    bits = int(state["t"]) | int(state["r"]) << 1
    names = {"idle": 0, "wait(1)": 1, "viol": VIOL}
    index = dtmc.product_index()[(bits, (names[monitor],))]
    return float(model.outcome.values[index])



def test_product_reach_violation_equals_exact_values_for_k1() -> None:
    # x = P(viol | s1, wait(1)) = 1/3 (s1 again) + 1/3 z;  z = (s2, idle) = 1/2 y;  y = (s0, idle) = 1/2 x
    x = Fraction(4, 11)
    model = learn(1)
    assert value(model, S1, "wait(1)") == float(x)
    assert value(model, S0, "idle") == float(x / 2)
    assert value(model, S2, "idle") == float(x / 4)
    assert value(model, S1, "viol") == 1.0
    # only reachable product states: (s0,idle) (s1,wait1) (s2,idle) (s1,viol) and end
    assert model.dtmc.size == 5
    sound = learn(1, Method.SOUND)
    index = sound.dtmc.product_index()[(1, (1,))]
    assert sound.outcome.lower is not None and sound.outcome.upper is not None
    assert sound.outcome.lower[index] <= float(x) <= sound.outcome.upper[index]
    assert math.isclose(sound.outcome.values[index], float(x), abs_tol=1e-6)


def test_product_reach_violation_equals_exact_values_for_k0() -> None:
    # K = 0: entering s1 (trigger, no response) violates at once
    model = learn(0)
    y = Fraction(1, 2) + Fraction(1, 2) * 0  # from s0: s1 w.p. 1/2 -> viol; end otherwise
    assert value(model, S0, "idle") == float(y)
    assert value(model, S2, "idle") == float(Fraction(1, 2) * y)


def test_a_session_advances_the_monitor_and_looks_up_the_product_state(tmp_path: Path) -> None:
    path = learn(1).save(tmp_path / "m.json")
    guard = Guard.load(path)
    assert [m.name for m in guard.monitors] == ["answer"]
    with pytest.warns(ThresholdWarning, match=r"^reflect θ 0.9 > p_safe 0.64–0.82 in 2 of 3 initial states"):
        session = guard.session()
    first = session.observe(S0)
    assert first.p_unsafe is not None and first.monitors == {"answer": "idle"}
    assert math.isclose(first.p_unsafe, 2 / 11)
    waiting = session.observe(S1)
    assert waiting.p_unsafe is not None and waiting.monitors == {"answer": "wait(1)"}
    assert math.isclose(waiting.p_unsafe, 4 / 11)
    assert session.preview(S1).unsafe_now  # a second trigger step without response would violate
    broken = session.observe(S1)
    assert broken.unsafe_now and broken.p_unsafe == 1.0 and broken.monitors == {"answer": "viol"}
    assert "monitor 'answer' is violated" in broken.message


def test_monitors_are_built_from_the_spec_in_order() -> None:
    spec = parse_spec(SPEC.format(within=3) + "  - {name: never_r, kind: absence, p: r}\n")
    monitors = build_monitors(spec)
    assert [m.name for m in monitors] == ["answer", "never_r"]
    assert isinstance(monitors[0], BoundedResponse) and monitors[0].within == 3


@settings(max_examples=300, deadline=None)
@given(pattern=st.sampled_from([*Pattern, "bounded_response"]), scope=st.sampled_from(list(Scope)),
       within=st.integers(min_value=0, max_value=4), restart=st.booleans(),
       steps=st.lists(st.tuples(st.integers(min_value=0, max_value=60), st.integers(min_value=0, max_value=15)),
                      min_size=1, max_size=40))
def test_vectorised_steps_equal_scalar_steps(pattern: Pattern | str, scope: Scope, within: int, restart: bool,
                                             steps: list[tuple[int, int]]) -> None:
    import numpy as np

    if pattern == "bounded_response":
        monitor: BoundedResponse | PatternMonitor = BoundedResponse("m", S, P, within, restart=restart)
    else:
        assert isinstance(pattern, Pattern)
        bound = within if pattern in (Pattern.EXISTENCE, Pattern.RESPONSE) else None
        if bound is None and pattern in (Pattern.EXISTENCE, Pattern.RESPONSE):
            return
        monitor = PatternMonitor("m", pattern, P, s=S, within=bound, scope=scope, q=Q, r=R)
    abstract = list(range(16))
    prepared: Any = monitor.prepare(abstract)  # the prepared form of whichever kind `monitor` is
    # reachable-looking monitor states: run the monitor over random traces and keep what it visits
    states = sorted({q for _, bits in steps for q in monitor.run([bits, bits ^ 3, bits ^ 5])} | {monitor.initial})
    qs = np.array([states[i % len(states)] for i, _ in steps], dtype=np.int64)
    at = np.array([bits for _, bits in steps], dtype=np.int64)
    vector = monitor.step_array(qs, at, prepared)
    assert vector.tolist() == [monitor.step(int(q), int(b)) for q, b in zip(qs, at)]
    assert monitor.state_bound is not None and max(states) < monitor.state_bound
