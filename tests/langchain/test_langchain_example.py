"""The LangChain example runs offline and shows each intervention."""
from __future__ import annotations

import re
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
    assert "on read_inbox (alerted)" in out  # the phishing mail, read: its content comes with an alert
    assert "Forewarn: ask_human on read_file (rejected)" in out  # reading .env is asked about, rejected
    assert "Forewarn: stop on shell (stopped)" in out
    assert "rm -rf" in out and "Saved a summary" in out and "Replied to Bob" in out
    assert "send_email(to='it-support" not in out  # the key never left
    # why it was asked: the rise lies beyond the interval of the state the read leads to (a supported
    # increase, guard/thresholds.py); with too few runs behind that state, it would not
    asked = " ".join(out[out.index("ASK   ?"):out.index("human >")].split())
    found = re.search(r"interval \[([\d.]+)%, ([\d.]+)%\].*raises the risk from ([\d.]+)% to ([\d.]+)%", asked)
    assert found is not None, asked
    low, high, before, after = map(float, found.groups())
    assert before < low <= after <= high
