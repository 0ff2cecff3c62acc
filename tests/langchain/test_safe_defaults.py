"""Safe defaults: tools the extractor does not know are never silently allowed; argument aliases."""
from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from _lc_support import ToolLog
from forewarn.domains.tools import ExtractionError, ToolStateExtractor, Transcript
from forewarn.guard import Guard
from forewarn.guard.langchain import ForewarnMiddleware
from forewarn.guard.langchain.errors import UnknownToolWarning
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls

ASK = "Check the cluster and clean up the prod namespace."


def _with_kubectl(log: ToolLog) -> list[Any]:
    def kubectl(command: str) -> str:
        """Run kubectl."""
        log.ran.append(("kubectl", {"command": command}))
        return "namespace deleted"
    return [*log.tools(), StructuredTool.from_function(kubectl)]


def _script() -> ScriptedChatModel:
    return ScriptedChatModel(script=[tool_calls(("read_file", {"path": "~/.kube/config"})),
                                     tool_calls(("kubectl", {"command": "delete ns prod"})), "Done."])


def test_unknown_tools_warn_at_construction_and_ask_a_human(tool_guard: Guard, log: ToolLog) -> None:
    tools = _with_kubectl(log)
    with pytest.warns(UnknownToolWarning, match=r"\['kubectl'\].*unknown_tools='ask_human'"):
        mw = ForewarnMiddleware(tool_guard, tools=tools)
    agent = create_agent(_script(), tools, middleware=[mw], checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "kube"}}
    paused = agent.invoke({"messages": [HumanMessage(ASK)]}, config)
    (pending,) = paused["__interrupt__"]
    request = pending.value["action_requests"][0]
    assert request["name"] == "kubectl" and "cannot place the call to `kubectl`" in request["description"]
    assert log.names() == ["read_file"]  # not run silently
    result = agent.invoke(Command(resume={"type": "reject", "message": "never in prod"}), config)
    assert log.names() == ["read_file"] and result["messages"][-1].content == "Done."


def test_the_warning_comes_on_the_first_model_call_without_tools(tool_guard: Guard, log: ToolLog) -> None:
    tools = _with_kubectl(log)
    mw = ForewarnMiddleware(tool_guard, unknown_tools="stop")
    agent = create_agent(_script(), tools, middleware=[mw])
    with pytest.warns(UnknownToolWarning, match="kubectl"):
        result = agent.invoke({"messages": [HumanMessage(ASK)]})
    assert log.names() == ["read_file"] and result["messages"][-1].name == "forewarn"
    assert "cannot place the call to `kubectl`" in result["messages"][-1].content


def test_allow_for_unknown_tools_only_when_asked(tool_guard: Guard, log: ToolLog) -> None:
    tools = _with_kubectl(log)
    with pytest.warns(UnknownToolWarning, match="unknown_tools='allow'"):
        mw = ForewarnMiddleware(tool_guard, tools=tools, unknown_tools="allow")
    create_agent(_script(), tools, middleware=[mw]).invoke({"messages": [HumanMessage(ASK)]})
    assert log.names() == ["read_file", "kubectl"]


def test_a_known_kind_needs_no_warning(tool_guard: Guard, log: ToolLog, recwarn: pytest.WarningsRecorder) -> None:
    extractor = ToolStateExtractor(tool_kinds={"kubectl": "shell"})
    ForewarnMiddleware(tool_guard, extractor=extractor, tools=_with_kubectl(log))
    assert not [w for w in recwarn if issubclass(w.category, UnknownToolWarning)]


def test_argument_aliases() -> None:
    plain = ToolStateExtractor(tool_kinds={"run_sql": "shell"})
    with pytest.raises(ExtractionError, match="'command' argument"):
        plain(Transcript.of("drop it", [{"name": "run_sql", "args": {"query": "rm -rf /srv/db"}}]))
    aliased = ToolStateExtractor(tool_kinds={"run_sql": "shell"}, argument_aliases={"run_sql": {"query": "command"}})
    state = aliased(Transcript.of("drop it", [{"name": "run_sql", "args": {"query": "rm -rf /srv/db"}}]))
    assert state["shell"] == {"commands": 1, "destructive": True}
    with pytest.raises(ValueError, match=r"argument_aliases\['run_sql'\]: \['sql'\]"):
        ToolStateExtractor(tool_kinds={"run_sql": "shell"}, argument_aliases={"run_sql": {"query": "sql"}})


# ------------------------------------------------------------------ the reflection text


def _reflected(tool_guard: Guard, **options: Any) -> str:
    from _lc_support import VIOLATIONS_ONLY, thresholds, tool_messages

    log = ToolLog()
    model = ScriptedChatModel(script=[tool_calls(("shell", {"command": "rm -rf ~/*"})), "Stopped."])
    mw = ForewarnMiddleware(tool_guard, policy=thresholds(reflect=VIOLATIONS_ONLY), **options)
    result = create_agent(model, log.tools(), middleware=[mw]).invoke({"messages": [HumanMessage("free space")]})
    assert log.ran == []
    return str(tool_messages(result["messages"])[0].content)


def test_the_default_reflection_is_plain_words(tool_guard: Guard) -> None:
    text = _reflected(tool_guard)
    assert "||" not in text and "P=?" not in text and "property" not in text  # no CEL, no PCTL
    assert "a destructive shell command was run" in text  # what to avoid, in the spec's words
    assert "Revise your plan" in text


def test_a_reflection_template(tool_guard: Guard) -> None:
    text = _reflected(tool_guard, reflection_template="Blocked {tool}: {probability} risk of: {avoid}. [{formula}]")
    assert text.startswith("Blocked shell: 100.0% risk of: ") and "P=? [F" in text
    with pytest.raises(ValueError, match=r"unknown field \{risk\}"):
        ForewarnMiddleware(tool_guard, reflection_template="{risk}")
