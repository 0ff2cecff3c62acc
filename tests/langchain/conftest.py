from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _lc_support import ToolLog
from forewarn.domains.tools import generate_traces, load_tool_spec
from forewarn.guard import Guard, GuardModel, learn_model


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


# -- the same scenarios against a sidecar: `forewarn serve` (uvicorn) on 127.0.0.1 -------------------

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))  # tests/server/_sidecar.py


@pytest.fixture(scope="session")
def tool_sidecar(tool_model: GuardModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real server on a free loopback port serving the tool model (as ``tools``, the default)."""
    from _sidecar import ServerThread, settings

    folder = tmp_path_factory.mktemp("tool-sidecar")
    path = tool_model.save(folder / "tools.json")
    with ServerThread(settings(folder / "forewarn.db", {"tools": path})) as server:
        yield server


@pytest.fixture(params=["in-process", "sidecar"])
def guard_or_client(request: pytest.FixtureRequest, tool_model: GuardModel) -> Iterator[Any]:
    """The in-process guard, or a :class:`~guard.client.Client` of the sidecar serving the same model:
    every middleware scenario that takes it runs against both."""
    if request.param == "in-process":
        yield Guard(tool_model)
        return
    from _sidecar import KEYS
    from forewarn.guard.client import Client

    with Client(request.getfixturevalue("tool_sidecar").url, api_key=KEYS["agent"]) as client:
        yield client
