"""Replay on Spark gives the single-process figures, to the last digit."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from _support import CLI
from forewarn.errors import TraceError
from forewarn.guard.replay import replay
from forewarn.guard.runtime import Guard
from forewarn.guard.traces import read_runs

pytestmark = pytest.mark.spark
THETAS = [0.1, 0.5, 0.9]


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    from forewarn.domains.tools.generator import generate_traces
    from forewarn.domains.tools.spec import load_tool_spec
    from forewarn.guard.pipeline import learn_model

    folder = tmp_path_factory.mktemp("tools")
    train, heldout = folder / "train.jsonl", folder / "heldout.jsonl"
    generate_traces(150, 1, train)
    generate_traces(60, 2, heldout)
    model = learn_model([train], load_tool_spec()).save(folder / "model.json")
    return model, train, heldout


def test_replay_figures_are_the_local_ones(spark: Any, tools: tuple[Path, Path, Path]) -> None:
    from forewarn.guard.spark import replay_spark

    model, _, heldout = tools
    guard = Guard.load(model)
    local = replay(guard, read_runs(heldout), THETAS)
    distributed = replay_spark([str(heldout)], guard, THETAS, spark=spark,
                               split_bytes=heldout.stat().st_size // 5 + 1)
    assert distributed.replays == local.replays  # every step's risk, in reading order
    assert distributed.to_dict() == local.to_dict()
    assert distributed.theta_entries() == local.theta_entries()
    assert local.runs == 60 and any(t.detected for t in local.thetas)


def test_replay_command_on_spark(spark: Any, tools: tuple[Path, Path, Path], forewarn_here: CLI,
                                 tmp_path: Path) -> None:
    model, _, heldout = tools
    local = forewarn_here("replay", heldout, "--model", model, "--theta", "0.2,0.6", "--format", "json")
    assert local.returncode == 0, local.stderr
    on_spark = forewarn_here("replay", heldout, "--model", model, "--theta", "0.2,0.6", "--format", "json",
                             "--engine", "spark")
    assert on_spark.returncode == 0, on_spark.stderr
    assert on_spark.json() == local.json()
    observed = [forewarn_here("replay", heldout, "--model", model, "--theta", "0.2,0.6", "--format", "json",
                              "--enforcement", "observe", "--engine", engine) for engine in ("local", "spark")]
    assert observed[0].returncode == observed[1].returncode == 0
    assert observed[1].json() == observed[0].json() != local.json()
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(heldout.read_bytes().splitlines(keepends=True)[0] + b'{"steps": [{"state": []}]}\n')
    failed = forewarn_here("replay", bad, "--model", model, "--engine", "spark")
    assert failed.returncode == 2
    assert failed.stderr.strip() == f"error: {bad}:2: steps[0].state: expected a JSON object, got a list"
    with pytest.raises(TraceError, match=r"bad.jsonl:2: "):
        replay(Guard.load(model), read_runs(bad), THETAS)


def test_a_registered_python_predicate_reaches_the_workers(spark: Any, tmp_path: Path) -> None:
    """Resolved on the driver, shipped as a function: the executors need not have registered it."""
    import forewarn
    from _support import TOY_SPEC, toy_run
    from forewarn.guard.pipeline import learn_model
    from forewarn.guard.spark import learn_model_spark, replay_spark
    from forewarn.guard.spec import parse_spec

    @forewarn.predicate("spark_test.b_high")
    def b_high(state: dict[str, Any]) -> bool:
        return bool(state["b"] > 2)

    spec = parse_spec(TOY_SPEC.replace("cel: 'state.b > 2'", "python: spark_test.b_high"))
    runs = [toy_run(f"r{i}", bits) for i, bits in enumerate([[0, 1, 3], [0, 2, 2], [0, 1, 0], [2, 3]] * 5)]
    traces = tmp_path / "runs.jsonl"
    traces.write_text("".join(f"{json.dumps(r)}\n" for r in runs), encoding="utf-8")
    local = learn_model([traces], spec)
    distributed = learn_model_spark([str(traces)], spec, spark=spark)
    assert distributed.dtmc.size == local.dtmc.size
    assert distributed.to_document()["transitions"] == local.to_document()["transitions"]
    guard = Guard(local)
    assert replay_spark([str(traces)], guard, THETAS, spark=spark).replays == replay(guard, read_runs(traces),
                                                                                      THETAS).replays
