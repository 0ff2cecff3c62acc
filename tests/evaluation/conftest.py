"""Fixtures for the evaluation tests: a guard with risks set by hand, and the CLI in-process."""
from __future__ import annotations

import pytest

from _eval_support import RISK, with_risk
from _support import CLI
from forewarn.guard.model import GuardModel
from forewarn.guard.runtime import Guard


@pytest.fixture
def hand_guard(toy_model: GuardModel) -> Guard:
    return Guard(with_risk(toy_model, RISK))


@pytest.fixture
def forewarn_cli(forewarn_here: CLI) -> CLI:
    """The CLI in this process (the shared ``forewarn_here``)."""
    return forewarn_here
