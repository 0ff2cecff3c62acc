"""Fail closed from the first call (issue 36): on a sidecar that cannot be reached, no tool runs.

The look-ahead previews on a local copy of the sidecar's model, so before this fix nothing asked the
sidecar before a call ran: a sidecar that went down after the middleware was built let the first
call run, and only the commit after it failed (the step missing from the audit log). Now the tool
node reaches the sidecar before every call; when it does not answer, the call does not run and the
run raises one :class:`SidecarUnreachable` naming the URL. Resumed once the sidecar is back, the run
goes on: the call runs, and the sidecar's session records the gap — the calls refused meanwhile in
the next step's action (``refused``), a step that ran while it was down sent late (``recorded_late``).

Real uvicorn on 127.0.0.1, stopped and started again on the same port and database.
"""
from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver

from _lc_support import VIOLATIONS_ONLY, ToolLog, remote_id, thresholds
from _sidecar import KEYS, ServerThread, auth, settings
from forewarn.errors import ForewarnError
from forewarn.guard import GuardModel
from forewarn.guard.client import AsyncClient, Client, SidecarUnreachable
from forewarn.guard.langchain import ForewarnMiddleware
from forewarn.guard.langchain._remote import MirroredSession
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls

pytestmark = [pytest.mark.langchain, pytest.mark.server]

READ_A = ("read_file", {"path": "notes/a.md"})
READ_B = ("read_file", {"path": "notes/b.md"})
ASK = "Summarize my notes."


class Sidecar:
    """`forewarn serve` serving the tool model on one loopback port and database: stopped and started
    again there (a sidecar restarted)."""

    def __init__(self, folder: Path, model: Path) -> None:
        self.settings = settings(folder / "forewarn.db", {"tools": model})
        self.server: ServerThread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        server = ServerThread(self.settings)
        if self.port:  # the same address again
            server.sock.close()
            server.sock = socket.socket()
            server.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.sock.bind(("127.0.0.1", self.port))
            server.thread = threading.Thread(target=server.server.run, kwargs={"sockets": [server.sock]}, daemon=True)
        self.port = server.sock.getsockname()[1]
        self.server = server.__enter__()

    def stop(self) -> None:
        if self.server is not None:
            self.server.__exit__()
            self.server = None

    def steps(self, session_id: str) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.url}/v1/sessions/{session_id}", headers=auth("agent"), timeout=30)
        answer.raise_for_status()
        return list(answer.json()["steps"])


@pytest.fixture
def sidecar(tool_model: GuardModel, tmp_path: Path) -> Any:
    running = Sidecar(tmp_path, tool_model.save(tmp_path / "tools.json"))
    running.start()
    yield running
    running.stop()


def _agent(mw: ForewarnMiddleware, script: list[Any], tools: list[BaseTool]) -> Any:
    return create_agent(ScriptedChatModel(script=script), tools, middleware=[mw], checkpointer=InMemorySaver())


def _stopping(log: ToolLog, sidecar: Sidecar, stop_at: str) -> list[BaseTool]:
    """The log's tools, whose `read_file` of ``stop_at`` stops the sidecar as it runs."""
    tools = log.tools()
    read = next(t for t in tools if t.name == "read_file")
    assert isinstance(read, StructuredTool) and read.func is not None
    original: Callable[..., str] = read.func

    def read_file(path: str) -> str:
        """Read a file."""
        out = original(path)
        if path == stop_at:
            sidecar.stop()
        return out

    return [StructuredTool.from_function(read_file) if t.name == "read_file" else t for t in tools]


def _tools_of(steps: list[dict[str, Any]]) -> list[str | None]:
    return [s["action"]["tool"] if s["action"] else None for s in steps]


def _check_refused(raised: pytest.ExceptionInfo[SidecarUnreachable], sidecar: Sidecar) -> None:
    message = str(raised.value)
    assert isinstance(raised.value, ForewarnError) and "\n" not in message
    assert message.startswith(f"Forewarn's sidecar at {sidecar.url} cannot be reached, so the call to `read_file` "
                              f"did not run (fail closed): start the sidecar")


@pytest.mark.parametrize("mode", ["sync", "async", "sync-fallback"])
def test_a_sidecar_down_after_the_middleware_is_built_lets_no_call_run(sidecar: Sidecar, mode: str) -> None:
    """The sidecar stops once the middleware is built: the run's first call does not run (before the fix it
    ran, then ServerError; with ``on_extraction_error`` set, it and every later call ran, the error taken for
    an unreadable call). Resumed with the sidecar back, it runs, and the sidecar's record says it was
    refused once."""
    log = ToolLog()
    config: RunnableConfig = {"configurable": {"thread_id": f"first-{mode}"}}
    script: list[Any] = [tool_calls(READ_A), "Done."]

    if mode.startswith("sync"):
        with Client(sidecar.url, api_key=KEYS["agent"], retries=1) as client:
            mw = ForewarnMiddleware(client, policy=thresholds(stop=VIOLATIONS_ONLY),
                                    on_extraction_error="reflect" if mode == "sync-fallback" else "raise")
            agent = _agent(mw, script, log.tools())
            sidecar.stop()
            with pytest.raises(SidecarUnreachable) as raised:
                agent.invoke({"messages": [HumanMessage(ASK)]}, config)
            assert log.ran == []
            sidecar.start()
            result = agent.invoke(None, config)  # resumed: the tool node again
    else:
        async def run() -> tuple[pytest.ExceptionInfo[SidecarUnreachable], dict[str, Any], ForewarnMiddleware]:
            async with AsyncClient(sidecar.url, api_key=KEYS["agent"], retries=1) as client:
                mw = ForewarnMiddleware(client, policy=thresholds(stop=VIOLATIONS_ONLY))
                agent = _agent(mw, script, log.tools())
                sidecar.stop()
                with pytest.raises(SidecarUnreachable) as raised:
                    await agent.ainvoke({"messages": [HumanMessage(ASK)]}, config)
                assert log.ran == []
                sidecar.start()
                return raised, await agent.ainvoke(None, config), mw

        raised, result, mw = asyncio.run(run())
    _check_refused(raised, sidecar)
    assert log.ran == [READ_A] and result["messages"][-1].content == "Done."
    steps = sidecar.steps(remote_id(mw, f"first-{mode}"))
    assert _tools_of(steps) == [None, "read_file"]
    refused = steps[1]["action"]["refused"]
    assert [(r["tool"], r["args"]) for r in refused] == [READ_A] and "cannot reach" in refused[0]["error"]
    assert "recorded_late" not in steps[1]["action"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_sidecar_down_mid_run_lets_no_later_call_run_and_the_gap_is_recorded(sidecar: Sidecar, mode: str) -> None:
    """The sidecar stops while a call runs: that call's step is kept (the tool's result reaches the model),
    the next call does not run. Resumed with the sidecar back: the kept step is sent (``recorded_late``),
    the call runs once, its step carrying the refusal."""
    log = ToolLog()
    tools = _stopping(log, sidecar, READ_A[1]["path"])
    config: RunnableConfig = {"configurable": {"thread_id": f"mid-{mode}"}}
    script: list[Any] = [tool_calls(READ_A), tool_calls(READ_B), "Done."]

    if mode == "sync":
        with Client(sidecar.url, api_key=KEYS["agent"], retries=1) as client:
            mw = ForewarnMiddleware(client, policy=thresholds(stop=VIOLATIONS_ONLY))
            agent = _agent(mw, script, tools)
            with pytest.raises(SidecarUnreachable) as raised:
                agent.invoke({"messages": [HumanMessage(ASK)]}, config)
            assert log.ran == [READ_A]
            sidecar.start()
            result = agent.invoke(None, config)
    else:
        async def run() -> tuple[pytest.ExceptionInfo[SidecarUnreachable], dict[str, Any], ForewarnMiddleware]:
            async with AsyncClient(sidecar.url, api_key=KEYS["agent"], retries=1) as client:
                mw = ForewarnMiddleware(client, policy=thresholds(stop=VIOLATIONS_ONLY))
                agent = _agent(mw, script, tools)
                with pytest.raises(SidecarUnreachable) as raised:
                    await agent.ainvoke({"messages": [HumanMessage(ASK)]}, config)
                assert log.ran == [READ_A]
                sidecar.start()
                return raised, await agent.ainvoke(None, config), mw

        raised, result, mw = asyncio.run(run())
    _check_refused(raised, sidecar)
    assert log.ran == [READ_A, READ_B] and result["messages"][-1].content == "Done."
    steps = sidecar.steps(remote_id(mw, f"mid-{mode}"))
    assert _tools_of(steps) == [None, "read_file", "read_file"]
    late, after = steps[1]["action"], steps[2]["action"]
    assert late["args"] == READ_A[1] and "ran_at" in late["recorded_late"] and "refused" not in late
    assert after["args"] == READ_B[1] and [(r["tool"], r["args"]) for r in after["refused"]] == [READ_B]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_approvers_on_a_sidecar_that_is_down_let_no_call_run(sidecar: Sidecar, mode: str) -> None:
    """``approvals="sidecar"``: a call that needs approval is proposed to the sidecar's approvers; down, they
    cannot be asked, and the call does not run — the same error, the run kept to be resumed, the call
    kept for the sidecar's record (before, a bare ServerError ended the run)."""
    log = ToolLog()
    send = ("send_email", {"to": "partners@northwind.example", "subject": "Notes", "body": "See attached."})
    tools = _stopping(log, sidecar, READ_A[1]["path"])
    config: RunnableConfig = {"configurable": {"thread_id": f"approvers-{mode}"}}
    script: list[Any] = [tool_calls(READ_A), tool_calls(send), "Sent."]

    def middleware(client: Client | AsyncClient) -> ForewarnMiddleware:
        return ForewarnMiddleware(client, policy=thresholds(ask_human=VIOLATIONS_ONLY), approvals="sidecar",
                                  approval_timeout=30)

    if mode == "sync":
        with Client(sidecar.url, api_key=KEYS["agent"], retries=1) as client:
            mw = middleware(client)
            with pytest.raises(SidecarUnreachable) as raised:
                _agent(mw, script, tools).invoke({"messages": [HumanMessage(ASK)]}, config)
    else:
        async def run() -> tuple[pytest.ExceptionInfo[SidecarUnreachable], ForewarnMiddleware]:
            async with AsyncClient(sidecar.url, api_key=KEYS["agent"], retries=1) as client:
                mw = middleware(client)
                with pytest.raises(SidecarUnreachable) as raised:
                    await _agent(mw, script, tools).ainvoke({"messages": [HumanMessage(ASK)]}, config)
                return raised, mw

        raised, mw = asyncio.run(run())
    assert log.ran == [READ_A]  # the send, which needed approval, did not run
    assert str(raised.value).startswith(f"Forewarn's sidecar at {sidecar.url} cannot be reached, so the call to "
                                        f"`send_email` did not run")
    kept = mw.get_run(f"approvers-{mode}")
    assert kept is not None and not kept.closed and isinstance(kept.session, MirroredSession)
    assert [(r["tool"], r["args"]) for r in kept.session.refused] == [send]
