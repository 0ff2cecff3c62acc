"""The demo's side-by-side table: hand-written spec, discovered spec and counting on the same folds."""
from __future__ import annotations

from pathlib import Path

import pytest

from forewarn.domains.comparison import FALSE_ALARM_TARGETS, compare_specs
from forewarn.domains.embodied import generate_traces, hazard_tasks, write_spec
from forewarn.guard.discovery.discover import held_out_figures
from forewarn.guard.evaluation.baselines import EMPIRICAL
from forewarn.guard.evaluation.evaluate import evaluate
from forewarn.guard.evaluation.tune import parse_target
from forewarn.guard.replay import RunReplay
from forewarn.guard.spec import Spec, load_spec
from forewarn.guard.storm import Method
from forewarn.guard.traces import Run, read_runs


@pytest.fixture(scope="module")
def task_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Spec, list[Run]]:
    folder = tmp_path_factory.mktemp("comparison")
    task = hazard_tasks()[0]
    generate_traces([task], 80, 3, folder / "runs.jsonl")
    write_spec(task, folder / "spec.yaml")
    return load_spec(folder / "spec.yaml"), list(read_runs(folder / "runs.jsonl"))


def _figures(replays: list[RunReplay]) -> tuple[object, ...]:
    return tuple(held_out_figures(replays, parse_target(f"false-alarms={t}"), unseen_alarms=False)
                 for t in FALSE_ALARM_TARGETS)


def test_the_hand_written_and_counting_rows_are_what_evaluate_scores(task_runs: tuple[Spec, list[Run]]) -> None:
    spec, runs = task_runs
    hand, discovered, counting = compare_specs([(spec, runs)])
    # evaluate on the same folds, the runs' meta cut to the task as the comparison cuts it
    known = [Run(id=r.id, steps=r.steps, meta={"task": r.meta["task"]}, source=r.source, line=r.line) for r in runs]
    report = evaluate(known, spec, [0.5], folds=5, method=Method.TOPOLOGICAL)
    assert hand.figures == _figures(list(report.pooled.replays))
    assert counting.figures == _figures(list(report.pooled.baselines[EMPIRICAL].replays))
    assert (hand.name, discovered.name, counting.name) == ("hand-written spec", "discovered spec (nested)",
                                                           "counting (hand-written states)")
    assert discovered.brier is not None and hand.brier is not None and counting.brier is not None


def test_discovery_finds_what_the_agent_announces(task_runs: tuple[Spec, list[Run]]) -> None:
    """On a task whose agent shows its plan in its actions, the nested discovered spec beats the hand-written one."""
    hand, discovered, _ = compare_specs([task_runs])
    assert discovered.brier is not None and hand.brier is not None and discovered.brier < hand.brier
    assert all(d.detection >= h.detection for d, h in zip(discovered.figures, hand.figures))


def test_a_fold_discover_refuses_keeps_the_hand_written_spec(task_runs: tuple[Spec, list[Run]]) -> None:
    spec, runs = task_runs
    safe = [r for r in runs if r.meta["outcome"] != "unsafe"][:30]
    # no run violates: discover refuses every fold (exit 2 on the CLI), so the two specs are one
    hand, discovered, _ = compare_specs([(spec, safe)])
    assert hand.figures == discovered.figures


def test_the_demo_prints_the_comparison(tmp_path: Path) -> None:
    from rich.console import Console

    from forewarn.domains.demo import run_demo

    console = Console(record=True, width=200)
    run_demo(out_dir=tmp_path, runs=20, episodes=1, seed=3, console=console)
    text = console.export_text()
    assert "Specs compared on the logged runs of 8 tasks (160 runs), grouped 5-fold" in text
    assert all(name in text for name in ("hand-written spec", "discovered spec (nested)",
                                         "counting (hand-written states)", "detection @ ≤5% FA"))
