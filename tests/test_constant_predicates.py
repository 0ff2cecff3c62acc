"""A predicate that never holds, or always holds, on the learning runs is a warning naming it: in
``learn``, ``discover`` and ``evaluate`` (on stderr, exit status 0) and in their Python results."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from _support import CLI, WriteRuns
from forewarn.guard.constant_predicates import ConstantPredicate, constant_in_counts
from forewarn.guard.discovery.discover import discover
from forewarn.guard.evaluation.evaluate import evaluate
from forewarn.guard.evaluation.tune import parse_target
from forewarn.guard.learning import count_transitions
from forewarn.guard.pipeline import learn_model
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.spec import parse_spec
from forewarn.guard.traces import read_runs

SPEC = """\
name: constant
predicates:
  went_cup: 'action == "find Cup"'
  ok: 'state.ok'
  hot: 'state.hot'
unsafe: 'hot'
learning:
  alpha: 0.1
"""
NEVER = ("warning: predicate 'went_cup' never holds on the 4 learning runs (0 of 9 steps): it cannot tell "
         'states apart; check it (a text action compares as its text: action == "find Bowl")')
ALWAYS = "warning: predicate 'ok' always holds on the 4 learning runs (9 of 9 steps): it cannot tell states apart; check it"


def step(hot: bool, action: str | None = None, ok: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"state": {"ok": ok, "hot": hot}}
    if action is not None:
        out["action"] = action
    return out


@pytest.fixture
def traces(write_runs: WriteRuns) -> Path:
    """Nine steps read: u1's third step follows its violation (and is not ``ok``), so it is not read."""
    return write_runs([
        {"id": "u1", "steps": [step(False, "open Fridge"), step(True, "find Bowl"), step(False, ok=False)]},
        {"id": "u2", "steps": [step(False, "find Bowl"), step(True)]},
        {"id": "s1", "steps": [step(False), step(False, "find Bowl"), step(False)]},
        {"id": "s2", "steps": [step(False), step(False, "open Fridge")]},
    ])


@pytest.fixture
def spec_path(tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC, encoding="utf-8")
    return path


EXPECTED = [ConstantPredicate("went_cup", "never", 4, 9, reads_action=True), ConstantPredicate("ok", "always", 4, 9)]


def test_the_counts_give_the_constant_predicates(traces: Path) -> None:
    predicates = PredicateSet(parse_spec(SPEC))
    counts = count_transitions(read_runs(traces), predicates)
    assert (counts.runs, counts.steps) == (4, 10)  # the step after u1's violation is read, not counted
    assert constant_in_counts(counts, predicates) == EXPECTED
    assert [f"warning: {c.message()}" for c in EXPECTED] == [NEVER, ALWAYS]


def test_the_message_counts_in_words() -> None:
    assert ConstantPredicate("p", "always", 1, 1).message() == \
        "predicate 'p' always holds on the one learning run (1 of 1 step): it cannot tell states apart; check it"
    assert "(0 of 23,456 steps)" in ConstantPredicate("p", "never", 1081, 23456).message()


def test_learning_records_them_in_the_model(traces: Path, tmp_path: Path) -> None:
    model = learn_model([traces], parse_spec(SPEC))
    assert model.provenance["constant_predicates"] == [c.to_dict() for c in EXPECTED]
    assert [ConstantPredicate.from_dict(c) for c in model.provenance["constant_predicates"]] == EXPECTED
    varied = learn_model([traces], parse_spec(SPEC.replace('"find Cup"', '"find Bowl"').replace(
        "state.ok'", "state.ok && !state.hot'")))
    assert "constant_predicates" not in varied.provenance  # every predicate tells steps apart: nothing to say


def test_evaluation_reports_them(traces: Path) -> None:
    report = evaluate(list(read_runs(traces)), parse_spec(SPEC), [0.5], folds=2)
    assert report.constant_predicates == EXPECTED
    assert [c["message"] for c in report.to_dict()["constant_predicates"]] == [NEVER[9:], ALWAYS[9:]]


def test_learn_warns_once_per_predicate(forewarn_here: CLI, traces: Path, spec_path: Path, tmp_path: Path) -> None:
    result = forewarn_here("learn", traces, "--spec", spec_path, "-o", tmp_path / "model.json")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines.count(NEVER) == 1 and lines.count(ALWAYS) == 1
    assert "hot" not in "".join(line for line in lines if "cannot tell states apart" in line)


def test_evaluate_warns_once_per_predicate(forewarn_here: CLI, traces: Path, spec_path: Path) -> None:
    result = forewarn_here("evaluate", traces, "--spec", spec_path, "--folds", "2", "--format", "json")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines.count(NEVER) == 1 and lines.count(ALWAYS) == 1
    assert [c["name"] for c in result.json()["constant_predicates"]] == ["went_cup", "ok"]


def test_discover_warns_once_per_predicate(forewarn_here: CLI, traces: Path, spec_path: Path, tmp_path: Path) -> None:
    result = forewarn_here("discover", traces, "--spec", spec_path, "-o", tmp_path / "found.yaml", "--folds", "2",
                           "--time-limit", "20")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines.count(NEVER) == 1 and lines.count(ALWAYS) == 1


def test_discovery_reports_them(traces: Path) -> None:
    spec = parse_spec(SPEC)
    report = discover(list(read_runs(traces)), spec, target=parse_target("false-alarms=0.5"), folds=2,
                      time_limit=20, confirm=False)
    assert report.constant_predicates == EXPECTED
