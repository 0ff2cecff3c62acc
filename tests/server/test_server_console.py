"""The approver console in headless Chromium (Debian's, driven by Playwright): sign in, see an approval
appear while an agent waits, approve it with the keyboard, the agent continues; a call that cannot be
undone is not approved without a reason; the sessions view searches and shows a session's trail; an
agent key cannot approve; /docs renders with no network beyond the server."""
from __future__ import annotations

import io
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from _sidecar import KEYS, ServerThread, auth, egg_state, settings
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
    assert "This call changes — now:" in text and " → " in text and "Approve: toggle runs" in text
    assert "The agent did not say how long it waits." in text  # (its proposal gave no timeout)
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


@pytest.fixture(scope="module")
def tools_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """A server of the tool domain's model, whose spec marks reading a secret irreversible."""
    from forewarn.domains.tools import generate_traces, load_tool_spec
    from forewarn.guard import learn_model

    folder = tmp_path_factory.mktemp("console-tools")
    generate_traces(500, seed=11, path=folder / "runs.jsonl")
    model = learn_model([folder / "runs.jsonl"], load_tool_spec()).save(folder / "tools.json")
    with ServerThread(settings(folder / "forewarn.db", {"tools": model})) as running:
        yield running


def _secret_read_proposal(server: ServerThread) -> tuple[str, dict[str, Any]]:
    """An agent asks to read .env (it makes `secret_read` hold: irreversible), saying it waits 10 minutes."""
    from forewarn.domains.tools import ToolStateExtractor, Transcript

    extract = ToolStateExtractor()
    task = "Check the deploy config."
    with Client(server.url, api_key=KEYS["agent"]) as agent:
        session = agent.session(metadata={"thread_id": "console-irreversible", "env": "production"})
        session.observe(extract(Transcript.of(task)), action={"tool": "start"}, ask=False)
        state = extract(Transcript.of(task, [{"name": "read_file", "args": {"path": ".env"}, "status": "proposed"}]))
        proposal = session.propose("read_file", {"path": ".env"}, state, tools=["read_file"], ask=True,
                                   timeout=600, request=task)
    assert proposal["review"]["irreversible"] and proposal["review"]["path"] is not None
    return str(session.id), proposal


def _shot(png: bytes) -> Any:
    from PIL import Image

    return Image.open(io.BytesIO(png)).convert("RGB")


def _not_blank(image: Any) -> bool:
    gray = image.convert("L")
    low, high = gray.getextrema()
    return bool(high - low > 100 and len(gray.getcolors(1 << 16) or []) > 20)


def test_an_irreversible_call_is_not_approved_without_a_reason(tools_server: ServerThread, browser: Any,
                                                               tmp_path: Path) -> None:
    from PIL import ImageChops

    _, proposal = _secret_read_proposal(tools_server)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    outside = _local_only(page, tools_server.url)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{tools_server.url}/console")
    page.fill("#key", KEYS["approver"])
    page.keyboard.press("Enter")
    card = page.locator(".card", has_text="Proposed call: read_file")
    playwright_api.expect(card).to_have_count(1, timeout=WAIT_MS)
    text = card.inner_text()
    # what the approver needs: what changes, the path on to a violation, what each answer does, until when
    assert "now: the agent has read a credential or secret" in text
    path = next(line for line in text.splitlines() if line.startswith("Likeliest path to a violation ("))
    # the path the proposal carries (tested against `forewarn states` in tests/langchain/test_real_people.py)
    steps = proposal["review"]["path"]["steps"]
    assert path.endswith(" → violation") and path.count(" → ") == len(steps)
    # each step in the spec's words, in order (which steps: the learned runs'; it ends where data leaves)
    words = [" and ".join(f"{'' if c['holds'] else 'no longer '}{c['description']}" for c in step["changes"])
             for step in steps]
    assert path.endswith(": " + " → ".join(words) + " → violation")
    assert "data left the organisation after a secret was read" in words[-1]
    assert "Approve: read_file runs once, with the arguments above" in text and "Reject: read_file does not run" in text
    assert "if it proposes the call again, the guard judges it again" in text  # no promise it does not keep
    assert "The user asked: “Check the deploy config.”" in text and "env: production" in text
    # (the agent waits 10 minutes from the proposal: "10 min 0 s" within a second, less on a loaded machine)
    assert "The agent gives up waiting at " in text and re.search(r"\(in (10|[0-9]) min ", text), text
    assert "This call cannot be undone: a reason is required." in text
    reason = card.locator("input[aria-label=Reason]")
    box, input_box = card.bounding_box(), reason.bounding_box()
    assert box is not None and input_box is not None
    before = card.screenshot(path=str(tmp_path / "card.png"))
    # `a` with no reason: refused in the page, the reason field marked and focused; nothing sent
    card.press("a")
    playwright_api.expect(reason).to_have_attribute("aria-invalid", "true", timeout=WAIT_MS)
    playwright_api.expect(reason).to_be_focused(timeout=WAIT_MS)
    assert "cannot be undone" in (reason.get_attribute("placeholder") or "")
    card.locator("button.approve").click()  # the button refuses alike
    refused = card.screenshot(path=str(tmp_path / "card-refused.png"))
    assert httpx.get(f"{tools_server.url}/v1/proposals/{proposal['id']}",
                     headers=auth("approver")).json()["status"] == "pending"
    # the screenshots: a card of the size shown, not blank; the refusal is visible where the reason goes
    shown, marked = _shot(before), _shot(refused)
    assert (tmp_path / "card.png").stat().st_size > 5_000 and (tmp_path / "card-refused.png").exists()
    assert abs(shown.size[0] - box["width"]) <= 1 and abs(shown.size[1] - box["height"]) <= 1
    assert _not_blank(shown) and marked.size == shown.size
    x, y = input_box["x"] - box["x"], input_box["y"] - box["y"]
    field = (int(x), int(y), int(x + input_box["width"]), int(y + input_box["height"]))
    assert ImageChops.difference(shown.crop(field), marked.crop(field)).getbbox() is not None
    # with a reason, `a` approves
    reason.fill("the deploy needs the key; I watch it")
    card.press("a")
    recent = page.locator("#recent li", has_text="call read_file")
    playwright_api.expect(recent).to_contain_text("approver-bob: the deploy needs the key; I watch it",
                                                  timeout=WAIT_MS)
    assert httpx.get(f"{tools_server.url}/v1/proposals/{proposal['id']}",
                     headers=auth("approver")).json()["status"] == "approved"
    assert outside == [] and errors == []


def test_the_sessions_view_searches_and_shows_a_trail(tools_server: ServerThread, browser: Any,
                                                      tmp_path: Path) -> None:
    session_id, proposal = _secret_read_proposal(tools_server)
    answer = httpx.post(f"{tools_server.url}/v1/proposals/{proposal['id']}",
                        json={"decision": "reject", "reason": "<b>no</b> secrets today"}, headers=auth("approver"))
    assert answer.status_code == 200
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    outside = _local_only(page, tools_server.url)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{tools_server.url}/console")
    page.fill("#key", KEYS["approver"])
    page.keyboard.press("Enter")
    page.wait_for_selector("#desk:not([hidden])", timeout=WAIT_MS)
    # searched on the server: this session by a part of its id and by the answer it got
    page.fill("#q-session", session_id[2:14])
    page.select_option("#q-decision", "rejected")
    page.click("#search-form button[type=submit]")
    rows = page.locator("#sessions-table tbody tr")
    playwright_api.expect(rows).to_have_count(1, timeout=WAIT_MS)
    playwright_api.expect(rows.first).to_contain_text(session_id, timeout=WAIT_MS)
    page.select_option("#q-decision", "stop")
    page.click("#search-form button[type=submit]")
    playwright_api.expect(page.locator("#sessions-error")).to_have_text("No session matches.", timeout=WAIT_MS)
    playwright_api.expect(rows).to_have_count(0, timeout=WAIT_MS)
    page.fill("#q-session", "")
    page.select_option("#q-decision", "")
    page.fill("#q-tool", "read_file")
    page.click("#search-form button[type=submit]")
    playwright_api.expect(rows.filter(has_text=session_id)).to_have_count(1, timeout=WAIT_MS)
    rows.filter(has_text=session_id).locator("button").click()
    # its trail: the step, the request, the answer with who gave it and why, in order
    events = page.locator("#trail-table tbody tr")
    playwright_api.expect(events).to_have_count(4, timeout=WAIT_MS)
    lines = [events.nth(i).inner_text() for i in range(4)]
    assert "session opened" in lines[0] and "agent-bob" in lines[0]
    assert "step (step 0)" in lines[1] and "start" in lines[1]
    assert "asked about a call" in lines[2] and 'read_file {"path":".env"}' in lines[2]
    assert "rejected" in lines[3] and "approver-bob" in lines[3]
    # what an agent or a person wrote is shown as text, never markup
    assert "<b>no</b> secrets today" in lines[3] and page.locator("#trail-table b").count() == 0
    page.screenshot(path=str(tmp_path / "sessions.png"), full_page=True)
    with open(tmp_path / "sessions.png", "rb") as file:
        shot = _shot(file.read())
    assert shot.size[0] == 1280 and shot.size[1] >= 900 and _not_blank(shot)
    assert outside == [] and errors == []
