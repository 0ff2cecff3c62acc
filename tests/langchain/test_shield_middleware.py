"""The shield in the LangChain middleware (guard.enforcement: shield, docs/shield.md): a real agent driven by
the scripted chat model. A second delete — a move that risks ≈ 99 % from where the run stands — is held back
with the safer moves in words; the reads before and after it run; the first delete, safe from there, runs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _shield_files import learn_shield_model
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver

from forewarn.guard import Guard, GuardModel
from forewarn.guard.langchain import ForewarnMiddleware
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls


@pytest.fixture(scope="module")
def shield_model(tmp_path_factory: pytest.TempPathFactory) -> GuardModel:
    model: GuardModel = learn_shield_model(tmp_path_factory.mktemp("shield-lc"))
    return model


def _tools(ran: list[tuple[str, str]]) -> list[StructuredTool]:
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(("read_file", path))
        return "rows"

    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(("delete_file", path))
        return "deleted"
    return [StructuredTool.from_function(read_file), StructuredTool.from_function(delete_file)]


def _run(guard: Any, thread: str) -> tuple[list[tuple[str, str]], list[Any]]:
    ran: list[tuple[str, str]] = []
    script = ScriptedChatModel(script=[tool_calls(("read_file", {"path": "notes.md"})),
                                       tool_calls(("delete_file", {"path": "old.log"})),
                                       tool_calls(("delete_file", {"path": "db.sqlite"})),
                                       tool_calls(("read_file", {"path": "app.log"})), "Done."])
    agent = create_agent(script, _tools(ran), middleware=[ForewarnMiddleware(guard)], checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    result = agent.invoke({"messages": [HumanMessage("Tidy the folder.")]}, config)
    return ran, result["messages"]


def test_the_shield_holds_back_the_risky_move_and_lets_the_rest_run(shield_model: GuardModel) -> None:
    ran, messages = _run(Guard(shield_model), "shield")
    assert ran == [("read_file", "notes.md"), ("delete_file", "old.log"), ("read_file", "app.log")]
    held = [m for m in messages if isinstance(m, ToolMessage) and str(m.content).startswith("Shield")]
    assert len(held) == 1
    text = str(held[0].content)
    assert text.startswith("Shield (files): this call is blocked because its risk is at least 50%; the run goes on.")
    assert "`delete_file` from here leads to a violation in 99% of runs [" in text
    assert "`read_file` keeps it at" in text
    assert messages[-1].content == "Done."  # the run went on to its end


def test_the_sidecar_shields_the_middleware_the_same(shield_model: GuardModel, tmp_path: Path) -> None:
    from _sidecar import KEYS, ServerThread, settings
    from forewarn.guard.client import Client

    path = shield_model.save(tmp_path / "files.json")
    with ServerThread(settings(tmp_path / "forewarn.db", {"files": path})) as server, \
            Client(server.url, api_key=KEYS["agent"]) as client:
        ran, _ = _run(client, "shield-sidecar")
    assert ran == [("read_file", "notes.md"), ("delete_file", "old.log"), ("read_file", "app.log")]
