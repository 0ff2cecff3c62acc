"""Replay figures worked out by hand on six toy runs (risks per state set by hand, see RISK)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _eval_support import RISK, with_risk
from _support import AB, NONE, A, B, WriteRuns, toy_run
from forewarn.guard.calibration import calibrate
from forewarn.guard.model import GuardModel
from forewarn.guard.replay import RunReplay, Spread, horizon_of, rate_curve, replay, summarize
from forewarn.guard.runtime import Guard
from forewarn.guard.traces import read_runs


def run_with(run_id: str, bits: list[int], times: list[float] | None = None, **meta: Any) -> dict[str, Any]:
    line = toy_run(run_id, bits, times)
    line["meta"] = meta
    return line


@pytest.fixture
def six_runs(write_runs: WriteRuns) -> Path:
    return write_runs([
        run_with("u1", [NONE, A, AB], [0.0, 1.0, 3.0], success=False),  # violates at step 2
        run_with("u2", [NONE, B, B, AB], [0.0, 2.0, 5.0, 9.0]),  # violates at step 3
        run_with("u3", [AB]),  # violates at its first step: nothing can warn
        run_with("s1", [NONE, B, NONE], success=True),
        run_with("s2", [NONE, NONE], success=True),
        run_with("s3", [NONE, A, NONE], success=False),  # flagged at A, then safe: a false alarm
    ], name="six.jsonl")


def test_detection_counts_only_alarms_strictly_before_the_violation(hand_guard: Guard, six_runs: Path) -> None:
    report = replay(hand_guard, read_runs(six_runs), [0.5], enforcement="observe")
    [t] = report.thetas
    # θ = 0.5 alarms on A (p_safe 0.4) and AB (0): u1 is warned at step 1; u2's only alarm is its
    # violation itself (step 3), which is too late; u3 violates at once
    assert (t.n_unsafe, t.n_safe, t.detected, t.detection_rate) == (3, 3, 1, 1 / 3)
    assert t.unsafe_at_start == 1
    u2 = next(r for r in report.replays if r.id == "u2")
    assert u2.first_alarm(0.5, unseen_alarms=True) == u2.violation == 3
    # s3 raised an alarm and then stayed safe: a false alarm; s1 and s2 raised none
    assert (t.false_alarms, t.false_alarm_rate) == (1, 1 / 3)
    assert (t.mean_advance_steps, t.mean_advance_seconds) == (1.0, 2.0)
    assert t.advance_steps == Spread(1, 1.0, 1.0, None, 1.0, 1.0, 1.0, 1.0)


def test_advance_spread_and_stop_outcomes_by_hand(hand_guard: Guard, six_runs: Path) -> None:
    report = replay(hand_guard, read_runs(six_runs), [0.5, 0.8, 0.95], enforcement="observe")
    by = {t.theta: t for t in report.thetas}
    assert report.unsafe_rate == 3 / 6
    # meta.success is a boolean on u1, s1, s2, s3: two of those four completed
    assert (report.runs_with_success, report.completion_rate) == (4, 0.5)

    # θ = 0.5: stop prevents u1; s3 is cut short but had not completed its task anyway
    stop = by[0.5].stop
    assert stop is not None
    assert (stop.prevented, stop.still_unsafe, stop.cut_short, stop.completions_lost) == (1, 2, 1, 0)
    assert (stop.unsafe_rate, stop.completion_rate) == (2 / 6, 2 / 4)
    # alarm steps before the violation or the end: u1 at A, s3 at A
    assert (by[0.5].prompts_per_run, by[0.5].prompts_per_safe_run) == (2 / 6, 1 / 3)

    # θ = 0.8: A and B alarm. u1 1 step (2 s) ahead, u2 2 steps (7 s) ahead; s1 and s3 flagged
    t = by[0.8]
    assert (t.detected, t.false_alarms) == (2, 2)
    spread = t.advance_steps
    assert spread is not None and (spread.n, spread.mean, spread.median, spread.min, spread.max) == (2, 1.5, 1.5, 1, 2)
    assert (spread.q1, spread.q3) == (1.25, 1.75)  # inclusive quartiles of [1, 2]
    assert spread.stdev is not None and math.isclose(spread.stdev, math.sqrt(0.5))
    assert t.advance_seconds is not None and (t.advance_seconds.mean, t.advance_seconds.median) == (4.5, 4.5)
    assert t.stop is not None and (t.stop.completions_lost, t.stop.completion_rate) == (1, 1 / 4)  # s1 stopped
    assert (t.prompts_per_run, t.prompts_per_safe_run) == (5 / 6, 2 / 3)  # u1 1, u2 2, s1 1, s3 1

    # θ = 0.95: every state alarms, from the first step
    t = by[0.95]
    assert (t.detected, t.false_alarms, t.mean_advance_steps, t.mean_advance_seconds) == (2, 3, 2.5, 6.0)
    assert t.stop is not None and (t.stop.unsafe_rate, t.stop.completion_rate) == (1 / 6, 0.0)


def test_calibration_per_step_and_per_run_by_hand(hand_guard: Guard, six_runs: Path) -> None:
    report = replay(hand_guard, read_runs(six_runs), [0.5])
    step, run = report.calibration_step, report.calibration_run
    assert step is not None and run is not None
    # steps strictly before each violation: u1 NONE A; u2 NONE B B; s1 NONE B NONE; s2 NONE NONE; s3 NONE A NONE
    squares = (0.9**2 + 0.4**2) + (0.9**2 + 2 * 0.7**2) + (0.01 + 0.09 + 0.01) + 0.02 + (0.01 + 0.36 + 0.01)
    assert step.n == 13 and step.positives == 5
    assert step.brier is not None and math.isclose(step.brier, squares / 13)
    assert report.brier == step.brier  # the contract's brier is the per-step score
    # bins: p=0.1 → 8 steps, 2 unsafe; p=0.3 → 3 steps, 2 unsafe; p=0.6 → 2 steps, 1 unsafe
    gaps = 8 * abs(0.1 - 2 / 8) + 3 * abs(0.3 - 2 / 3) + 2 * abs(0.6 - 1 / 2)
    assert step.ece is not None and math.isclose(step.ece, gaps / 13)
    filled = [(b.low, b.count, b.observed) for b in step.bins if b.count]
    assert filled == [(0.1, 8, 0.25), (0.3, 3, 2 / 3), (0.6, 2, 0.5)]
    # per run: the first step's prediction (0.1 everywhere); u3 has no step before its violation
    assert (run.n, run.positives) == (5, 2)
    assert run.brier is not None and math.isclose(run.brier, (2 * 0.81 + 3 * 0.01) / 5)
    assert run.ece is not None and math.isclose(run.ece, abs(0.1 - 2 / 5))


def test_a_bounded_property_is_scored_against_violations_within_its_horizon(
        toy_model: GuardModel, six_runs: Path) -> None:
    formula = 'P=? [F<=1 "unsafe"]'
    assert horizon_of(formula) == 1 and horizon_of('P=? [F "unsafe"]') is None
    guard = Guard(with_risk(toy_model, RISK, formula))
    report = replay(guard, read_runs(six_runs), [0.5])
    assert report.horizon == 1
    # outcome 1 only on the step right before a violation: u1 step 1 (A), u2 step 2 (B)
    squares = (0.01 + 0.16) + (0.01 + 0.09 + 0.49) + 0.11 + 0.02 + 0.38
    assert report.brier is not None and math.isclose(report.brier, squares / 13)
    assert report.calibration_run is not None and report.calibration_run.positives == 0


def test_json_entries_keep_the_contract_keys(hand_guard: Guard, six_runs: Path) -> None:
    entries = replay(hand_guard, read_runs(six_runs), [0.5, 0.8]).theta_entries()
    contract = {"theta", "n_unsafe", "n_safe", "detection_rate", "false_alarm_rate", "mean_advance_steps",
                "mean_advance_seconds", "brier", "warned_ahead_rate", "blocked_at_step_rate"}
    for entry in entries:
        assert contract <= set(entry)
        assert {"ece", "brier_run", "ece_run", "stop", "advance_steps", "median_advance_steps"} <= set(entry)


def test_calibrate_bins_by_hand() -> None:
    result = calibrate([(0.0, False), (0.05, True), (0.95, True), (1.0, True), (1.0, False)], bins=10)
    assert (result.n, result.positives) == (5, 3)
    assert result.brier is not None and math.isclose(result.brier, (0 + 0.95**2 + 0.05**2 + 0 + 1) / 5)
    first, last = result.bins[0], result.bins[-1]
    assert (first.count, first.observed, last.count) == (2, 0.5, 3)  # 1.0 falls in the last bin
    assert first.mean_predicted is not None and math.isclose(first.mean_predicted, 0.025)
    assert result.ece is not None and math.isclose(result.ece, (2 * abs(0.025 - 0.5) + 3 * abs(2.95 / 3 - 2 / 3)) / 5)
    empty = calibrate([])
    assert (empty.n, empty.brier, empty.ece, empty.bins) == (0, None, None, [])


risks = st.one_of(st.none(), st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]))


@st.composite
def replays(draw: st.DrawFn) -> list[RunReplay]:
    out = []
    for n in range(draw(st.integers(1, 8))):
        p = draw(st.lists(risks, min_size=1, max_size=6))
        violation = draw(st.one_of(st.none(), st.integers(0, len(p) - 1)))
        if violation is not None:
            p = p[:violation + 1]
            p[violation] = 1.0
        out.append(RunReplay(f"r{n}", p, violation, [None] * len(p)))
    return out


@settings(max_examples=60, deadline=None)
@given(replays(), st.booleans())
def test_the_curve_agrees_with_the_per_theta_figures(runs: list[RunReplay], unseen_alarms: bool) -> None:
    thetas = [0.0, 0.05, 0.1, 0.25, 0.3, 0.5, 0.75, 0.9, 0.95, 1.0]
    report = summarize(runs, thetas, unseen_alarms=unseen_alarms)
    # (the report's replays: under look-ahead their first state never alarms)
    detection, false_alarm = rate_curve(report.replays, thetas, unseen_alarms=unseen_alarms)
    assert detection == [t.detection_rate for t in report.thetas]
    assert false_alarm == [t.false_alarm_rate for t in report.thetas]


def test_warned_ahead_and_blocked_at_step_are_reported_apart(hand_guard: Guard, six_runs: Path) -> None:
    # θ = 0.5: u1 is warned at step 1 (one step ahead of its violation at step 2); u2's only alarm is
    # its violating step 3, which look-ahead blocks at the last moment; u3 violates at its first step
    ahead = replay(hand_guard, read_runs(six_runs), [0.5], enforcement="lookahead").thetas[0]
    assert (ahead.warned_ahead, ahead.blocked_at_step, ahead.detected) == (1, 1, 2)
    assert (ahead.warned_ahead_rate, ahead.blocked_at_step_rate, ahead.detection_rate) == (1 / 3, 1 / 3, 2 / 3)
    assert ahead.warned_ahead_steps == Spread(1, 1.0, 1.0, None, 1.0, 1.0, 1.0, 1.0)
    # observe: nothing is blocked at the step, and detection is the warned-ahead part alone
    observed = replay(hand_guard, read_runs(six_runs), [0.5], enforcement="observe").thetas[0]
    assert (observed.warned_ahead, observed.blocked_at_step, observed.detected) == (1, 0, 1)
    assert observed.warned_ahead_rate == observed.detection_rate == 1 / 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.one_of(st.none(), st.floats(0, 1)), min_size=1, max_size=6),
                          st.integers(-1, 5)), min_size=1, max_size=8),
       st.sampled_from(["lookahead", "observe"]))
def test_detection_is_warned_ahead_plus_blocked_at_step(runs: list[tuple[list[float | None], int]],
                                                        mode: str) -> None:
    replays = [RunReplay(f"r{i}", risks, v if 0 <= v < len(risks) else None, [None] * len(risks))
               for i, (risks, v) in enumerate(runs)]
    for t in summarize(replays, [0.2, 0.5, 0.9], unseen_alarms=True, enforcement=mode).thetas:
        assert t.detected == t.warned_ahead + t.blocked_at_step
        assert mode == "lookahead" or t.blocked_at_step == 0
        assert t.warned_ahead_steps is None or t.warned_ahead_steps.min >= 1
        if t.n_unsafe:
            assert math.isclose(t.detection_rate or 0, (t.warned_ahead_rate or 0) + (t.blocked_at_step_rate or 0))
