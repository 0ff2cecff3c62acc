"""Fixtures for the evaluation tests: a guard with risks set by hand, and the CLI in-process."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from _eval_support import CLI, RISK, Result, with_risk
from guard.cli import main
from guard.model import GuardModel
from guard.runtime import Guard


@pytest.fixture
def hand_guard(toy_model: GuardModel) -> Guard:
    return Guard(with_risk(toy_model, RISK))


@pytest.fixture
def forewarn_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> CLI:
    """Run the CLI's ``main()`` in this process."""

    def run(*args: str | Path) -> Result:
        monkeypatch.setattr(sys, "argv", ["forewarn", *map(str, args)])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return Result(tuple(map(str, args)), code, out, err)

    return run
