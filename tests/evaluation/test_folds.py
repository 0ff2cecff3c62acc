"""Folds keep groups whole; cross-validation learns each fold's model without its test runs."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _support import AB, NONE, A, B, toy_run
from forewarn.errors import ForewarnError
from forewarn.guard.evaluation import evaluate as evaluate_module
from forewarn.guard.evaluation.evaluate import evaluate
from forewarn.guard.evaluation.folds import group_of, split_folds
from forewarn.guard.pipeline import learn_model_from_runs
from forewarn.guard.spec import Spec
from forewarn.guard.traces import Run, parse_run


@st.composite
def grouped_runs(draw: st.DrawFn) -> tuple[list[str], list[bool], int]:
    groups = draw(st.lists(st.sampled_from("abcdefghij"), min_size=2, max_size=40))
    unsafe = draw(st.lists(st.booleans(), min_size=len(groups), max_size=len(groups)))
    k = draw(st.integers(2, max(2, len(set(groups)))))
    return groups, unsafe, k


@settings(max_examples=150, deadline=None)
@given(grouped_runs(), st.integers(0, 5))
def test_folds_never_split_a_group(case: tuple[list[str], list[bool], int], seed: int) -> None:
    groups, unsafe, k = case
    if len(set(groups)) < 2:
        with pytest.raises(ForewarnError, match="needs at least 2 groups"):
            split_folds(groups, unsafe, k, seed=seed)
        return
    folds = split_folds(groups, unsafe, k, seed=seed)
    assert len(folds) == k and all(folds)  # no empty fold
    assert sorted(i for fold in folds for i in fold) == list(range(len(groups)))  # every run once
    owner: dict[str, int] = {}
    for f, fold in enumerate(folds):
        for i in fold:
            assert owner.setdefault(groups[i], f) == f, f"group {groups[i]} split over folds"


def test_folds_are_balanced_in_runs_and_violations() -> None:
    groups = [f"g{i // 3}" for i in range(30)]  # ten groups of three runs
    unsafe = [i < 15 for i in range(30)]  # the first five groups violate
    folds = split_folds(groups, unsafe, 5, seed=1)
    assert [len(f) for f in folds] == [6] * 5
    assert [sum(unsafe[i] for i in f) for f in folds] == [3] * 5


def test_too_few_groups_is_a_clear_error() -> None:
    with pytest.raises(ForewarnError, match=r"--folds 5 needs at least 5 groups, but there are only 2 distinct "
                                            r"values of 'meta.task'; use --folds 2 or less"):
        split_folds(["a", "b", "a"], [True, False, False], 5, key="meta.task")
    with pytest.raises(ForewarnError, match="--folds must be at least 2"):
        split_folds(["a", "b"], [True, False], 1)
    # one group: no --folds value helps, and the message does not suggest one
    with pytest.raises(ForewarnError, match=r"cross-validation needs at least 2 groups, but there is only 1 of "
                                            r"distinct run ids among 3 runs \(runs sharing an id count as one"):
        split_folds(["line-1"] * 3, [True, False, False], 2)


def make_run(run_id: str, bits: list[int], meta: dict[str, Any], line: int = 1) -> Run:
    document = toy_run(run_id, bits)
    document["meta"] = meta
    return parse_run(orjson.dumps(document), source="runs.jsonl", line=line)


def test_group_of_reads_dotted_paths() -> None:
    run = make_run("r", [NONE], {"task": "t1", "scene": {"room": 3}})
    assert group_of(run, None) == group_of(run, "id") == "r"
    assert group_of(run, "meta.task") == "t1"
    assert group_of(run, "meta.scene") == '{"room":3}' and group_of(run, "meta.scene.room") == "3"
    with pytest.raises(ForewarnError, match=r"runs.jsonl:1: run 'r' has no 'meta.seed' to group by"):
        group_of(run, "meta.seed")


TASK_RUNS = {
    "t1": [[NONE, A, AB], [NONE, A, NONE], [NONE, B]],
    "t2": [[NONE, B, AB], [NONE, NONE], [NONE, B, NONE]],
    "t3": [[NONE, A, AB], [NONE, B, B, AB], [NONE]],
    "t4": [[NONE, A, NONE], [NONE, B], [NONE, A, AB]],
}


def task_runs() -> list[Run]:
    runs: list[Run] = []
    for task, bit_lists in TASK_RUNS.items():
        for n, bits in enumerate(bit_lists):
            runs.append(make_run(f"{task}-{n}", bits, {"task": task, "success": AB not in bits},
                                 line=len(runs) + 1))
    return runs


def test_evaluate_learns_each_fold_without_its_test_groups(toy_spec: Spec, monkeypatch: pytest.MonkeyPatch) -> None:
    learned_from: list[set[str]] = []
    original = learn_model_from_runs  # what evaluate_module calls (imported there from the pipeline)

    def spy(runs: Iterable[Run], spec: Spec, **options: Any) -> Any:
        seen = list(runs)
        learned_from.append({run.meta["task"] for run in seen})
        return original(seen, spec, **options)

    monkeypatch.setattr(evaluate_module, "learn_model_from_runs", spy)
    runs = task_runs()
    report = evaluate(runs, toy_spec, [0.3, 0.8], folds=3, group_by="meta.task", seed=2)
    assert len(report.folds) == 3 and report.groups == 4
    tested = [set(f.test_groups) for f in report.folds]
    assert set().union(*tested) == set(TASK_RUNS) and sum(map(len, tested)) == 4  # disjoint, all groups
    for fold, trained in zip(report.folds, learned_from):
        assert not trained & set(fold.test_groups)
        assert fold.train_runs + fold.test_runs == len(runs)
        assert {"satisfied", "states_satisfied", "states", "worst"} <= set(fold.pac)
    # pooled: every run replayed exactly once
    assert sorted(r.id for r in report.pooled.replays) == sorted(r.id for r in runs)
    assert report.pooled.runs == 12 and report.pooled.thetas[0].n_unsafe == 5
    assert sum(f.report.thetas[0].n_unsafe for f in report.folds) == 5
    assert set(report.pooled.baselines) == {"empirical_frequency", "one_change_rule"}
    spread = report.over_folds(0.8, "detection_rate")
    assert spread is not None and spread.n <= 3
    document = report.to_dict()
    assert document["folds"] == 3 and document["group_by"] == "meta.task"
    entry = document["thetas"][0]
    assert {"theta", "n_unsafe", "n_safe", "detection_rate", "false_alarm_rate", "mean_advance_steps",
            "mean_advance_seconds", "brier", "over_folds"} <= set(entry)
    assert len(document["fold_details"]) == 3 and document["fold_details"][0]["pac"]["states"] >= 1
