"""The baselines by hand: empirical frequencies per state, and the one-change reactive rule."""
from __future__ import annotations

from pathlib import Path

import pytest

from _support import AB, NONE, A, B, WriteRuns, toy_run
from forewarn.guard.evaluation.baselines import (
    EMPIRICAL,
    ONE_CHANGE,
    EmpiricalFrequency,
    OneChangeRule,
    score_baselines,
    trace_run,
)
from forewarn.guard.monitoring import build_monitors
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.replay import RunReplay, replay
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import Spec, load_spec
from forewarn.guard.traces import read_runs


def traced(path: Path, spec: Spec) -> list[RunReplay]:
    predicates, monitors = PredicateSet(spec), build_monitors(spec)
    return [trace_run(run, predicates, monitors) for run in read_runs(path)]


@pytest.fixture
def training(write_runs: WriteRuns, toy_spec: Spec) -> list[RunReplay]:
    return traced(write_runs([
        toy_run("t1", [NONE, A, AB]),  # NONE and A are followed by a violation
        toy_run("t2", [NONE, A, NONE]),
        toy_run("t3", [NONE, B]),
    ], name="train.jsonl"), toy_spec)


def test_trace_run_stops_at_the_first_violation(training: list[RunReplay]) -> None:
    t1 = training[0]
    assert (t1.abstract, t1.violation, t1.p_unsafe, t1.length) == ((NONE, A, AB), 2, [None, None, None], 3)


def test_empirical_frequency_by_hand(training: list[RunReplay], write_runs: WriteRuns, toy_spec: Spec) -> None:
    empirical = EmpiricalFrequency().fit(training)
    # visits before a violation: NONE 4 (1 followed by one), A 2 (1), B 1 (0); AB only as a violation
    assert empirical.visits[(NONE, ())] == 4 and empirical.unsafe_visits[(NONE, ())] == 1
    [probe] = traced(write_runs([toy_run("p", [NONE, B, A, AB])], name="probe.jsonl"), toy_spec)
    assert empirical.score(probe).p_unsafe == [0.25, 0.0, 0.5, 1.0]
    # leaving t1 out of its own scoring: NONE 0 of 3, A 0 of 1
    assert empirical.score(training[0], leave_out=True).p_unsafe == [0.0, 0.0, 1.0]
    # t3 left out: B was seen only in t3, so it is unseen
    assert empirical.score(training[2], leave_out=True).p_unsafe == [1 / 3, None]
    only_t3 = EmpiricalFrequency().fit(training[2:])
    assert only_t3.score(probe).p_unsafe == [0.0, 0.0, None, 1.0]


def test_one_change_rule_fires_next_to_the_unsafe_state(training: list[RunReplay], toy_spec: Spec) -> None:
    rule = OneChangeRule(PredicateSet(toy_spec), [])
    # unsafe is a && b: A and B are one change away, NONE two
    assert (rule.fires(NONE, ()), rule.fires(A, ()), rule.fires(B, ())) == (False, True, True)
    assert rule.score(training[0]).p_unsafe == [0.0, 1.0, 1.0]
    assert rule.score(training[2]).p_unsafe == [0.0, 1.0]


MONITOR_SPEC = """\
name: respond
predicates:
  a: 'state.a'
  b: 'state.b > 2'
monitors:
  - name: answer
    kind: bounded_response
    trigger: 'a'
    response: 'b'
    within: 1
"""


def test_one_change_rule_with_a_monitor(write_runs: WriteRuns, tmp_path: Path) -> None:
    spec_path = tmp_path / "respond.yaml"
    spec_path.write_text(MONITOR_SPEC, encoding="utf-8")
    spec = load_spec(spec_path)
    predicates, monitors = PredicateSet(spec), build_monitors(spec)
    # a at step 1 starts a 1-step wait; no b at step 2: the monitor is violated there
    [run] = traced(write_runs([toy_run("m", [NONE, A, NONE])], name="m.jsonl"), spec)
    assert run.violation == 2 and run.monitor_states == ((0,), (1,), (-1,))
    rule = OneChangeRule(predicates, monitors)
    # idle: no single change violates; waiting with one step left: staying put violates
    assert rule.score(run).p_unsafe == [0.0, 1.0, 1.0]
    [t] = score_baselines([run], [0.5], predicates=predicates, monitors=monitors)[ONE_CHANGE].thetas
    assert (t.detected, t.mean_advance_steps) == (1, 1.0)


def test_score_baselines_summarises_like_the_model(hand_guard: Guard, write_runs: WriteRuns,
                                                   training: list[RunReplay]) -> None:
    runs = write_runs([toy_run("u", [NONE, B, A, AB]), toy_run("s", [NONE, NONE])], name="eval.jsonl")
    report = replay(hand_guard, read_runs(runs), [0.3, 0.9], enforcement="observe")
    baselines = score_baselines(report.replays, [0.3, 0.9], predicates=hand_guard.predicates,
                                monitors=hand_guard.monitors, train=training, enforcement="observe")
    empirical, rule = baselines[EMPIRICAL], baselines[ONE_CHANGE]
    # empirical risks on u: 0.25, 0, 0.5, 1 → θ=0.3 alarms at none before AB; θ=0.9 at NONE (p_safe 0.75)
    e03, e09 = empirical.thetas
    assert (e03.detected, e09.detected, e09.mean_advance_steps, e09.false_alarms) == (0, 1, 3.0, 1)
    # the rule fires at B (step 1) at every θ: 2 steps ahead, and never on s
    assert [(t.detected, t.mean_advance_steps, t.false_alarms) for t in rule.thetas] == [(1, 2.0, 0)] * 2
    # scored steps: u's NONE (0 against 1), B and A (1 against 1), s's two NONE (0 against 0)
    assert rule.brier == 1 / 5


def test_beside_a_bundle_the_empirical_baseline_is_counted_per_member(write_runs: WriteRuns,
                                                                      toy_spec: Spec) -> None:
    # two tasks meet the same state A: in task x it is harmless, in task y it always leads to the violation
    lines = [{**toy_run(f"x{k}", [NONE, A, NONE]), "meta": {"task": "x"}} for k in range(3)]
    lines += [{**toy_run(f"y{k}", [NONE, A, AB]), "meta": {"task": "y"}} for k in range(2)]
    lines += [{**toy_run("z", [NONE, A, AB]), "meta": {"task": "z"}}]  # z has no member: the pooled model decides
    runs = traced(write_runs(lines, name="tasks.jsonl"), toy_spec)
    members = {"x", "y"}
    member_of = lambda r: r.meta["task"] if r.meta["task"] in members else None  # noqa: E731
    predicates, monitors = PredicateSet(toy_spec), build_monitors(toy_spec)
    pooled = score_baselines(runs, [0.6], predicates=predicates, monitors=monitors, train=runs)[EMPIRICAL]
    matched = score_baselines(runs, [0.6], predicates=predicates, monitors=monitors, train=runs,
                              member_of=member_of)[EMPIRICAL]
    risk = {r.id: r.p_unsafe for r in matched.replays}
    # per member: A is 0 of 3 in x, 2 of 2 in y; z is scored on every run, as the pooled model does:
    # NONE 3 of 9 visits followed by a violation, A 3 of 6
    assert risk["x0"] == [0.0, 0.0, 0.0] and risk["y0"] == [1.0, 1.0, 1.0] and risk["z"] == [1 / 3, 0.5, 1.0]
    assert {r.id: r.p_unsafe for r in pooled.replays}["x0"] == [1 / 3, 0.5, 1 / 3]
    # at θ = 0.6 (an alarm above p_unsafe 0.4) both warn of y and z ahead; counting per task flags no x run,
    # pooled counting flags every one
    [m], [p] = matched.thetas, pooled.thetas
    assert (m.warned_ahead, m.false_alarms) == (3, 0)
    assert (p.warned_ahead, p.false_alarms) == (3, 3)
    leave_out = score_baselines(runs, [0.5], predicates=predicates, monitors=monitors, member_of=member_of)
    # each run left out of its own member's counts: y0 sees only y1 (A 1 of 1)
    assert {r.id: r.p_unsafe for r in leave_out[EMPIRICAL].replays}["y0"] == [1.0, 1.0, 1.0]
