"""The approval card names the moves (docs/shield.md): a proposed call's own move and the safer ones from where
the session stands, each with its risk and interval, in the console (real uvicorn, headless Chromium)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _shield_files import SHIELD_SPEC, files_state, learn_shield_model

from _sidecar import KEYS, ServerThread, settings
from forewarn.guard.client import Client

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the test extra)")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; "
                                                         ".ci/run installs it)")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
WAIT_MS = 60_000


def test_the_approval_card_shows_the_call_and_the_safer_moves(tmp_path: Path) -> None:
    model = learn_shield_model(tmp_path, SHIELD_SPEC.replace("enforcement: shield", "enforcement: thresholds"))
    path = model.save(tmp_path / "files.json")
    with ServerThread(settings(tmp_path / "forewarn.db", {"files": path})) as server:
        with Client(server.url, api_key=KEYS["agent"]) as agent:
            session = agent.session()
            session.observe(files_state(0), ask=False)
            session.observe(files_state(1), action={"tool": "delete_file", "args": {"path": "a"}}, ask=False)
            session.propose("delete_file", {"path": "b"}, files_state(2), tools=["delete_file", "read_file"],
                            ask=True, timeout=600)
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                page = browser.new_page()
                page.goto(f"{server.url}/console")
                page.fill("#key", KEYS["approver"])
                page.keyboard.press("Enter")
                card = page.locator(".card", has_text="Proposed call: delete_file")
                playwright_api.expect(card).to_have_count(1, timeout=WAIT_MS)
                moves = card.locator("p.moves").inner_text()
            finally:
                browser.close()
    assert moves.startswith("This move, delete_file: 99.")
    assert "Next moves from here, safest first: (end) 0.0%" in moves and "; read_file 0.3% (0.0%–" in moves
