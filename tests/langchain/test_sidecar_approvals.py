"""Approvals on the sidecar (``approvals="sidecar"``): a call that needs approval becomes a pending
proposal an approver answers over HTTP (as the console does); an edit made there, without a state, is
judged again by the agent, which extracts the edited call's state and proposes it anew (``edit_of``)."""
from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent

from _lc_support import VIOLATIONS_ONLY, ToolLog, remote_id, run_of, thresholds, tool_messages
from _sidecar import KEYS
from forewarn.guard import Guard, GuardModel
from forewarn.guard.client import AsyncClient, Client
from forewarn.guard.langchain import ForewarnMiddleware
from forewarn.guard.langchain._remote import MirroredSession
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls

SHARE = "Share the customer churn analysis with the partner team."
READ = ("read_file", {"path": "analysis/churn.md"})


def _send(to: str) -> dict[str, Any]:
    return {"to": to, "subject": "Churn analysis", "body": "Churn fell to 3.1%."}


def _middleware(client: Client | AsyncClient) -> ForewarnMiddleware:
    return ForewarnMiddleware(client, policy=thresholds(ask_human=VIOLATIONS_ONLY), approvals="sidecar",
                              approval_timeout=60)


def _in_background(work: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = work()
        except BaseException as exc:  # handed to the test
            out["error"] = exc
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _pending(approver: Client, mw: ForewarnMiddleware, *, seen: set[str]) -> dict[str, Any]:
    """The next pending proposal of the middleware's run (waiting for the agent to make it)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        run = mw.last_run
        if run is not None:
            assert isinstance(run.session, MirroredSession)
            session_id = run.session.remote.id
            fresh = [p for p in approver.proposals(session_id=session_id) if p["id"] not in seen]
            if fresh:
                seen.add(fresh[0]["id"])
                return fresh[0]
        time.sleep(0.05)
    raise AssertionError("the agent made no pending proposal")


def _agent(mw: ForewarnMiddleware, log: ToolLog, then: str = "Shared.") -> Any:
    model = ScriptedChatModel(script=[tool_calls(READ), tool_calls(("send_email", _send("partners@northwind.example"))),
                                      then])
    return create_agent(model, log.tools(), middleware=[mw])


def test_a_console_edit_that_still_needs_approval_is_proposed_again(tool_sidecar: Any) -> None:
    log, seen = ToolLog(), set[str]()
    with Client(tool_sidecar.url, api_key=KEYS["agent"]) as client, \
            Client(tool_sidecar.url, api_key=KEYS["approver"]) as approver:
        mw = _middleware(client)
        thread, out = _in_background(lambda: _agent(mw, log).invoke({"messages": [("user", SHARE)]}))
        first = _pending(approver, mw, seen=seen)
        assert first["tool"] == "send_email" and first["arguments"]["to"] == "partners@northwind.example"
        assert first["decision"]["action"] == "ask_human" and first["edit_of"] is None
        edited = _send("ops@partner-two.example")  # still outside: the edit must not slip through
        approver.resolve_proposal(first["id"], "edit", "the partners' ops desk", arguments=edited)  # no state
        second = _pending(approver, mw, seen=seen)
        assert second["edit_of"] == first["id"] and second["arguments"] == edited
        assert second["decision"]["action"] == "ask_human" and second["status"] == "pending"
        assert log.names() == ["read_file"]  # nothing ran while the edit waits
        approver.resolve_proposal(second["id"], "approve", "ok")
        thread.join(30)
        assert not thread.is_alive() and "error" not in out, out.get("error")
        assert log.ran[-1] == ("send_email", edited) and out["result"]["messages"][-1].content == "Shared."
        assert "a human reviewer replaced your call" in tool_messages(out["result"]["messages"])[-1].content
        executed = approver.proposal(second["id"])
        assert executed["status"] == "executed" and executed["step"] is not None  # the step is linked to it
        assert approver.proposal(first["id"])["status"] == "edited"
        assert [i.outcome for i in run_of(mw).interventions] == ["edited"]


def test_a_console_edit_the_guard_allows_runs_linked_to_a_new_proposal(tool_sidecar: Any) -> None:
    log, seen = ToolLog(), set[str]()
    with Client(tool_sidecar.url, api_key=KEYS["agent"]) as client, \
            Client(tool_sidecar.url, api_key=KEYS["approver"]) as approver:
        mw = _middleware(client)
        thread, out = _in_background(lambda: _agent(mw, log).invoke({"messages": [("user", SHARE)]}))
        first = _pending(approver, mw, seen=seen)
        inside = _send("carol@corp.example")
        approver.resolve_proposal(first["id"], "edit", "send it inside", arguments=inside)
        thread.join(30)
        assert not thread.is_alive() and "error" not in out, out.get("error")
        assert log.ran[-1] == ("send_email", inside)
        session_id = remote_id(mw)
        (again,) = [p for p in approver.proposals("all", session_id=session_id) if p["edit_of"] == first["id"]]
        assert again["arguments"] == inside and again["status"] == "executed" and again["step"] is not None
        assert approver.proposals(session_id=session_id) == []  # no second approval was asked


def test_a_rejection_on_the_sidecar_reaches_the_model(tool_sidecar: Any) -> None:
    log, seen = ToolLog(), set[str]()
    with Client(tool_sidecar.url, api_key=KEYS["agent"]) as client, \
            Client(tool_sidecar.url, api_key=KEYS["approver"]) as approver:
        mw = _middleware(client)
        thread, out = _in_background(lambda: _agent(mw, log, "Not shared.").invoke({"messages": [("user", SHARE)]}))
        approver.resolve_proposal(_pending(approver, mw, seen=seen)["id"], "reject", "partners get nothing")
        thread.join(30)
        assert not thread.is_alive() and "error" not in out, out.get("error")
        assert log.names() == ["read_file"]
        answer = tool_messages(out["result"]["messages"])[-1]
        assert "rejected" in answer.content and "partners get nothing" in answer.content


def test_a_call_nobody_answers_is_withdrawn_and_does_not_run(tool_sidecar: Any) -> None:
    log = ToolLog()
    with Client(tool_sidecar.url, api_key=KEYS["agent"]) as client, \
            Client(tool_sidecar.url, api_key=KEYS["approver"]) as approver:
        mw = ForewarnMiddleware(client, policy=thresholds(ask_human=VIOLATIONS_ONLY), approvals="sidecar",
                                approval_timeout=0.5)
        result = _agent(mw, log, "Not shared.").invoke({"messages": [("user", SHARE)]})
        assert log.names() == ["read_file"]  # the unanswered call did not run
        assert "no approver answered within 0.5 s" in tool_messages(result["messages"])[-1].content
        session_id = remote_id(mw)
        assert approver.proposals(session_id=session_id) == []  # withdrawn: no stale card for an approver
        (withdrawn,) = approver.proposals("cancelled", session_id=session_id)
        assert withdrawn["tool"] == "send_email" and withdrawn["reason"] == "the agent stopped waiting after 0.5 s"
        # the approver was shown when the agent would give up: its approval_timeout from the proposal
        assert abs(withdrawn["review"]["deadline"] - withdrawn["created_at"] - 0.5) < 1e-6


def test_the_async_middleware_waits_for_the_sidecar_without_blocking_its_loop(tool_sidecar: Any) -> None:
    log, seen = ToolLog(), set[str]()

    async def run() -> Any:
        async with AsyncClient(tool_sidecar.url, api_key=KEYS["agent"]) as client:
            mw_box["mw"] = mw = _middleware(client)
            ticks = 0

            async def tick() -> None:  # the loop keeps running while the tool node waits
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.01)
            ticker = asyncio.create_task(tick())
            result = await _agent(mw, log).ainvoke({"messages": [("user", SHARE)]})
            ticker.cancel()
            return result, ticks

    mw_box: dict[str, ForewarnMiddleware] = {}
    thread, out = _in_background(lambda: asyncio.run(run()))
    with Client(tool_sidecar.url, api_key=KEYS["approver"]) as approver:
        deadline = time.monotonic() + 30
        while "mw" not in mw_box and time.monotonic() < deadline:
            time.sleep(0.02)
        pending = _pending(approver, mw_box["mw"], seen=seen)
        time.sleep(0.3)
        approver.resolve_proposal(pending["id"], "approve", "checked with the partner team")  # cannot be undone: a reason
    thread.join(30)
    assert not thread.is_alive() and "error" not in out, out.get("error")
    result, ticks = out["result"]
    assert log.names() == ["read_file", "send_email"] and result["messages"][-1].content == "Shared."
    assert ticks >= 10


def test_sidecar_approvals_need_a_sidecar(tool_model: GuardModel) -> None:
    with pytest.raises(ValueError, match="approvals='sidecar'"):
        ForewarnMiddleware(Guard(tool_model), approvals="sidecar")
    with pytest.raises(ValueError, match="approval_timeout=0"):
        ForewarnMiddleware(Guard(tool_model), approval_timeout=0)


def test_an_edit_in_the_console_is_re_checked_and_asked_again(tool_sidecar: Any, tmp_path: Any) -> None:
    """The approver console in headless Chromium: the agent's call appears, the approver edits its
    arguments (no state: the console knows no extractor), the agent re-proposes the edit, which
    still needs approval and appears as a new card with the edited arguments; approved, it runs."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the test extra)")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    log, edited = ToolLog(), _send("ops@partner-two.example")
    with Client(tool_sidecar.url, api_key=KEYS["agent"]) as client, playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{tool_sidecar.url}/console")
            page.fill("#key", KEYS["approver"])
            page.keyboard.press("Enter")
            page.wait_for_selector("#desk:not([hidden])")
            mw = _middleware(client)
            thread, out = _in_background(lambda: _agent(mw, log).invoke({"messages": [("user", SHARE)]}))
            first = page.locator(".card", has_text="partners@northwind.example")
            first.wait_for(timeout=20_000)
            first.press("e")
            first.locator("textarea").fill(json.dumps(edited))
            first.locator("input[aria-label=Reason]").fill("their ops desk instead")
            first.get_by_role("button", name="Edit (e)").click()
            second = page.locator(".card", has_text="re-checked by the agent")
            second.wait_for(timeout=20_000)  # the edit, re-proposed, still needs a human
            assert "ops@partner-two.example" in second.inner_text() and log.names() == ["read_file"]
            page.screenshot(path=str(tmp_path / "edit.png"), full_page=True)
            assert "cannot be undone: a reason is required" in second.inner_text()  # an external send
            second.locator("input[aria-label=Reason]").fill("their ops desk confirmed")
            second.focus()
            second.press("a")
            thread.join(30)
        finally:
            browser.close()
    assert not thread.is_alive() and "error" not in out, out.get("error")
    assert log.ran[-1] == ("send_email", edited) and out["result"]["messages"][-1].content == "Shared."
