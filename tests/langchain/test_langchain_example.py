"""The LangChain example runs offline and shows each intervention."""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langchain_agent.py"


def test_the_example_reflects_asks_and_stops(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--offline"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "Forewarn: reflect on read_file (held back)" in out
    assert "Forewarn: ask_human on read_inbox (alerted)" in out  # the phishing mail read: the human is warned
    assert "Forewarn: stop on send_email (stopped)" in out  # ... and the reply it asks for is stopped
    assert "Forewarn: stop on shell (stopped)" in out
    assert "rm -rf" in out and "Saved a summary" in out
