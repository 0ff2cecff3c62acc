"""The middleware passes a decision's confidence interval on: in the alert the model reads and in
the decision data it attaches, and it honours act_on and min_visits."""
from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from test_middleware import CLEANUP, DF, RM_BUILD, agent_for, ask

from _lc_support import ToolLog, well_formed
from forewarn.domains.tools import ToolStateExtractor, Transcript
from forewarn.errors import ThresholdWarning
from forewarn.guard import Guard, Policy
from forewarn.guard.langchain import ForewarnMiddleware
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls
from forewarn.guard.runtime import Decision
from forewarn.guard.spec import Action, Thresholds, Trigger


def _decision_after(guard: Guard, steps: list[dict[str, Any]]) -> Decision:
    return guard.decide(ToolStateExtractor()(Transcript.of(CLEANUP, steps)))


def test_a_held_back_call_carries_the_interval(tool_guard: Guard, log: ToolLog) -> None:
    proposed = {"name": "shell", "args": {"command": "df -h"}, "status": "proposed"}
    expected = _decision_after(tool_guard, [proposed])
    assert expected.p_unsafe is not None and expected.ci_high is not None and expected.visits
    model = ScriptedChatModel(script=[tool_calls(DF), tool_calls(RM_BUILD), "done"])
    # reflect on anything with a risk at all, acting on the interval's upper end (level trigger:
    # the middleware's default, increase, would let a call through that does not raise the risk)
    with pytest.warns(ThresholdWarning, match="such first calls will be reflected"):
        mw = ForewarnMiddleware(tool_guard, policy=Policy(Thresholds(reflect=1.0), act_on="upper",
                                                          trigger=Trigger.LEVEL), max_reflections=5)
    result = agent_for(model, log, mw).invoke(ask(CLEANUP))
    alert = model.seen[1][-1]
    assert isinstance(alert, ToolMessage) and "held back" in alert.content
    assert f"95% interval [{expected.ci_low:.1%}, {expected.ci_high:.1%}], from {expected.visits} visits" \
        in alert.content
    assert "pessimistic probability of staying safe" in alert.content
    data = alert.additional_kwargs["lc_data"]["decision"]
    assert (data["ci_low"], data["ci_high"], data["visits"]) == (expected.ci_low, expected.ci_high, expected.visits)
    assert data["properties"][0]["ci_high"] == expected.properties[0].ci_high
    assert well_formed(result["messages"])


def test_min_visits_holds_back_a_call_into_thinly_seen_states(tool_guard: Guard, log: ToolLog) -> None:
    proposed = {"name": "shell", "args": {"command": "df -h"}, "status": "proposed"}
    visits = _decision_after(tool_guard, [proposed]).visits
    assert visits is not None
    model = ScriptedChatModel(script=[tool_calls(DF), "gave up"])
    policy = Policy(Thresholds(), unseen_state=Action.REFLECT, min_visits=visits + 1)
    mw = ForewarnMiddleware(tool_guard, policy=policy, max_reflections=5)
    agent_for(model, log, mw).invoke(ask(CLEANUP))
    assert log.ran == []
    alert = model.seen[1][-1]
    assert f"seen only {visits} times" in alert.content and f"min_visits {visits + 1}" in alert.content
