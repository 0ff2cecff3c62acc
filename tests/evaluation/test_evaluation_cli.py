"""``forewarn replay``, ``evaluate`` and ``ingest`` on the command line (in-process)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from _eval_support import assert_user_error
from _support import CLI
from forewarn.guard.model import GuardModel
from forewarn.guard.replay import replay
from forewarn.guard.runtime import Guard
from forewarn.guard.traces import read_runs

CONTRACT = {"theta", "n_unsafe", "n_safe", "detection_rate", "false_alarm_rate", "mean_advance_steps",
            "mean_advance_seconds", "brier"}


def columnar_copy(traces: Path, target: Path) -> Path:
    lines = []
    for run in read_runs(traces):
        columns: dict[str, list[Any]] = {"a": [], "b": [], "t": [], "action": []}
        for step in run.steps:
            columns["a"].append(step["state"]["a"])
            columns["b"].append(step["state"]["b"])
            columns["t"].append(step.get("t"))
            columns["action"].append(step.get("action"))
        lines.append(orjson.dumps({"id": run.id, "columns": columns}))
    target.write_bytes(b"\n".join(lines) + b"\n")
    return target


@pytest.mark.report
def test_replay_json_report_and_plots(forewarn_cli: CLI, toy_traces: Path, toy_model_path: Path,
                                      tmp_path: Path) -> None:
    report, plots = tmp_path / "out" / "replay.html", tmp_path / "plots"
    result = forewarn_cli("replay", toy_traces, "--model", toy_model_path, "--theta", "0.3,0.6,0.95",
                          "--format", "json", "--report", report, "--plots", plots, "--run", "r2", "--mkdir")
    assert result.returncode == 0, result.stderr
    entries = result.json()
    assert isinstance(entries, list) and [e["theta"] for e in entries] == [0.3, 0.6, 0.95]
    in_process = replay(Guard(GuardModel.load(toy_model_path)), read_runs(toy_traces), [0.3, 0.6, 0.95])
    for entry, theta in zip(entries, in_process.thetas):
        assert set(entry) >= CONTRACT
        for key in CONTRACT - {"brier"}:
            assert entry[key] == getattr(theta, key), key
        assert entry["brier"] == in_process.brier
        assert set(entry["baselines"]) == {"empirical_frequency", "one_change_rule"}
        assert {"prevented", "cut_short", "unsafe_rate", "completion_rate"} <= set(entry["stop"])
    html = report.read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == 4 and "Run r2." in html
    assert "in-sample" in html  # the model was learned from these very traces
    assert sorted(p.name for p in plots.iterdir()) == ["advance.png", "curve.png", "reliability.png", "risk.png"]
    assert not list(report.parent.glob(".*"))  # no temporary file left behind


def test_replay_fits_the_frequency_baseline_on_other_runs(forewarn_cli: CLI, toy_traces: Path,
                                                         toy_model_path: Path) -> None:
    result = forewarn_cli("replay", toy_traces, "--model", toy_model_path, "--baseline-traces", toy_traces)
    assert result.returncode == 0, result.stderr
    assert "left out of its own scoring" not in result.stdout and "Baseline empirical frequency" in result.stdout


def test_replay_reads_columnar_logs_like_jsonl(forewarn_cli: CLI, toy_traces: Path, toy_model_path: Path,
                                               tmp_path: Path) -> None:
    columnar = columnar_copy(toy_traces, tmp_path / "toy.columns.jsonl")
    as_jsonl = forewarn_cli("replay", toy_traces, "--model", toy_model_path, "--format", "json")
    as_columns = forewarn_cli("replay", columnar, "--model", toy_model_path, "--format", "json")
    assert as_jsonl.returncode == as_columns.returncode == 0, as_columns.stderr
    assert as_columns.json() == as_jsonl.json()
    table = forewarn_cli("replay", columnar, "--model", toy_model_path, "--input-format", "columnar")
    assert table.returncode == 0 and "Brier score" in table.stdout and "stop" in table.stdout


@pytest.mark.report
def test_evaluate_json(forewarn_cli: CLI, toy_traces: Path, toy_spec_path: Path, tmp_path: Path) -> None:
    report = tmp_path / "cv.html"
    result = forewarn_cli("evaluate", toy_traces, "--spec", toy_spec_path, "--folds", "2", "--theta", "0.5,0.9",
                          "--method", "topological", "--format", "json", "--report", report)
    assert result.returncode == 0, result.stderr
    document = result.json()
    assert isinstance(document, dict)
    assert (document["folds"], document["runs"], document["group_by"]) == (2, 5, None)
    assert [e["theta"] for e in document["thetas"]] == [0.5, 0.9]
    assert CONTRACT | {"over_folds"} <= set(document["thetas"][0])
    assert {"mean", "stdev", "min", "max"} <= set(document["thetas"][0]["over_folds"]["detection_rate"])
    assert [f["test_runs"] for f in document["fold_details"]] in ([2, 3], [3, 2])
    assert all("satisfied" in f["pac"] for f in document["fold_details"])
    for fold in document["fold_details"]:  # the per-state bounds beside the paper's, the outcome one last
        joint = fold["pac"]["joint"]
        assert set(joint) == {"satisfied", "worst_bound", "runs_factor", "initial_bound", "initial_runs_factor"}
        assert set(fold["pac"]["empirical"]) == set(joint) and 0 < joint["worst_bound"] <= 1
        assert set(fold["pac"]["outcome"]) == set(joint) and 0 < fold["pac"]["outcome"]["worst_bound"] <= 1
    assert "<h2>Folds</h2>" in report.read_text(encoding="utf-8")
    table = forewarn_cli("evaluate", toy_traces, "--spec", toy_spec_path, "--folds", "2")
    assert table.returncode == 0 and "folds" in table.stdout and "PAC" in table.stdout


def test_ingest_writes_the_contract(forewarn_cli: CLI, toy_traces: Path, tmp_path: Path) -> None:
    columnar = columnar_copy(toy_traces, tmp_path / "toy.columns.jsonl")
    output = tmp_path / "converted" / "toy.jsonl"
    result = forewarn_cli("ingest", columnar, "-o", output, "--mkdir")
    assert result.returncode == 0, result.stderr
    assert "wrote 5 runs" in result.stderr
    assert [(r.id, r.steps) for r in read_runs(output)] == [(r.id, r.steps) for r in read_runs(toy_traces)]
    broken = tmp_path / "broken.columns.jsonl"
    broken.write_text(columnar.read_text(encoding="utf-8") + '{"id": "x", "columns": {"a": [1, 2], "b": [1]}}\n',
                      encoding="utf-8")
    failed = tmp_path / "failed.jsonl"
    assert_user_error(forewarn_cli("ingest", broken, "-o", failed), f"{broken}:6: columns.b: has 1 values")
    assert not failed.exists() and not list(tmp_path.glob(".failed.jsonl*"))


@pytest.mark.report  # a --report/--plots case needs the report extra
@pytest.mark.parametrize(("args", "fragments"), [
    (["--theta", "0.5,2"], ("thresholds must lie in [0, 1]",)),
    (["--run", "nobody", "--plots", "PLOTS"], ("--run: no replayed run has the id 'nobody'",)),
])
def test_replay_user_errors(forewarn_cli: CLI, toy_traces: Path, toy_model_path: Path, tmp_path: Path,
                            args: list[str], fragments: tuple[str, ...]) -> None:
    args = [str(tmp_path / "plots") if a == "PLOTS" else a for a in args]
    assert_user_error(forewarn_cli("replay", toy_traces, "--model", toy_model_path, *args), *fragments)


def test_evaluate_user_errors(forewarn_cli: CLI, toy_traces: Path, toy_spec_path: Path, tmp_path: Path) -> None:
    assert_user_error(forewarn_cli("evaluate", toy_traces, "--spec", toy_spec_path, "--folds", "6"),
                      "--folds 6 needs at least 6 groups, but there are only 5 distinct run ids; use --folds 5")
    assert_user_error(forewarn_cli("evaluate", toy_traces, "--spec", toy_spec_path, "--group-by", "meta.task"),
                      "run 'r1' has no 'meta.task' to group by")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    assert_user_error(forewarn_cli("evaluate", empty, "--spec", toy_spec_path), "no runs to evaluate")


def test_help_lists_the_commands(forewarn_cli: CLI) -> None:
    result = forewarn_cli("--help")
    assert result.returncode == 0
    for command in ("replay", "evaluate", "ingest"):
        assert command in result.stdout


@pytest.mark.report
def test_an_empty_replay_still_reports(forewarn_cli: CLI, toy_model_path: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    result = forewarn_cli("replay", empty, "--model", toy_model_path, "--plots", tmp_path / "plots")
    assert result.returncode == 0, result.stderr
    # no run to draw over time; the other figures say there is nothing to show
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["advance.png", "curve.png", "reliability.png"]
