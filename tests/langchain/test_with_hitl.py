"""Beside LangChain's HumanInTheLoopMiddleware: one human decision per call both would interrupt."""
from __future__ import annotations

from typing import Any, Literal

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from _lc_support import VIOLATIONS_ONLY, ToolLog, thresholds, tool_messages
from forewarn.guard import Guard
from forewarn.guard.langchain import ForewarnMiddleware
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls

SEND = ("send_email", {"to": "partners@northwind.example", "subject": "Churn", "body": "Churn fell to 3.1%."})
SHARE = "Share the customer churn analysis with the partner team."


def _agent(tool_guard: Guard, log: ToolLog, mode: Literal["batched", "per_call"], forewarn_first: bool) -> Any:
    hitl = HumanInTheLoopMiddleware(interrupt_on={"send_email": True, "read_file": True}, interrupt_mode=mode)
    mw = ForewarnMiddleware(tool_guard, policy=thresholds(ask_human=VIOLATIONS_ONLY), human_in_the_loop=hitl)
    model = ScriptedChatModel(script=[tool_calls(("read_file", {"path": "analysis/churn.md"})), tool_calls(SEND),
                                      "Shared."])
    order = [mw, hitl] if forewarn_first else [hitl, mw]
    return create_agent(model, log.tools(), middleware=order, checkpointer=InMemorySaver())


@pytest.mark.parametrize("mode", ["batched", "per_call"])
@pytest.mark.parametrize("forewarn_first", [True, False])
def test_one_decision_covers_a_call_both_would_interrupt(tool_guard: Guard, log: ToolLog,
                                                         mode: Literal["batched", "per_call"],
                                                         forewarn_first: bool) -> None:
    agent = _agent(tool_guard, log, mode, forewarn_first)
    config = {"configurable": {"thread_id": f"hitl-{mode}-{forewarn_first}"}}
    result = agent.invoke({"messages": [("user", SHARE)]}, config)
    asked = []
    while "__interrupt__" in result:
        value = result["__interrupt__"][0].value
        asked.append(value)
        answer = {"type": "approve"}
        result = agent.invoke(Command(resume={"decisions": [answer]} if "action_requests" in value and "forewarn"
                                      not in value and mode == "batched" else answer), config)
    # read_file: only HumanInTheLoopMiddleware gates it; send_email: both would, Forewarn alone asks
    assert len(asked) == 2
    assert "forewarn" not in asked[0] and "forewarn" in asked[1]
    assert log.names() == ["read_file", "send_email"] and result["messages"][-1].content == "Shared."
    sent = next(m for m in tool_messages(result["messages"]) if m.name == "send_email")
    assert "[Forewarn]" not in str(sent.content)  # no risk alert after Forewarn's own approval
