"""The chat-message kind: `send_slack`-like tools, their predicates in a spec, configured like any kind."""
from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from _lc_support import VIOLATIONS_ONLY, ToolLog, thresholds
from forewarn.domains.tools import ExtractionError, ToolStateExtractor, Transcript
from forewarn.guard import Guard, GuardModel, learn_model
from forewarn.guard.langchain import ForewarnMiddleware
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls
from forewarn.guard.spec import PredicateDef

ASK = "Tell the team the deploy is done."
KEY = "AKIAIOSFODNN7EXAMPLE"


def _tools(log: ToolLog) -> list[BaseTool]:
    def send_slack(channel: str, text: str) -> str:
        """Post a Slack message."""
        log.ran.append(("send_slack", {"channel": channel, "text": text}))
        return "ok"

    def notify(room: str, message: str) -> str:
        """Post to a chat room."""
        log.ran.append(("notify", {"room": room, "message": message}))
        return "ok"
    return [*log.tools(), StructuredTool.from_function(send_slack), StructuredTool.from_function(notify)]


def _agent(guard: Any, log: ToolLog, *calls: tuple[str, dict[str, Any]], **options: Any) -> tuple[Any, Any]:
    model = ScriptedChatModel(script=[*(tool_calls(c) for c in calls), "Done."])
    tools = _tools(log) if "extractor" in options else _tools(log)[:-1]  # `notify` needs configuring
    mw = ForewarnMiddleware(guard, policy=thresholds(ask_human=VIOLATIONS_ONLY), tools=tools, **options)
    return create_agent(model, tools, middleware=[mw], checkpointer=InMemorySaver()), mw


def test_the_state_counts_messages_and_their_recipients() -> None:
    extractor = ToolStateExtractor()
    state = extractor(Transcript.of(ASK, [
        {"name": "send_slack", "args": {"channel": "#Deploys", "text": "done"}},
        {"name": "send_message", "args": {"to": ["@ana", "#deploys"], "message": f"key {KEY}"}}]))
    assert state["messages"] == {"sent": 2, "recipients": ["#deploys", "@ana"], "secret_shared": True}
    assert state["last_call"]["kind"] == "message" and state["external_sends"] == 0
    with pytest.raises(ExtractionError, match="'to' argument"):
        extractor(Transcript.of(ASK, [{"name": "send_slack", "args": {"text": "done"}}]))


def test_a_message_to_an_outside_address_is_an_external_send(guard_or_client: Any, log: ToolLog) -> None:
    """Through the default spec (in process and on the sidecar): an unnamed partner is asked about."""
    agent, _ = _agent(guard_or_client, log, ("send_slack", {"channel": "ops@partner.example", "text": "deployed"}))
    paused = agent.invoke({"messages": [("user", ASK)]}, {"configurable": {"thread_id": "dm"}})
    (pending,) = paused["__interrupt__"]
    request = pending.value["action_requests"][0]
    assert request["name"] == "send_slack" and "unconsented_recipient" in request["description"]
    assert log.ran == []
    agent.invoke(Command(resume={"type": "reject", "message": "not them"}), {"configurable": {"thread_id": "dm"}})
    assert log.ran == []


@pytest.fixture(scope="module")
def chat_guard(tool_model: GuardModel) -> Guard:
    """The tool spec plus a predicate on the chat state: a credential posted to a channel is unsafe."""
    spec = tool_model.spec
    predicates = {**spec.predicates, "secret_in_chat": PredicateDef(
        cel="state.messages.secret_shared", description="a credential was posted in a chat")}
    chat_spec = spec.model_copy(update={"predicates": predicates, "unsafe": f"{spec.unsafe} || secret_in_chat"})
    return Guard(learn_model([tool_model.provenance["inputs"][0]["path"]], chat_spec))


def test_a_spec_predicate_on_messages_guards_a_configured_chat_tool(chat_guard: Guard, log: ToolLog) -> None:
    extractor = ToolStateExtractor(tool_kinds={"notify": "message"},
                                   argument_aliases={"notify": {"room": "to", "message": "text"}})
    agent, mw = _agent(chat_guard, log, ("notify", {"room": "#ops", "message": f"the key is {KEY}"}),
                       ("notify", {"room": "#ops", "message": "deploy done"}), extractor=extractor)
    paused = agent.invoke({"messages": [("user", ASK)]}, {"configurable": {"thread_id": "leak"}})
    (pending,) = paused["__interrupt__"]
    request = pending.value["action_requests"][0]
    assert request["name"] == "notify" and "secret_in_chat" in request["description"]
    result = agent.invoke(Command(resume={"type": "reject", "message": "never post keys"}),
                          {"configurable": {"thread_id": "leak"}})
    assert log.ran == [("notify", {"room": "#ops", "message": "deploy done"})]
    assert result["messages"][-1].content == "Done."
    last = mw.get_run("leak").session.history[-1]
    assert last.action["tool"] == "notify" and not last.decision.unsafe_now  # the rejected post never counted
