"""The approver console in headless Chromium (Debian's, driven by Playwright): sign in, see an approval
appear while an agent waits, approve it with the keyboard, the agent continues; an agent key cannot
approve; /docs renders with no network beyond the server."""
from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from _sidecar import KEYS, ServerThread, auth, egg_state
from forewarn.guard.client import Client

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the test extra)")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; "
                                                         ".ci/run installs it)")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
# Every wait below waits on a condition (an element, a text, the agent's thread), never a fixed sleep;
# the ceilings are generous so that a machine under heavy load is slow, not failing.
WAIT_MS = 60_000
ASK_ALL = {"thresholds": {"ask_human": 1.0, "reflect": None, "stop": None}}
RISKY = egg_state(in_microwave=True, toggled=True, closed=True)


@pytest.fixture
def browser() -> Any:
    with playwright_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


def _local_only(page: Any, base: str) -> list[str]:
    """Abort every request that leaves the server; return what was attempted.

    The sync API runs these route handlers only while the test's thread is inside a Playwright
    call: a request the page makes while the test waits on anything else (a thread, a socket)
    stands still until the next one. Waits that the page's requests must get through are
    therefore Playwright's own (``expect``, ``wait_for_selector``)."""
    outside: list[str] = []

    def route(r: Any) -> None:
        if r.request.url.startswith(base):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()
    page.route("**/*", route)
    return outside


def _waiting_agent(url: str, done: dict[str, Any]) -> threading.Thread:
    """An agent that proposes a risky call, waits for a human, then runs it as decided."""
    def run() -> None:
        with Client(url, api_key=KEYS["agent"]) as agent:
            session = agent.session(policy=ASK_ALL)
            session.observe(egg_state(), ask=False)
            proposal = session.propose("toggle", {"object": "Microwave"}, RISKY, tools=["toggle", "open"])
            done["proposed"] = proposal
            answer = agent.wait_for_proposal(proposal["id"], timeout=60)
            done["answer"] = answer
            if answer["status"] == "approved":
                done["decision"] = session.observe(RISKY, action={"tool": "toggle"}, proposal=proposal["id"])
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _stuck(page: Any, server: ServerThread, done: dict[str, Any]) -> tuple[Any, ...]:
    """What to look at when the agent did not go on: the page's error, the agent's answer, the
    proposal's status on the server, and what had the keyboard focus."""
    proposed = done.get("proposed")
    status = None if proposed is None else httpx.get(f"{server.url}/v1/proposals/{proposed['id']}",
                                                     headers=auth("approver")).json().get("status")
    return (page.text_content("#desk-error"), done.get("answer"), status,
            page.evaluate("document.activeElement.outerHTML.slice(0, 120)"),
            page.evaluate("[...document.querySelectorAll('.card input')].map((i) => i.value)"))


def test_an_approver_approves_a_waiting_agent_in_the_console(server: ServerThread, browser: Any,
                                                             tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    outside = _local_only(page, server.url)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{server.url}/console")
    page.fill("#key", KEYS["approver"])
    page.keyboard.press("Enter")
    page.wait_for_selector("#desk:not([hidden])", timeout=WAIT_MS)
    playwright_api.expect(page.locator("#count")).to_have_text("0", timeout=WAIT_MS)

    done: dict[str, Any] = {}
    agent = _waiting_agent(server.url, done)
    card = page.wait_for_selector(".card:has-text('Proposed call: toggle')", timeout=WAIT_MS)  # live, no reload
    text = card.inner_text()
    assert '"object": "Microwave"' in text and "Risk " in text and "Leads to:" in text
    # what the call changes, the risk before → after with its evidence, what each answer does
    assert "This call changes — now:" in text and " → " in text and "Approve: the call runs" in text
    assert card.query_selector("svg.chart") is not None  # the session's risk over time
    page.screenshot(path=str(tmp_path / "console.png"), full_page=True)
    pending = page.locator(".card", has_text="Proposed call: toggle")
    pending.locator("input[aria-label=Reason]").fill("door is shut, watched")
    pending.press("a")  # approve, from the keyboard (the card has the focus)
    # the page's POST goes through the route handler: wait in Playwright until the console shows
    # the decision made (then it reached the server), and only then on the agent's thread
    recent = page.locator("#recent li", has_text="call toggle")
    playwright_api.expect(recent).to_contain_text("approver-bob: door is shut, watched", timeout=WAIT_MS)
    assert "approved" in recent.inner_text()
    agent.join(WAIT_MS / 1000)
    assert not agent.is_alive(), _stuck(page, server, done)
    assert done["answer"]["status"] == "approved", _stuck(page, server, done)
    assert done["answer"]["reason"] == "door is shut, watched"
    assert done["answer"]["resolved_by"] == "approver-bob"
    assert done["decision"].committed and done["decision"].approval_id is None  # the agent went on
    # the console catches up by itself (live update): wait for the state it must reach
    playwright_api.expect(page.locator("#count")).to_have_text("0", timeout=WAIT_MS)
    playwright_api.expect(page.locator(".card")).to_have_count(0, timeout=WAIT_MS)
    assert outside == [] and errors == []

    from PIL import Image

    with Image.open(tmp_path / "console.png") as shot:
        gray = shot.convert("L")
        low, high = cast(tuple[int, int], gray.getextrema())  # one band ("L"): one (min, max) pair
        assert shot.size[0] >= 1000 and high - low > 100 and len(gray.getcolors(1 << 16) or []) > 20  # not blank


def test_an_agent_key_cannot_approve(server: ServerThread, browser: Any, http: httpx.Client) -> None:
    page = browser.new_page()
    _local_only(page, server.url)
    page.goto(f"{server.url}/console")
    page.fill("#key", KEYS["agent"])
    page.keyboard.press("Enter")
    page.wait_for_selector("#signin-error:has-text('cannot approve')", timeout=WAIT_MS)
    assert page.is_hidden("#desk")
    # what the page would call, without a key and with an agent key
    assert http.get("/v1/changes").status_code == 401
    assert http.get("/v1/changes", headers=auth("agent")).status_code == 403
    assert http.get("/v1/proposals", headers=auth("agent")).status_code == 403
    assert http.get("/v1/changes", headers=auth("approver")).status_code == 200
    console = http.get("/console")
    assert console.status_code == 200 and "default-src 'none'" in console.headers["content-security-policy"]
    assert "http" not in console.text.replace("http-equiv", "")  # no external asset named


def test_docs_render_offline(server: ServerThread, browser: Any) -> None:
    page = browser.new_page()
    outside = _local_only(page, server.url)
    logs: list[str] = []
    page.on("console", lambda message: logs.append(message.text))
    page.on("pageerror", lambda exc: logs.append(str(exc)))
    page.goto(f"{server.url}/docs")
    try:
        page.wait_for_selector("#swagger-ui .info .title", timeout=WAIT_MS)
    except Exception:
        raise AssertionError((logs, outside, page.content()[:1500])) from None
    assert "Forewarn sidecar" in page.inner_text("#swagger-ui .info .title")
    assert outside == []  # no CDN


def test_docs_render_under_the_console_policy_and_cannot_be_framed(server: ServerThread, browser: Any) -> None:
    """/docs carries the console's Content-Security-Policy (frame-ancestors 'none', no inline script)
    and Swagger UI still renders the API in Chromium, with no policy violation; a page of another
    origin cannot frame it."""
    for path in ("/docs", "/docs/init.js"):
        headers = httpx.get(f"{server.url}{path}").headers
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert "script-src 'self'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    outside = _local_only(page, server.url)
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text)
            if "Content Security Policy" in message.text else None)
    page.on("pageerror", lambda exc: violations.append(str(exc)))
    page.goto(f"{server.url}/docs")
    playwright_api.expect(page.locator(".swagger-ui .info .title")).to_contain_text("Forewarn", timeout=WAIT_MS)
    playwright_api.expect(page.locator(".opblock").first).to_be_visible(timeout=WAIT_MS)
    assert violations == [] and outside == []
    # framed by a page of another origin: the browser refuses, and says it is frame-ancestors
    framer = browser.new_page()
    with framer.expect_console_message(lambda m: "frame-ancestors 'none'" in m.text, timeout=WAIT_MS) as refused:
        framer.set_content(f'<iframe id="f" src="{server.url}/docs"></iframe>')
    assert server.url in refused.value.text
    playwright_api.expect(framer.frame_locator("#f").locator(".swagger-ui")).to_have_count(0, timeout=WAIT_MS)
