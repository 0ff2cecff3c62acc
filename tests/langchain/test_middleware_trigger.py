"""The middleware's default trigger (increase) on a run that starts risky, against the level trigger."""
from __future__ import annotations

import warnings

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage

from _lc_support import ToolLog, p_safe, run_of, thresholds
from forewarn.errors import ThresholdWarning
from forewarn.guard import Guard, GuardModel, learn_model
from forewarn.guard.langchain import ForewarnMiddleware, ToolGuard
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls
from forewarn.guard.spec import Action, Trigger

USER = "Summarize README.md into notes/summary.md."
README = ("read_file", {"path": "README.md"})
ENV = ("read_file", {"path": ".env"})


def run(mw: ForewarnMiddleware, log: ToolLog, *script: object) -> None:
    agent = create_agent(ScriptedChatModel(script=list(script)), log.tools(), middleware=[mw])
    agent.invoke({"messages": [HumanMessage(USER)]})


def test_a_harmless_first_call_of_a_risky_run_passes_by_default(tool_guard: Guard, log: ToolLog) -> None:
    start = p_safe(tool_guard, USER, [])
    harmless = p_safe(tool_guard, USER, [{"name": "read_file", "args": README[1], "result": "# README"}])
    assert harmless >= start  # reading the README does not raise the risk
    policy = thresholds(reflect=min(start + 0.05, 1.0))  # the run's start is already below reflect
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default trigger is increase: no warning
        mw = ForewarnMiddleware(tool_guard, policy=policy)
    assert mw._session_guard.policy.trigger is Trigger.INCREASE
    run(mw, log, tool_calls(README), "Done.")
    assert log.names() == ["read_file"] and run_of(mw).interventions == []
    first = run_of(mw).session.history[1].decision
    assert first.action is Action.ALLOW and first.baseline_p_unsafe == pytest.approx(1 - start)


@pytest.fixture
def chain_guard(tool_model: GuardModel) -> Guard:
    """The tool model's plain chain (no shrinking), in which reading .env raises the risk.

    Shrunk towards the observed frequencies (the default) it does not: in the generated
    runs a .env read early in a run is rarely followed by a violation.
    """
    return _plain_chain(tool_model, intervals="none")


def _plain_chain(tool_model: GuardModel, **learning: str) -> Guard:
    spec = tool_model.spec
    plain = spec.model_copy(update={"learning": spec.learning.model_copy(update={"shrink": "off", **learning})})
    runs = tool_model.provenance["inputs"][0]["path"]
    return Guard(learn_model([runs], plain))


def test_a_rise_inside_the_new_states_interval_is_noise(tool_model: GuardModel, log: ToolLog) -> None:
    """With confidence intervals (the tool spec's Clopper-Pearson ones), the same .env read raises the point
    risk, but the run's current risk lies inside the interval of the state it leads to (seen 20 times):
    the data cannot tell that rise from none, so the increase trigger lets it pass."""
    guard = _plain_chain(tool_model)
    start = p_safe(guard, USER, [])
    secret = p_safe(guard, USER, [{"name": "read_file", "args": ENV[1], "result": "KEY=1"}])
    assert secret < start
    mw = ForewarnMiddleware(guard, policy=thresholds(reflect=(start + secret) / 2))
    run(mw, log, tool_calls(ENV), "Read it.")
    assert log.names() == ["read_file"] and run_of(mw).interventions == []


def test_a_call_that_raises_the_risk_is_held_back(chain_guard: Guard, log: ToolLog) -> None:
    tool_guard = chain_guard
    start = p_safe(tool_guard, USER, [])
    secret = p_safe(tool_guard, USER, [{"name": "read_file", "args": ENV[1], "result": "KEY=1"}])
    assert secret < start  # reading .env raises the risk
    mw = ForewarnMiddleware(tool_guard, policy=thresholds(reflect=(start + secret) / 2))
    agent = create_agent(ScriptedChatModel(script=[tool_calls(ENV), "I will not read it."]), log.tools(),
                         middleware=[mw])
    messages = agent.invoke({"messages": [HumanMessage(USER)]})["messages"]
    assert log.ran == []
    [held] = run_of(mw).interventions
    alert = next(m.content for m in messages if getattr(m, "name", None) == "read_file")
    assert (f"This call raises the risk from {held.decision.baseline_p_unsafe:.1%} to "
            f"{held.decision.p_unsafe:.1%}.") in alert
    assert (held.action, held.outcome) == (Action.REFLECT, "held back")
    assert held.decision.increase is not None and held.decision.increase > 0


def test_the_level_trigger_warns_and_holds_back_the_first_call(tool_guard: Guard, log: ToolLog) -> None:
    start = p_safe(tool_guard, USER, [])
    policy = thresholds(reflect=min(start + 0.05, 1.0))
    with pytest.warns(ThresholdWarning, match=rf"^reflect θ {min(start + 0.05, 1.0):g} > p_safe .* first calls "
                                              r"led: such first calls will be reflected"):
        mw = ForewarnMiddleware(tool_guard, policy=policy, trigger="level")
    run(mw, log, tool_calls(README), tool_calls(README), tool_calls(README), "Gave up.")
    assert log.ran == []  # held back twice, then the reflection limit stops the run
    assert [i.outcome for i in run_of(mw).interventions] == ["held back", "held back", "stopped"]


def test_tool_guard_defaults_to_increase_too(tool_guard: Guard) -> None:
    start = p_safe(tool_guard, USER, [])
    policy = thresholds(reflect=min(start + 0.05, 1.0))
    monitor = ToolGuard(tool_guard, policy=policy, user_messages=[USER])
    assert monitor.session.guard.policy.trigger is Trigger.INCREASE
    assert monitor.check(*README).action is Action.ALLOW
    level = ToolGuard(tool_guard, policy=policy, user_messages=[USER], trigger="level")
    assert level.check(*README).action is Action.REFLECT
