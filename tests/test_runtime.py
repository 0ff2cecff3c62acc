from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from dataclasses import FrozenInstanceError, fields, replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from _support import AB, FAR_SPEC, NONE, TOY_SPEC, A, B, WriteRuns, reach_probabilities, toy_run, toy_state
from forewarn.errors import ThresholdWarning
from forewarn.guard import Decision, Guard, Policy
from forewarn.guard.model import GuardModel
from forewarn.guard.pipeline import learn_model
from forewarn.guard.spec import Action, Spec, Thresholds, parse_spec


def exact_risk(model: GuardModel) -> dict[int, Fraction]:
    """Exact P(F unsafe) per abstract state (bits), solved by hand from the learned rows."""
    dtmc = model.dtmc
    rows = {i: dict(dtmc.exact_row(i)) for i in range(dtmc.size)}
    values = reach_probabilities(rows, {int(i) for i in np.flatnonzero(dtmc.unsafe)})
    return {bits: values[i] for i, bits in enumerate(dtmc.states)}


def policy(reflect: float | None = None, ask_human: float | None = None, stop: float | None = None,
           unseen: Action = Action.ASK_HUMAN) -> Policy:
    return Policy(Thresholds(reflect=reflect, ask_human=ask_human, stop=stop), unseen)


def test_observe_looks_up_the_cached_value(toy_model_path: Path) -> None:
    guard = Guard.load(toy_model_path)
    risk = exact_risk(guard.model)
    with pytest.warns(ThresholdWarning, match=r"^reflect θ 0.9 > p_safe 0.51 at the start: every first call will be "
                                              r"reflected"):
        session = guard.session()
    for step, bits in enumerate([NONE, A, B]):
        decision = session.observe(toy_state(bits), action=f"act {step}", t=float(step))
        assert decision.known and not decision.unsafe_now
        assert decision.lower is not None and decision.upper is not None
        assert decision.lower <= risk[bits] <= decision.upper  # certified bounds hold the exact value
        assert decision.p_unsafe is not None and math.isclose(decision.p_unsafe, risk[bits], abs_tol=1e-5)
        assert decision.p_safe == 1.0 - decision.p_unsafe
        assert decision.property == 'P=? [F "unsafe"]'
        assert decision.abstract_state == {"a": bool(bits & 1), "b": bool(bits & 2)}
    assert [r.abstract for r in session.history] == [NONE, A, B]
    assert [(r.index, r.action, r.t) for r in session.history] == [(0, "act 0", 0.0), (1, "act 1", 1.0),
                                                                    (2, "act 2", 2.0)]
    assert session.last is session.history[-1].decision
    assert guard.decide(toy_state(A)) == session.history[1].decision


def test_preview_commits_nothing(toy_model_path: Path) -> None:
    session = Guard(GuardModel.load(toy_model_path)).session()  # the constructor does not warn; load does
    before = session.last  # a local: mypy would keep `session.last` narrowed to None past observe()
    assert before is None
    first = session.observe(toy_state(NONE))
    what_if = session.preview(toy_state(A))
    assert len(session.history) == 1 and session.last is first
    assert what_if == session.observe(toy_state(A))
    assert len(session.history) == 2


@pytest.mark.parametrize(("p_safe", "action", "theta"), [
    (1.0, Action.ALLOW, None),
    (0.9, Action.ALLOW, None),  # act only when p_safe < θ, strictly
    (math.nextafter(0.9, 0), Action.REFLECT, 0.9),
    (0.5, Action.REFLECT, 0.9),
    (0.49, Action.ASK_HUMAN, 0.5),
    (0.2, Action.ASK_HUMAN, 0.5),
    (0.19, Action.STOP, 0.2),
    (0.0, Action.STOP, 0.2),
])
def test_thresholds_to_actions(p_safe: float, action: Action, theta: float | None) -> None:
    assert policy(reflect=0.9, ask_human=0.5, stop=0.2).act(p_safe) == (action, theta)


def test_unset_thresholds_never_act() -> None:
    assert policy(stop=0.2).act(0.3) == (Action.ALLOW, None)
    assert policy(stop=0.2).act(0.1) == (Action.STOP, 0.2)
    assert policy().act(0.0) == (Action.ALLOW, None)


def test_the_guard_acts_at_the_boundary_of_each_threshold(toy_model: GuardModel) -> None:
    guard = Guard(toy_model)
    p_safe = guard.decide(toy_state(A)).p_safe
    assert p_safe is not None and 0 < p_safe < 1
    for action in (Action.REFLECT, Action.ASK_HUMAN, Action.STOP):
        at = guard.session(Policy(Thresholds(**{action.value: p_safe}))).preview(toy_state(A))
        above = guard.session(Policy(Thresholds(**{action.value: math.nextafter(p_safe, 1)}))).preview(toy_state(A))
        assert (at.action, at.threshold, at.message) == (Action.ALLOW, None, "")
        assert (above.action, above.threshold) == (action, math.nextafter(p_safe, 1))
    # the guard's own policy is untouched by per-session policies
    assert guard.policy == Policy.from_settings(toy_model.spec.guard)


def test_the_most_severe_exceeded_threshold_wins(toy_model: GuardModel) -> None:
    guard = Guard(toy_model, policy=policy(reflect=1.0, ask_human=1.0, stop=1.0))
    assert guard.decide(toy_state(NONE)).action is Action.STOP


@pytest.fixture
def partial_model(write_runs: WriteRuns) -> GuardModel:
    """A model whose runs never visit B and never violate (AB is never seen); an unseen state is never judged
    from the seen ones near it (guard.near_states: 0, tests/test_near_states.py judges them)."""
    return learn_model([write_runs([toy_run("q1", [NONE, A, NONE]), toy_run("q2", [NONE, A])])], parse_spec(FAR_SPEC))


def test_an_unseen_state_gets_the_configured_action(partial_model: GuardModel) -> None:
    assert B not in partial_model.dtmc.states
    decision = Guard(partial_model).decide(toy_state(B))
    assert decision.action is Action.ASK_HUMAN  # unseen_state in the toy spec
    assert decision.p_unsafe is None and decision.p_safe is None
    assert not decision.known and not decision.unsafe_now
    assert "never occurred" in decision.message and "b (b is high)" in decision.message
    allow = Guard(partial_model, policy=policy(unseen=Action.ALLOW)).decide(toy_state(B))
    assert allow.action is Action.ALLOW and allow.p_unsafe is None


def test_an_unsafe_state_no_run_reached_is_in_the_model(partial_model: GuardModel) -> None:
    ab = partial_model.dtmc.states.index(AB)  # the spec can reach it: in the model, never seen
    assert partial_model.dtmc.unsafe[ab] and partial_model.visits[ab] == 0
    start = partial_model.dtmc.states.index(NONE)
    assert 0 < partial_model.outcome.values[start] < 0.2  # rare, not impossible
    decision = Guard(partial_model).decide(toy_state(AB))
    assert decision.unsafe_now and decision.action is Action.STOP


def test_an_unsafe_state_never_seen_in_training_stops(write_runs: WriteRuns, toy_spec: Spec) -> None:
    assert toy_spec.text is not None
    observed = parse_spec(toy_spec.text.replace("learning:", "learning:\n  structure: observed"))
    partial_model = learn_model([write_runs([toy_run("q1", [NONE, A, NONE]), toy_run("q2", [NONE, A])])], observed)
    assert AB not in partial_model.dtmc.states  # only observed successors: nothing adds AB
    decision = Guard(partial_model).decide(toy_state(AB))
    assert (decision.p_unsafe, decision.p_safe) == (1.0, 0.0)
    assert decision.action is Action.STOP
    assert decision.unsafe_now and not decision.known
    assert "Safety violation" in decision.message and "'a && b'" in decision.message


def test_a_known_unsafe_state(toy_model: GuardModel) -> None:
    decision = Guard(toy_model).decide(toy_state(AB))
    assert decision.known and decision.unsafe_now
    assert decision.p_unsafe == 1.0 and decision.action is Action.STOP


def test_policy_overrides(toy_model: GuardModel) -> None:
    base = Policy.from_settings(toy_model.spec.guard)
    changed = base.with_overrides({"thresholds": {"stop": 0.3}, "unseen_state": "stop"})
    assert changed.thresholds == Thresholds(reflect=0.9, ask_human=0.5, stop=0.3)
    assert changed.unseen_state is Action.STOP
    assert base.with_overrides(None) is base and base.with_overrides({}) is base
    assert base.thresholds.stop == 0.2  # frozen: the original is untouched
    with pytest.raises(ValueError, match="unknown policy setting"):
        base.with_overrides({"threshold": {"stop": 0.3}})
    with pytest.raises(ValueError):
        base.with_overrides({"thresholds": {"stop": 1.5}})
    with pytest.raises(ValueError):
        base.with_overrides({"unseen_state": "panic"})

    guard = Guard(toy_model)
    p_safe = guard.decide(toy_state(A)).p_safe
    assert p_safe is not None
    strict = guard.session(base.with_overrides({"thresholds": {"reflect": None, "ask_human": None,
                                                               "stop": math.nextafter(p_safe, 1)}}))
    assert strict.observe(toy_state(A)).action is Action.STOP


def test_the_reflection_message_names_state_property_probability_and_threshold(toy_model: GuardModel) -> None:
    guard = Guard(toy_model)
    p_safe = guard.decide(toy_state(A)).p_safe
    assert p_safe is not None
    theta = round(p_safe + 0.05, 2)
    decision = guard.session(policy(reflect=theta)).observe(toy_state(A))
    assert decision.action is Action.REFLECT and decision.threshold == theta
    message = decision.message
    assert "holds: a" in message and "does not hold: b (b is high)" in message
    assert 'P=? [F "unsafe"]' in message and "'a && b'" in message
    assert f"{decision.p_unsafe:.1%}" in message and f"{p_safe:.1%}" in message
    assert f"'reflect' threshold {theta}" in message


def test_decision_to_dict(toy_model: GuardModel) -> None:
    decision = Guard(toy_model).decide(toy_state(A))
    data = decision.to_dict()
    assert {"action", "p_unsafe", "p_safe", "property", "abstract_state", "message"} <= set(data)
    assert data["action"] == decision.action.value
    assert data["abstract_state"] == {"a": True, "b": False}


def test_python_predicates_at_run_time(tmp_path: Path, write_runs: WriteRuns) -> None:
    spec = parse_spec("predicates:\n  hot: state.t > 50\n  near: {python: app.near}\n"
                      "unsafe: hot && near\n")
    near = {"near": lambda s: s["d"] < 1}
    path = write_runs(['{"id": "1", "steps": [{"state": {"t": 10, "d": 5}}, {"state": {"t": 60, "d": 0}}]}'])
    model = learn_model([path], spec, python_predicates=near)
    saved = model.save(tmp_path / "m.json")
    guard = Guard.load(saved, python_predicates=near)  # decide() opens no session: no ThresholdWarning
    assert guard.decide({"t": 60, "d": 0}).unsafe_now
    assert guard.decide({"t": 10, "d": 5}).known


def test_several_properties_each_with_its_own_thresholds(toy_traces: Path) -> None:
    spec = parse_spec(TOY_SPEC.replace("guard:\n", (
        "guard:\n  properties:\n"
        "    - {name: reach, formula: 'F \"unsafe\"'}\n"
        "    - {name: stay, formula: 'G !\"unsafe\"', meaning: satisfaction}\n"
        "    - {name: soon, formula: 'F<=1 \"unsafe\"', thresholds: {stop: 0.99}}\n"))
        .replace("learning:\n", "learning:\n  shrink: 'off'\n"))  # the chain's values are the oracle
    model = learn_model([toy_traces], spec)
    assert [p.name for p in model.properties] == ["reach", "stay", "soon"]
    guard = Guard(GuardModel.load(model.save(toy_traces.with_name("multi.json"))))
    dtmc = guard.model.dtmc
    risk = exact_risk(guard.model)
    i = dtmc.states.index(A)
    one_step = sum((p for j, p in dtmc.exact_row(i) if dtmc.unsafe[j]), Fraction(0))
    decision = guard.decide(toy_state(A))
    reach, stay, soon = decision.properties
    # every run ends, so staying safe forever is the complement of reaching unsafe
    assert reach.p_unsafe is not None and math.isclose(reach.p_unsafe, risk[A], abs_tol=1e-5)
    assert stay.p_unsafe is not None and math.isclose(stay.p_unsafe, risk[A], abs_tol=1e-5)
    assert stay.lower is not None and stay.upper is not None and stay.lower <= risk[A] <= stay.upper
    assert soon.p_unsafe is not None and math.isclose(soon.p_unsafe, one_step, rel_tol=1e-9)
    assert soon.action is Action.STOP and soon.threshold == 0.99  # its own thresholds: p_safe < 0.99
    assert reach.p_safe is not None
    assert (reach.action, reach.threshold) == Policy.from_settings(spec.guard).act(reach.p_safe)
    # the decision reports the property calling for the most severe action
    assert (decision.action, decision.p_unsafe, decision.property) == (Action.STOP, soon.p_unsafe, soon.formula)
    assert "'soon'" in decision.message


MULTI = ("guard:\n  properties:\n"
         "    - {name: reach, formula: 'F \"unsafe\"'}\n"
         "    - {name: stay, formula: 'G !\"unsafe\"', meaning: satisfaction}\n"
         "    - {name: soon, formula: 'F<=1 \"unsafe\"', thresholds: {stop: 0.99}}\n")


def figures(decision: Decision) -> dict[str, object]:
    return {f.name: getattr(decision, f.name) for f in fields(Decision)}


def test_a_decision_writes_its_words_when_read_and_equals_the_eager_one(toy_traces: Path) -> None:
    model = learn_model([toy_traces], parse_spec(TOY_SPEC.replace("guard:\n", MULTI)))
    read: dict[str, dict[str, object]] = {}
    readers: dict[str, Callable[[Decision], object]] = {
        "message": lambda d: d.message, "properties": lambda d: d.properties, "to_dict": Decision.to_dict,
        "repr": repr, "replace": lambda d: replace(d, member="m")}
    for first, reader in readers.items():
        decision = Guard(model).decide(toy_state(A))  # a new guard: nothing of it read yet
        reader(decision)
        read[first] = figures(decision)
        eager = Decision(**figures(decision))  # type: ignore[arg-type]
        assert decision == eager and eager == decision and decision != replace(eager, member="m")
        assert repr(decision) == repr(eager) and decision.to_dict() == eager.to_dict()
        assert replace(decision, member="m") == replace(eager, member="m")
        assert pickle.loads(pickle.dumps(decision)) == eager
        with pytest.raises(FrozenInstanceError):  # built writable, then frozen (_lazy_decision._Draft)
            decision.action = Action.ALLOW  # type: ignore[misc]
        assert decision.action is eager.action
    assert all(fields_read == read["message"] for fields_read in read.values())  # whatever was read first
    decision = Guard(model).decide(toy_state(A))
    reach, stay, soon = decision.properties
    assert decision.action is Action.STOP and decision.visits is not None
    assert soon.ci_low is not None and soon.ci_high is not None and soon.p_safe is not None
    others = "".join(f", '{v.name}' ({v.p_unsafe:.1%})" for v in (reach, stay) if v.action is not Action.ALLOW)
    assert decision.message == (
        "Risk alert (toy): in the current state (holds: a; does not hold: b (b is high)) the probability that "
        f"property 'soon' ({soon.formula}) fails is {soon.p_unsafe:.1%} (95% interval [{soon.ci_low:.1%}, "
        f"{soon.ci_high:.1%}], from {decision.visits} visits). The probability of staying safe, {soon.p_safe:.1%}, "
        "is below the 'stop' threshold 0.99." + (f" Also at risk: {others[2:]}." if others else "")
        + " Revise the plan so that 'a && b' never comes about.")


def test_the_evidence_and_unseen_messages_in_full(toy_model: GuardModel, partial_model: GuardModel) -> None:
    strict = Guard(toy_model, policy=Policy(Thresholds(reflect=0.9), min_visits=10**6))
    decision = strict.decide(toy_state(A))
    (value,) = decision.properties
    assert value.ci_low is not None and value.ci_high is not None
    assert (decision.action, decision.threshold) == (Action.ASK_HUMAN, None)
    assert decision.message == (
        f"The current state (holds: a; does not hold: b (b is high)) was left only {decision.visits} times in the "
        "runs this model was learned from, fewer than min_visits 1000000, so it is treated as unseen: its estimated "
        f"risk {value.p_unsafe:.1%} (95% interval [{value.ci_low:.1%}, {value.ci_high:.1%}], from {decision.visits} "
        "visits) is not trusted, and the policy for unseen states is 'ask_human'.")
    unseen = Guard(partial_model).decide(toy_state(B))
    assert unseen.properties == () and unseen.to_dict()["properties"] == []
    assert unseen.message == (
        "The current state (holds: b (b is high); does not hold: a) never occurred in the runs this model was "
        "learned from, so its risk is unknown; the policy for unseen states is 'ask_human'.")
    allowed = Guard(toy_model, policy=Policy(Thresholds())).decide(toy_state(A))
    assert allowed.action is Action.ALLOW and allowed.message == ""
