from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from _support import AB, FAR_SPEC, NONE, A, B, WriteRuns, toy_run
from forewarn.guard import Guard, Policy
from forewarn.guard.learning import END
from forewarn.guard.model import GuardModel
from forewarn.guard.pipeline import learn_model
from forewarn.guard.replay import Enforcement, RunReplay, rate_curve, replay, replay_run, summarize
from forewarn.guard.spec import Action, parse_spec
from forewarn.guard.storm import CheckOutcome, Method
from forewarn.guard.traces import read_runs

# Risk set by hand per abstract state, so every alarm below can be worked out on paper:
# p_safe is NONE 0.9, A 0.4, B 0.7, AB 0.
RISK = {NONE: Fraction(1, 10), A: Fraction(6, 10), B: Fraction(3, 10), AB: Fraction(1), END: Fraction(0)}


def with_risk(model: GuardModel, risk: dict[int, Fraction]) -> GuardModel:
    values = np.array([float(risk[bits]) for bits in model.dtmc.states])
    outcome = CheckOutcome(model.outcome.formula, values, None, None, Method.TOPOLOGICAL, 1e-6, 0.0)
    return GuardModel(model.spec, model.dtmc, outcome, model.pac, model.provenance)


@pytest.fixture
def guard(toy_model: GuardModel) -> Guard:
    assert sorted(toy_model.dtmc.states) == sorted(RISK)
    return Guard(with_risk(toy_model, RISK))


@pytest.fixture
def replay_traces(write_runs: WriteRuns) -> Path:
    return write_runs([
        toy_run("u1", [NONE, A, AB, NONE], times=[0.0, 1.0, 3.0, 4.0]),  # violates at step 2
        toy_run("u2", [NONE, B, B, AB], times=[0.0, 2.0, 5.0, 9.0]),  # violates at step 3
        toy_run("u3", [AB, NONE], times=[0.0, 1.0]),  # violates at once: nothing can warn
        toy_run("s1", [NONE, B, NONE]),
        toy_run("s2", [NONE, NONE]),
        toy_run("s3", [NONE, A]),
    ], name="replay.jsonl")


def test_replay_run_stops_at_the_first_violation(guard: Guard, replay_traces: Path) -> None:
    u1 = replay_run(guard, next(read_runs(replay_traces)))
    assert u1.violation == 2 and u1.unsafe
    assert u1.p_unsafe == [0.1, 0.6, 1.0]  # the step after the violation is not replayed
    assert u1.times == [0.0, 1.0, 3.0]
    assert u1.first_alarm(0.5, unseen_alarms=True) == 1  # A: p_safe 0.4 < 0.5
    assert u1.first_alarm(0.3, unseen_alarms=True) == 2  # only the violation itself


def test_metrics_by_hand(guard: Guard, replay_traces: Path) -> None:
    report = replay(guard, read_runs(replay_traces), [0.3, 0.5, 0.8, 0.95], enforcement="observe")
    assert (report.runs, report.steps, report.unseen_steps) == (6, 3 + 4 + 1 + 3 + 2 + 2, 0)
    by_theta = {t.theta: t for t in report.thetas}
    assert all((t.n_unsafe, t.n_safe) == (3, 3) for t in report.thetas)

    # θ = 0.3: only AB alarms, always at the violation itself: no detection, no false alarm
    t = by_theta[0.3]
    assert (t.detected, t.false_alarms, t.detection_rate, t.false_alarm_rate) == (0, 0, 0.0, 0.0)
    assert t.mean_advance_steps is None and t.mean_advance_seconds is None

    # θ = 0.5: A alarms. u1 warned at step 1 (1 step, 2 s ahead); s3 is a false alarm
    t = by_theta[0.5]
    assert (t.detected, t.false_alarms) == (1, 1)
    assert (t.detection_rate, t.false_alarm_rate) == (1 / 3, 1 / 3)
    assert (t.mean_advance_steps, t.mean_advance_seconds) == (1.0, 2.0)

    # θ = 0.8: A and B alarm. u1: 1 step, 2 s; u2: warned at step 1, 2 steps and 7 s ahead
    t = by_theta[0.8]
    assert (t.detected, t.false_alarms) == (2, 2)  # s1 (B) and s3 (A)
    assert (t.mean_advance_steps, t.median_advance_steps) == (1.5, 1.5)
    assert (t.mean_advance_seconds, t.median_advance_seconds) == (4.5, 4.5)

    # θ = 0.95: every state alarms. u1: 2 steps, 3 s; u2: 3 steps, 9 s; u3 still undetected
    t = by_theta[0.95]
    assert (t.detected, t.false_alarms, t.false_alarm_rate) == (2, 3, 1.0)
    assert (t.mean_advance_steps, t.mean_advance_seconds) == (2.5, 6.0)

    # Brier over the steps strictly before each run's first violation
    squares = [
        (RISK[NONE] - 1) ** 2 + (RISK[A] - 1) ** 2,  # u1: NONE, A
        (RISK[NONE] - 1) ** 2 + 2 * (RISK[B] - 1) ** 2,  # u2: NONE, B, B
        # u3: nothing before its violation
        2 * RISK[NONE] ** 2 + RISK[B] ** 2,  # s1
        2 * RISK[NONE] ** 2,  # s2
        RISK[NONE] ** 2 + RISK[A] ** 2,  # s3
    ]
    assert report.brier is not None
    assert math.isclose(report.brier, sum(squares) / 12, rel_tol=1e-12)
    assert report.to_dict()["brier"] == report.brier


def test_lookahead_counts_an_alarm_on_the_violating_step_as_a_prevention(guard: Guard, replay_traces: Path) -> None:
    report = replay(guard, read_runs(replay_traces), [0.3, 0.5, 0.8, 0.95])  # lookahead: the default
    assert report.enforcement is Enforcement.LOOKAHEAD
    by_theta = {t.theta: t for t in report.thetas}
    # θ = 0.3: AB alarms on u1's and u2's violating steps, which the preview prevents (0 steps ahead);
    # u3 starts unsafe: no decision comes before a run's first step
    t = by_theta[0.3]
    assert (t.detected, t.false_alarms, t.unsafe_at_start) == (2, 0, 1)
    assert (t.mean_advance_steps, t.mean_advance_seconds) == (0.0, 0.0)
    assert t.stop is not None and (t.stop.prevented, t.stop.still_unsafe) == (2, 1)
    assert t.prompts_per_run == 2 / 6  # one alarm step each on u1 and u2, counted at the violation
    # θ = 0.5: u1 at A (1 step, 2 s ahead), u2 at its violating step (0, 0 s); s3 a false alarm
    t = by_theta[0.5]
    assert (t.detected, t.false_alarms) == (2, 1)
    assert (t.mean_advance_steps, t.mean_advance_seconds) == (0.5, 1.0)
    # θ = 0.8 and 0.95: every violation was already warned of before it, as under observe
    assert (by_theta[0.8].detected, by_theta[0.8].false_alarms, by_theta[0.8].mean_advance_steps) == (2, 2, 1.5)
    # (a run's first state never alarms under look-ahead: no call leads there, the middleware never acts on it)
    assert (by_theta[0.95].detected, by_theta[0.95].false_alarms, by_theta[0.95].mean_advance_steps) == (2, 3, 1.5)
    # the mode changes when an alarm counts, never the calibration
    observed = replay(guard, read_runs(replay_traces), [0.3], enforcement="observe")
    assert observed.brier == report.brier and observed.thetas[0].detected == 0
    assert report.theta_entries()[0]["enforcement"] == "lookahead" and report.to_dict()["enforcement"] == "lookahead"


def test_unseen_states_alarm_unless_the_policy_allows_them(write_runs: WriteRuns) -> None:
    partial = learn_model([write_runs([toy_run("q", [NONE, A, NONE])], "train.jsonl")], parse_spec(FAR_SPEC))
    assert B not in partial.dtmc.states and AB in partial.dtmc.states  # AB: unsafe, in the model, never reached
    model = with_risk(partial, {NONE: Fraction(1, 10), A: Fraction(2, 10), AB: Fraction(1), END: Fraction(0)})
    runs = write_runs([toy_run("v1", [NONE, B, AB], times=[0.0, 1.0, 2.0]), toy_run("v2", [NONE, B])],
                      "replay.jsonl")

    alarming = replay(Guard(model), read_runs(runs), [0.1], enforcement="observe")
    [t] = alarming.thetas
    assert (t.detected, t.false_alarms, t.mean_advance_steps, t.mean_advance_seconds) == (1, 1, 1.0, 1.0)
    assert alarming.unseen_steps == 2
    # only the seen steps before a violation are scored: NONE of v1 (outcome 1), NONE of v2 (outcome 0)
    assert alarming.brier is not None and math.isclose(alarming.brier, (0.9**2 + 0.1**2) / 2)

    quiet = Guard(model, policy=Policy.from_settings(model.spec.guard).with_overrides({"unseen_state": "allow"}))
    assert quiet.policy.unseen_state is Action.ALLOW
    [t] = replay(quiet, read_runs(runs), [0.1], enforcement="observe").thetas
    assert (t.detected, t.false_alarms) == (0, 0)


def test_no_runs_of_a_kind_gives_no_rate(guard: Guard, write_runs: WriteRuns) -> None:
    report = replay(guard, read_runs(write_runs([toy_run("s", [NONE, B])], "safe.jsonl")), [0.5])
    [t] = report.thetas
    assert (t.n_unsafe, t.detection_rate, t.false_alarm_rate) == (0, None, 0.0)


def test_the_increase_trigger_scores_only_steps_that_raise_the_risk() -> None:
    # a safe run that starts risky and never gets riskier; a violating run that rises at step 1
    safe = RunReplay("s", [0.3, 0.3, 0.2], None, [None] * 3, start_risk=0.3)
    unsafe = RunReplay("u", [0.3, 0.6, 1.0], 2, [0.0, 1.0, 3.0], start_risk=0.3)
    unseen = RunReplay("n", [0.3, None], None, [None] * 2, start_risk=0.3)
    runs = [safe, unsafe, unseen]
    level = {t.theta: t for t in summarize(runs, [0.3, 0.8], unseen_alarms=True).thetas}
    # level: p_safe 0.7 < 0.8 after the first call of both runs (under look-ahead their start never alarms);
    # the unseen state alarms
    assert (level[0.8].detected, level[0.8].mean_advance_steps, level[0.8].false_alarms) == (1, 1.0, 2)
    observed = {t.theta: t for t in summarize(runs, [0.8], unseen_alarms=True, enforcement="observe").thetas}
    assert (observed[0.8].detected, observed[0.8].mean_advance_steps) == (1, 2.0)  # told of the start: warned there
    rising = summarize(runs, [0.3, 0.8], unseen_alarms=True, min_increase=0.0)
    assert rising.trigger == "increase" and rising.to_dict()["min_increase"] == 0.0
    assert [r.quiet for r in rising.replays] == [frozenset({0, 1, 2}), frozenset({0}), frozenset({0})]
    by = {t.theta: t for t in rising.thetas}
    # increase: the safe run raises nothing (no false alarm); u is warned at its rise, 1 step (2 s) ahead
    assert (by[0.8].detected, by[0.8].mean_advance_steps, by[0.8].mean_advance_seconds) == (1, 1.0, 2.0)
    assert by[0.8].false_alarms == 1  # the unseen state still alarms, as unseen_state says
    # θ = 0.3: only the violating step alarms; the look-ahead prevents it there, under either trigger
    assert (by[0.3].detected, by[0.3].mean_advance_steps) == (1, 0.0)
    # a tolerance above the rise leaves only the violation itself
    tolerant = {t.theta: t for t in summarize(runs, [0.8], unseen_alarms=True, min_increase=0.35,
                                              enforcement="observe").thetas}
    assert tolerant[0.8].detected == 0
    # curves agree with the per-θ figures
    detection, false_alarm = rate_curve(rising.replays, [0.3, 0.8], unseen_alarms=True)
    assert (detection, false_alarm) == ([1.0, 1.0], [0.5, 0.5])
    # a level summary of the same replays clears what an increase summary marked
    assert all(r.quiet == frozenset() for r in summarize(rising.replays, [0.8], unseen_alarms=True,
                                                           enforcement="observe").replays)


def test_replay_takes_the_start_risk_and_trigger_from_the_guard(guard: Guard, replay_traces: Path) -> None:
    level = replay(guard, read_runs(replay_traces), [0.95])
    assert level.trigger == "level" and level.replays[0].start_risk == guard.start_risk[0]
    rising = replay(guard, read_runs(replay_traces), [0.95], trigger="increase")
    # the toy runs start in NONE (risk 0.1) four times and in AB once: starting risk (0.4 + 1) / 5 = 0.28
    assert math.isclose(guard.start_risk[0], 0.28)
    [t] = rising.thetas
    # every run's first step (NONE, 0.1 < 0.28) is quiet now; s2 (NONE, NONE) raises no alarm at all
    assert (t.detected, t.false_alarms) == (2, 2)
    assert [level.thetas[0].detected, level.thetas[0].false_alarms] == [2, 3]
