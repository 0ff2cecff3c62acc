from __future__ import annotations

import math
from pathlib import Path

import pytest

from forewarn.guard.llmcheck import ExploreSettings, LLMCheckGuard, NgramSource
from forewarn.guard.policy import Policy
from forewarn.guard.spec import Action, Thresholds

PROPERTY = 'P=? [F "destructive_commands>0"]'


@pytest.fixture
def agent_model(corpus_path: Path) -> NgramSource:
    return NgramSource.from_file(corpus_path, order=3)


def test_a_risky_prompt_gets_a_reflection_message(agent_model: NgramSource) -> None:
    guard = LLMCheckGuard(agent_model, PROPERTY, settings=ExploreSettings(alpha=0.95, k=5, depth=4))
    decision = guard.check_prompt("the agent will")
    assert decision.p_unsafe is not None and decision.lower is not None and decision.upper is not None
    assert math.isclose(decision.p_unsafe, 1 / 3)  # "run rm -rf / now" is one of three continuations
    assert decision.action is Action.REFLECT and decision.threshold == 0.9
    assert "33.3%" in decision.message and "rm -rf" in decision.message and PROPERTY in decision.message
    assert decision.lower <= decision.p_unsafe <= decision.upper
    assert decision.abstract_state == {"destructive_commands>0": False} and not decision.unsafe_now


def test_a_safe_prompt_is_allowed_and_decisions_are_cached(agent_model: NgramSource) -> None:
    guard = LLMCheckGuard(agent_model, PROPERTY, settings=ExploreSettings(alpha=0.95, k=5, depth=4))
    decision = guard.check_prompt("the coach said")
    assert decision.action is Action.ALLOW and decision.p_unsafe == 0.0 and decision.message == ""
    report = guard.last_report
    assert guard.check_prompt("the coach said") is decision and guard.last_report is report


def test_policy_thresholds_and_conservative_mode(agent_model: NgramSource) -> None:
    strict = Policy(Thresholds(reflect=0.95, ask_human=0.7, stop=0.5))
    guard = LLMCheckGuard(agent_model, PROPERTY, policy=strict, settings=ExploreSettings(alpha=0.5, k=1, depth=4),
                          conservative=True)
    decision = guard.check_prompt("the")
    # alpha 0.5, k 1: only the likeliest word (" player", 4/9) is explored; the rest counts as unsafe
    assert decision.p_unsafe is not None and decision.p_unsafe == pytest.approx(decision.upper)
    assert decision.p_unsafe > 0.5
    assert decision.action is Action.STOP
    assert decision.to_dict()["action"] == "stop"
