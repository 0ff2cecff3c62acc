"""The middleware on a real sidecar: the same words as in process, the audit log on the server,
no approval queued on the server for a call a human already decided on in the agent."""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from _lc_support import VIOLATIONS_ONLY, ToolLog, remote_id, run_of, thresholds
from _sidecar import KEYS, auth
from forewarn.guard import Guard, GuardModel
from forewarn.guard.client import AsyncClient, Client
from forewarn.guard.langchain import ForewarnMiddleware
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls

SHARE = "Share the customer churn analysis with the partner team."
SEND = ("send_email", {"to": "partners@northwind.example", "subject": "Churn", "body": "Churn fell to 3.1%."})
RM_HOME = ("shell", {"command": "rm -rf ~/*"})


def _script() -> ScriptedChatModel:
    return ScriptedChatModel(script=[tool_calls(("read_inbox", {})), tool_calls(RM_HOME),
                                     tool_calls(("read_file", {"path": "analysis/churn.md"})), tool_calls(SEND),
                                     "Shared."])


def _run(guard: Any, thread_id: str) -> tuple[list[BaseMessage], Any, ForewarnMiddleware]:
    log = ToolLog()
    mw = ForewarnMiddleware(guard, policy=thresholds(reflect=VIOLATIONS_ONLY, ask_human=0.5))
    agent = create_agent(_script(), log.tools(), middleware=[mw], checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    result = agent.invoke({"messages": [HumanMessage(SHARE)]}, config)
    asked = []
    while "__interrupt__" in result:  # a human approves every call the guard asks about
        asked.append(result["__interrupt__"][0].value)
        result = agent.invoke(Command(resume={"type": "approve"}), config)
    return result["messages"], asked, mw


def _words(messages: list[BaseMessage]) -> list[tuple[str, Any]]:
    return [(type(m).__name__, m.content) for m in messages]


def test_the_same_messages_and_interrupts_as_in_process(tool_model: GuardModel, tool_sidecar: Any) -> None:
    local, local_pause, local_mw = _run(Guard(tool_model), "same")
    with Client(tool_sidecar.url, api_key=KEYS["agent"]) as client:
        remote, remote_pause, mw = _run(client, "same")
    assert _words(remote) == _words(local)
    assert len(local_pause) == 2 and remote_pause == local_pause  # the same interrupts, word for word
    approved = {request["name"] for pause in local_pause for request in pause["action_requests"]}
    alerts = [m for m in remote if "[Forewarn] Risk alert" in str(m.content)]
    assert approved == {"shell", "send_email"}
    assert not [m for m in alerts if m.name in approved]  # no alarm for what a human approved
    # the sidecar kept the audit log: every committed step, the human-approved send included
    session_id = remote_id(mw)
    steps = httpx.get(f"{tool_sidecar.url}/v1/sessions/{session_id}", headers=auth("agent")).json()["steps"]
    tools = [s["action"]["tool"] if s["action"] else None for s in steps]
    history = run_of(local_mw).session.history
    assert tools == [None if r.action is None else r.action["tool"] for r in history]
    assert tools[-1] == "send_email" and "shell" in tools and [s["decision"]["action"] for s in steps] == [
        r.decision.action.value for r in history]
    assert steps[-1]["action"]["approved"] is True  # the approval is on the sidecar's record
    # ... and queued no approval of its own for the call a human approved in the agent
    pending = httpx.get(f"{tool_sidecar.url}/v1/approvals", params={"session_id": session_id},
                        headers=auth("approver")).json()["approvals"]
    assert pending == []


def test_async_client_and_concurrent_runs(tool_model: GuardModel, tool_sidecar: Any) -> None:
    async def one(mw: ForewarnMiddleware, n: int) -> list[BaseMessage]:
        log = ToolLog()
        agent = create_agent(ScriptedChatModel(script=[tool_calls(RM_HOME), "Stopped."]), log.tools(),
                             middleware=[mw])
        result = await agent.ainvoke({"messages": [HumanMessage("free space")]}, {"configurable": {"thread_id": f"t{n}"}})
        assert log.ran == []
        return list(result["messages"])

    async def many() -> list[list[BaseMessage]]:
        async with AsyncClient(tool_sidecar.url, api_key=KEYS["agent"]) as client:
            mw = ForewarnMiddleware(client, policy=thresholds(stop=VIOLATIONS_ONLY))
            return list(await asyncio.gather(*(one(mw, n) for n in range(8))))

    results = asyncio.run(many())
    assert all(r[-1].name == "forewarn" for r in results)

    with Client(tool_sidecar.url, api_key=KEYS["agent"]) as client:
        sync_mw = ForewarnMiddleware(client, policy=thresholds(stop=VIOLATIONS_ONLY))

        def run(n: int) -> str:
            agent = create_agent(ScriptedChatModel(script=[tool_calls(("read_file", {"path": "a.md"})), "Done."]),
                                 ToolLog().tools(), middleware=[sync_mw])
            out = agent.invoke({"messages": [HumanMessage("read")]}, {"configurable": {"thread_id": f"p{n}"}})
            return str(out["messages"][-1].content)

        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(run, range(30))) == ["Done."] * 30
        sessions = {remote_id(sync_mw, f"p{n}") for n in range(30)}
        assert len(sessions) == 30
