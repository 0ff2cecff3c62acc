"""The increase trigger and the warning when a threshold is crossed where runs start."""
from __future__ import annotations

import re
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _support import AB, CLI, FAR_SPEC, NONE, TOY_SPEC, A, B, WriteRuns, toy_run, toy_state
from forewarn.errors import ForewarnError, SpecError, ThresholdWarning
from forewarn.guard import Guard, Policy
from forewarn.guard.learning import END
from forewarn.guard.model import GuardModel
from forewarn.guard.pipeline import learn_model
from forewarn.guard.spec import Action, Trigger, parse_spec
from forewarn.guard.storm import CheckOutcome, Method
from forewarn.guard.thresholds import initial_crossings, start_risk

# p_safe by hand: NONE 0.7 (a run that starts risky: below reflect 0.9), A 0.4, B 0.75, AB 0
RISK = {NONE: Fraction(3, 10), A: Fraction(6, 10), B: Fraction(1, 4), AB: Fraction(1), END: Fraction(0)}
HINT = (" under the level trigger, the default of Guard sessions (forewarn serve, the MCP proxy and the LangChain "
        "middleware default to increase, which acts only on calls that raise the risk; or lower the threshold)")
SET_HINT = " (set guard.trigger: increase to act only on calls that raise the risk, or lower the threshold)"


def with_risk(model: GuardModel, risk: dict[int, Fraction]) -> GuardModel:
    values = np.array([float(risk[bits]) for bits in model.dtmc.states])
    outcome = CheckOutcome(model.outcome.formula, values, None, None, Method.TOPOLOGICAL, 1e-6, 0.0)
    return GuardModel(model.spec, model.dtmc, outcome, model.pac, model.provenance)


def spec_text(guard_lines: str = "") -> str:
    return TOY_SPEC + guard_lines


@pytest.fixture
def risky(write_runs: WriteRuns) -> GuardModel:
    """Every run starts in NONE, whose p_safe 0.7 is below the reflect threshold 0.9."""
    runs = write_runs([toy_run("u", [NONE, A, AB]), toy_run("s1", [NONE, B, NONE]), toy_run("s2", [NONE, A, NONE]),
                       toy_run("s3", [NONE, B, B])], "start.jsonl")
    return with_risk(learn_model([runs], parse_spec(TOY_SPEC)), RISK)


def increase(model: GuardModel, min_increase: float = 0.0) -> Guard:
    policy = Policy.from_settings(model.spec.guard).with_overrides({"trigger": "increase",
                                                                    "min_increase": min_increase})
    return Guard(model, policy=policy)


def test_the_starting_risk_is_the_initial_states_risk_weighted_by_runs(risky: GuardModel,
                                                                       toy_model: GuardModel) -> None:
    assert start_risk(risky) == (0.3,)
    # the toy runs start four times in NONE and once in AB (unsafe, risk 1)
    values = toy_model.outcome.values
    none, ab = (toy_model.dtmc.states.index(b) for b in (NONE, AB))
    assert start_risk(toy_model) == pytest.approx(((4 * values[none] + values[ab]) / 5,), abs=1e-12)


def test_level_holds_back_the_first_step_of_a_risky_run(risky: GuardModel) -> None:
    session = Guard(risky).session()
    first = session.observe(toy_state(NONE))
    assert (first.action, first.threshold) == (Action.REFLECT, 0.9)
    assert first.baseline_p_unsafe is None and first.increase is None and session.baseline is None
    assert session.preview(toy_state(B)).action is Action.REFLECT  # lower risk, still below 0.9


def test_increase_lets_steps_through_that_do_not_raise_the_risk(risky: GuardModel) -> None:
    session = increase(risky).session()
    assert session.baseline == (0.3,)  # the starting risk
    first = session.observe(toy_state(NONE))  # the first step of the run: no increase over its start
    assert (first.action, first.threshold, first.baseline_p_unsafe, first.increase) == (Action.ALLOW, None, 0.3, 0.0)
    assert first.message == ""
    lower = session.preview(toy_state(B))
    assert lower.action is Action.ALLOW and lower.increase == pytest.approx(-0.05)
    raising = session.preview(toy_state(A))  # +0.3: the level thresholds apply (p_safe 0.4 < 0.5)
    assert (raising.action, raising.threshold, raising.baseline_p_unsafe) == (Action.ASK_HUMAN, 0.5, 0.3)
    assert raising.increase == pytest.approx(0.3)
    assert "This step raises the risk from 30.0% to 60.0%." in raising.message
    assert raising.to_dict()["baseline_p_unsafe"] == 0.3 and raising.to_dict()["increase"] == raising.increase
    assert session.observe(toy_state(A)).action is Action.ASK_HUMAN
    assert session.baseline == (0.6,)  # the last committed step's risk
    assert session.preview(toy_state(NONE)).action is Action.ALLOW  # back down: 0.6 → 0.3
    violation = session.preview(toy_state(AB))
    assert violation.unsafe_now and violation.action is Action.STOP  # a violation is never waved through


def test_min_increase_and_per_session_overrides(risky: GuardModel) -> None:
    guard = Guard(risky)  # the spec says level; a session switches to increase, as thresholds can be
    tolerant = guard.session(guard.policy.with_overrides({"trigger": "increase", "min_increase": 0.3}))
    tolerant.observe(toy_state(NONE))
    assert tolerant.preview(toy_state(A)).action is Action.ALLOW  # +0.3 is not more than 0.3
    strict = guard.session(guard.policy.with_overrides({"trigger": "increase", "min_increase": 0.29}))
    strict.observe(toy_state(NONE))
    assert strict.preview(toy_state(A)).action is Action.ASK_HUMAN
    assert guard.session().observe(toy_state(NONE)).action is Action.REFLECT  # the guard itself is unchanged
    cases: list[tuple[dict[str, Any], str]] = [
        ({"trigger": "rising"}, "policy trigger 'rising': expected 'level' or 'increase'"),
        ({"min_increase": 1.5}, "policy min_increase 1.5: expected a number in [0, 1]"),
        ({"min_increase": True}, "policy min_increase True"),
        ({"trigger": "increase", "mode": 1}, "unknown policy setting(s) ['mode']")]
    for bad, message in cases:
        with pytest.raises(ForewarnError, match=re.escape(message)):
            guard.policy.with_overrides(bad)


def test_restore_threads_the_runs_risk(risky: GuardModel) -> None:
    session = increase(risky).session()
    session.restore([(NONE, ()), (A, ())])
    assert session.baseline == (0.6,) and [r.decision.action for r in session.history] == [Action.ALLOW,
                                                                                          Action.ASK_HUMAN]
    assert session.preview(toy_state(A)).action is Action.ALLOW  # staying at 0.6 raises nothing


def test_unseen_states_follow_their_policy_and_keep_the_runs_risk(write_runs: WriteRuns) -> None:
    partial = learn_model([write_runs([toy_run("q", [NONE, A, NONE])], "q.jsonl")], parse_spec(FAR_SPEC))
    risk = {NONE: Fraction(3, 10), A: Fraction(6, 10), AB: Fraction(1), END: Fraction(0)}  # AB: never reached
    session = increase(with_risk(partial, risk)).session()
    session.observe(toy_state(NONE))
    unseen = session.observe(toy_state(B))
    assert (unseen.known, unseen.action) == (False, Action.ASK_HUMAN)
    assert session.baseline == (0.3,)  # nothing known to compare with: the last known risk stays


def test_the_spec_sets_the_trigger(tmp_path: Path) -> None:
    settings = parse_spec(spec_text("  trigger: increase\n  min_increase: 0.05\n")).guard
    policy = Policy.from_settings(settings)
    assert (policy.trigger, policy.min_increase, policy.increase) == (Trigger.INCREASE, 0.05, 0.05)
    assert Policy.from_settings(parse_spec(TOY_SPEC).guard).trigger is None  # unset: level for a Guard
    with pytest.raises(SpecError, match=r"^toy.yaml:16: guard.min_increase: 'min_increase' applies to "
                                        r"'trigger: increase', not 'level'"):
        parse_spec(spec_text("  trigger: level\n  min_increase: 0.1\n"), source="toy.yaml")
    with pytest.raises(SpecError, match=r"^toy.yaml:15: guard.trigger: Input should be 'level' or 'increase'"):
        parse_spec(spec_text("  trigger: rising\n"), source="toy.yaml")
    with pytest.raises(SpecError, match=r"^toy.yaml:15: guard.min_increase"):
        parse_spec(spec_text("  min_increase: -0.1\n"), source="toy.yaml")


# ------------------------------------------------------------------ warnings


def test_initial_crossings_in_words(risky: GuardModel, toy_model: GuardModel) -> None:
    policy = Policy.from_settings(risky.spec.guard)
    assert initial_crossings(risky, policy) == [
        "reflect θ 0.9 > p_safe 0.70 at the start: every first call will be reflected" + HINT]
    # the most severe action crossed is the one that will act
    ask = with_risk(risky, {**RISK, NONE: Fraction(55, 100)})
    assert initial_crossings(ask, policy) == [
        "ask_human θ 0.5 > p_safe 0.45 at the start: every first call will be sent to a human for approval" + HINT]
    assert initial_crossings(risky, policy.with_overrides({"thresholds": {"reflect": 0.7}})) == []
    assert initial_crossings(risky, policy.with_overrides({"trigger": "increase"})) == []
    # two initial states, one unsafe (left out: that run has violated already)
    toy_policy = Policy.from_settings(toy_model.spec.guard)
    none = toy_model.dtmc.states.index(NONE)
    p = 1.0 - float(toy_model.outcome.values[none])
    assert initial_crossings(toy_model, toy_policy) == [
        f"reflect θ 0.9 > p_safe {p:.2f} at the start: every first call will be reflected" + HINT]


def test_a_look_ahead_is_warned_about_the_states_first_calls_lead_to(risky: GuardModel) -> None:
    """The middleware never acts on a run's initial state: its warning speaks of where first calls led
    (A twice, p_safe 0.4; B twice, 0.75)."""
    level = Policy.from_settings(risky.spec.guard).with_overrides({"trigger": "level"})
    assert initial_crossings(risky, level, first_calls=True) == [
        "ask_human θ 0.5 > p_safe 0.40 where 50% of the learned runs' first calls led: such first calls will be "
        "sent to a human for approval" + SET_HINT]
    calm = level.with_overrides({"thresholds": {"reflect": 0.3, "ask_human": 0.3, "stop": 0.1}})
    assert initial_crossings(risky, calm, first_calls=True) == []
    assert initial_crossings(risky, calm) == []


def test_the_first_level_session_of_a_loaded_guard_warns_once(risky: GuardModel, tmp_path: Path) -> None:
    """Issue 36: Guard.load warned even for a guard going into the LangChain middleware (whose trigger is
    increase). Loading says nothing; the guard's first session under the level trigger warns, once."""
    path = risky.save(tmp_path / "risky.json")
    increase = Policy.from_settings(risky.spec.guard).with_overrides({"trigger": "increase"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        guard = Guard.load(path)  # where it goes decides the trigger: not known here
        guard.session(increase)  # an increase session acts only on steps that raise the risk: true, no warning
        Guard.load(path, policy=increase).session()
        Guard(risky).session()  # the constructor (used per fold by evaluate) never warns
    with pytest.warns(ThresholdWarning, match=r"^reflect θ 0.9 > p_safe 0.70 at the start: every first call") as got:
        guard.session()
    assert len(got) == 1 and got[0].filename == __file__  # pointed at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        guard.session()  # once per guard
    spec = parse_spec(spec_text("  trigger: increase\n"))
    calm = GuardModel(spec, risky.dtmc, risky.properties[0].outcome, risky.pac, risky.provenance)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Guard.load(calm.save(tmp_path / "calm.json")).session()


def test_no_warning_for_a_loaded_guard_in_the_middleware(risky: GuardModel, tmp_path: Path) -> None:
    """The middleware defaults to the increase trigger: a guard loaded for it warns neither at load nor at
    the middleware's sessions; its own level sessions still warn."""
    pytest.importorskip("langchain_core", reason="the langchain extra")
    from forewarn.guard.langchain import ForewarnMiddleware

    guard = Guard.load(risky.save(tmp_path / "risky.json"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        middleware = ForewarnMiddleware(guard, extractor=lambda _: toy_state(NONE))
        middleware._session_guard.session()
    with warnings.catch_warnings(record=True) as got:  # under level: the middleware's own words, once
        warnings.simplefilter("always")
        level = ForewarnMiddleware(guard, extractor=lambda _: toy_state(NONE), trigger="level")
        level._session_guard.session()
        level._session_guard.session()
    assert got and [str(w.message) for w in got] == initial_crossings(
        risky, guard.policy.with_overrides({"trigger": "level"}), first_calls=True)
    with pytest.warns(ThresholdWarning, match="every first call will be reflected under the level trigger"):
        guard.session()


def test_learn_prints_the_warning(forewarn_here: CLI, toy_spec_path: Path, write_runs: WriteRuns,
                                  tmp_path: Path) -> None:
    runs = write_runs([toy_run("u", [NONE, A, AB]), toy_run("s", [NONE, B, NONE])], "learn.jsonl")
    result = forewarn_here("learn", runs, "--spec", toy_spec_path, "-o", tmp_path / "m.json", "--format", "json")
    assert result.returncode == 0, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("warning: reflect θ 0.9 > p_safe ") and "every first call will be reflected" in line
    assert result.json()["threshold_warnings"] == [line.removeprefix("warning: ")]


def test_replay_shows_the_warning_once_it_succeeded(forewarn_here: CLI, risky: GuardModel, write_runs: WriteRuns,
                                                    tmp_path: Path) -> None:
    model = risky.save(tmp_path / "risky.json")
    runs = write_runs([toy_run("u", [NONE, A, AB]), toy_run("s", [NONE, B])], "replay.jsonl")
    as_json = forewarn_here("replay", runs, "--model", model, "--theta", "0.5", "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert isinstance(as_json.json(), list)
    assert as_json.stderr.startswith("warning: reflect θ 0.9 > p_safe 0.70 at the start")
    table = forewarn_here("replay", runs, "--model", model, "--theta", "0.5")
    assert "note: reflect θ 0.9 > p_safe 0.70 at the start" in " ".join(table.stdout.split())
    broken = write_runs(['{"id": "b", "steps": [{"state": {"a": true}}]}'], "broken.jsonl")  # no field b
    failing = forewarn_here("replay", broken, "--model", model, "--theta", "0.5")
    [line] = failing.stderr.strip().splitlines()  # the error alone: the warning waits for a success
    assert failing.returncode == 2 and line.startswith("error: ") and "'b'" in line
