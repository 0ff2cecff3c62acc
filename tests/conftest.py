from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from _support import CLI, TOY_SPEC, Result, WriteRuns, toy_run
from forewarn.guard.model import GuardModel
from forewarn.guard.pipeline import learn_model
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.spec import Spec, load_spec

TESTS = Path(__file__).parent

# Tests that need an extra (pip install 'forewarn[NAME]'), by folder or module under tests/ (the
# longest match wins); each of their tests gets the marker of that name (`pytest -m server`).
# A single test elsewhere that needs one carries the marker itself (@pytest.mark.report).
# `pytest --core` (make core-test, in an environment with the core only) neither collects the
# modules listed here nor runs a test with such a marker; everything else must pass there.
NEEDS_EXTRA = {
    "langchain": "langchain",
    "server": "server",
    "llmcheck": "llmcheck",
    "llmcheck/test_llm_hf.py": "hf",
    "llm": "llm",
    "spark": "spark",
    "evaluation/test_report.py": "report",
    "langchain/test_otel.py": "otel",
    "mcp": "mcp",
}
EXTRAS = ("langchain", "server", "client", "report", "llmcheck", "hf", "spark", "postgres", "parquet", "otel", "mcp",
          "llm")


def extra_of(path: Path) -> str | None:
    """The extra the test module or folder at ``path`` needs (None: the core is enough)."""
    try:
        relative = path.relative_to(TESTS).as_posix()
    except ValueError:
        return None
    matches = [prefix for prefix in NEEDS_EXTRA if relative == prefix or relative.startswith(prefix + "/")]
    return NEEDS_EXTRA[max(matches, key=len)] if matches else None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--core", action="store_true",
                     help="run only the tests that need no extra (an environment with the core only)")


def pytest_report_header(config: pytest.Config) -> str:
    import forewarn

    return f"forewarn: {Path(forewarn.__file__).parent}" + (" (--core: tests that need no extra)"
                                                            if config.getoption("--core") else "")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # a module that needs an extra imports it at the top: in the core run it is not even collected
    return True if config.getoption("--core") and extra_of(collection_path) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        extra = extra_of(item.path)
        if extra is not None:
            item.add_marker(getattr(pytest.mark, extra))
    if config.getoption("--core"):
        needs = [item for item in items if any(item.get_closest_marker(name) for name in EXTRAS)]
        if needs:
            config.hook.pytest_deselected(items=needs)
            items[:] = [item for item in items if item not in needs]


@pytest.fixture(autouse=True)
def _registered_predicates_restored() -> Any:
    """What a test registers with ``@forewarn.predicate`` is forgotten after it (the table is process-wide)."""
    from forewarn.guard import trust

    before = dict(trust._REGISTERED)
    yield
    trust._REGISTERED.clear()
    trust._REGISTERED.update(before)


@pytest.fixture
def write_runs(tmp_path: Path) -> WriteRuns:
    """Write runs (dicts, or raw strings for malformed lines) as a JSONL file in tmp_path."""

    def write(runs: Sequence[dict[str, Any] | str], name: str = "traces.jsonl") -> Path:
        path = tmp_path / name
        lines = [r if isinstance(r, str) else orjson.dumps(r).decode() for r in runs]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return write


@pytest.fixture
def toy_spec_path(tmp_path: Path) -> Path:
    path = tmp_path / "toy.yaml"
    path.write_text(TOY_SPEC, encoding="utf-8")
    return path


@pytest.fixture
def toy_spec(toy_spec_path: Path) -> Spec:
    return load_spec(toy_spec_path)


@pytest.fixture
def toy_predicates(toy_spec: Spec) -> PredicateSet:
    return PredicateSet(toy_spec)


@pytest.fixture
def toy_traces(write_runs: WriteRuns) -> Path:
    """Five toy runs with times: three violate (one from the start), two stay safe."""
    return write_runs([
        toy_run("r1", [0, 1, 3, 0], times=[0.0, 1.0, 2.5, 3.0]),
        toy_run("r2", [0, 2, 2], times=[0.0, 2.0, 4.0]),
        toy_run("r3", [0, 1, 0], times=[0.0, 0.5, 1.5]),
        toy_run("r4", [0, 2, 1, 3], times=[0.0, 1.0, 2.0, 4.0]),
        toy_run("r5", [3, 0], times=[0.0, 1.0]),
    ])


@pytest.fixture
def toy_model(toy_traces: Path, toy_spec: Spec) -> GuardModel:
    return learn_model([toy_traces], toy_spec)


@pytest.fixture
def toy_model_path(toy_model: GuardModel, tmp_path: Path) -> Path:
    return toy_model.save(tmp_path / "model.json")


@pytest.fixture
def forewarn_here(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> CLI:
    """Run the CLI's ``main()`` in this process (same code path, without the import cost)."""
    from forewarn.guard.cli import main

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
