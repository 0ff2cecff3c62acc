"""Cross-validation on Spark gives the single-process figures, baselines included, to the last digit."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from _support import CLI
from forewarn.errors import ForewarnError
from forewarn.guard.evaluation.evaluate import evaluate
from forewarn.guard.traces import read_runs

pytestmark = pytest.mark.spark
THETAS = [0.1, 0.5, 0.9]


@pytest.fixture(scope="module")
def grouped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """Tool-agent runs in 6 tasks of uneven size (squares modulo 11) (whole tasks go to one fold)."""
    from forewarn.domains.tools.generator import generate_traces
    from forewarn.domains.tools.spec import load_tool_spec

    folder = tmp_path_factory.mktemp("eval")
    raw, traces = folder / "raw.jsonl", folder / "runs.jsonl"
    generate_traces(140, 3, raw)
    lines = []
    for n, line in enumerate(raw.read_bytes().splitlines()):
        run = orjson.loads(line)
        run["meta"] = {**run.get("meta", {}), "task": f"t{(n * n) % 11}"}
        lines.append(orjson.dumps(run))
    traces.write_bytes(b"\n".join(lines) + b"\n")
    return traces, load_tool_spec()


def test_evaluation_figures_are_the_local_ones(spark: Any, grouped: tuple[Path, Any]) -> None:
    from forewarn.guard.spark.evaluate import evaluate_spark

    traces, spec = grouped
    local = evaluate(list(read_runs(traces)), spec, THETAS, folds=4, group_by="meta.task", seed=1)
    distributed = evaluate_spark([str(traces)], spec, THETAS, folds=4, group_by="meta.task", seed=1, spark=spark,
                                 split_bytes=traces.stat().st_size // 5 + 1)
    assert [f.test_groups for f in distributed.folds] == [f.test_groups for f in local.folds]
    assert distributed.pooled.replays == local.pooled.replays  # every step's risk, in reading order
    assert distributed.to_dict() == local.to_dict()  # every fold, the baselines, the spreads, PAC
    assert set(local.pooled.baselines) == {"empirical_frequency", "one_change_rule"}
    assert local.pooled.runs == 140 and any(t.detected for t in local.pooled.thetas)
    assert any(len(f.test_groups) > 1 for f in local.folds)  # whole groups, several to a fold
    assert all(f.train_runs + f.test_runs == 140 for f in local.folds)


def test_errors_are_the_local_ones(spark: Any, grouped: tuple[Path, Any]) -> None:
    from forewarn.guard.spark.evaluate import evaluate_spark

    traces, spec = grouped
    with pytest.raises(ForewarnError, match="needs at least 7 groups, but there are only 6"):
        evaluate_spark([str(traces)], spec, THETAS, folds=7, group_by="meta.task", spark=spark)
    with pytest.raises(ForewarnError, match=r"runs\.jsonl:1: run .* has no 'meta\.driver' to group by"):
        evaluate_spark([str(traces)], spec, THETAS, folds=3, group_by="meta.driver", spark=spark)


def test_evaluate_command_on_spark(spark: Any, grouped: tuple[Path, Any], forewarn_here: CLI) -> None:
    traces, _ = grouped
    from forewarn.domains.tools.spec import SPEC_PATH

    common = (traces, "--spec", SPEC_PATH, "--folds", "3", "--group-by", "meta.task", "--theta", "0.2,0.6",
              "--format", "json")
    local = forewarn_here("evaluate", *common)
    distributed = forewarn_here("evaluate", *common, "--engine", "spark")
    assert local.returncode == 0 and distributed.returncode == 0, distributed.stderr
    assert distributed.json() == local.json()  # stdout: one JSON document, no Spark logs
    bad = forewarn_here("evaluate", *common, "--master", "local[1]")
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --master applies to --engine spark only"
    bundled = forewarn_here("evaluate", *common, "--engine", "spark", "--bundle-by", "meta.task")
    assert bundled.returncode == 2 and "--bundle-by" in bundled.stderr


def test_a_malformed_run_stops_both_engines_alike(spark: Any, grouped: tuple[Path, Any], forewarn_here: CLI,
                                                 tmp_path: Path) -> None:
    from forewarn.domains.tools.spec import SPEC_PATH

    traces, _ = grouped
    bad = tmp_path / "bad.jsonl"
    lines = traces.read_bytes().splitlines(keepends=True)
    bad.write_bytes(b"".join(lines[:30]) + b'{"steps": [{"state": []}], "meta": {"task": "t0"}}\n'
                    + b"".join(lines[30:]))
    results = [forewarn_here("evaluate", bad, "--spec", SPEC_PATH, "--folds", "3", "--group-by", "meta.task",
                             "--engine", engine) for engine in ("local", "spark")]
    assert [r.returncode for r in results] == [2, 2]
    assert results[1].stderr.strip() == results[0].stderr.strip() == (
        f"error: {bad}:31: steps[0].state: expected a JSON object, got a list")
    assert results[1].stdout == ""


def test_evaluation_with_action_memory_is_the_local_one(spark: Any, grouped: tuple[Path, Any]) -> None:
    """Each fold's model numbers the action classes its own training runs show, on both engines."""
    from forewarn.domains.tools.spec import SPEC_PATH
    from forewarn.guard.spark.evaluate import evaluate_spark
    from forewarn.guard.spec import parse_spec

    traces, _ = grouped
    spec = parse_spec(SPEC_PATH.read_text(encoding="utf-8").replace("learning:\n", "learning:\n  memory: {actions: 2}\n"))
    local = evaluate(list(read_runs(traces)), spec, THETAS, folds=3, group_by="meta.task", seed=2)
    distributed = evaluate_spark([str(traces)], spec, THETAS, folds=3, group_by="meta.task", seed=2, spark=spark,
                                 split_bytes=traces.stat().st_size // 4 + 1)
    assert distributed.pooled.replays == local.pooled.replays
    assert distributed.to_dict() == local.to_dict()
