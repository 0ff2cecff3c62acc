from __future__ import annotations

import pytest

from _lc_support import ToolLog
from domains.tools import generate_traces, load_tool_spec
from guard import Guard, GuardModel, learn_model


@pytest.fixture(scope="session")
def tool_model(tmp_path_factory: pytest.TempPathFactory) -> GuardModel:
    """A model of the tool domain learned from 500 generated runs (about a second)."""
    traces = tmp_path_factory.mktemp("tool-traces") / "runs.jsonl"
    generate_traces(500, seed=11, path=traces)
    return learn_model([traces], load_tool_spec())


@pytest.fixture
def tool_guard(tool_model: GuardModel) -> Guard:
    return Guard(tool_model)


@pytest.fixture
def log() -> ToolLog:
    return ToolLog()
