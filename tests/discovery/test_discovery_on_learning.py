"""Discovery on every learning (issue 39): ``discover: auto``, ``--discover``, nested in the folds, what it does
with runs it cannot learn from, and ``forewarn init``."""
from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_discover import SPEC, as_runs, synthetic_runs, write_jsonl

from _support import CLI
from forewarn.errors import SpecError
from forewarn.guard.discovery.adapt import plan_folds
from forewarn.guard.discovery.auto import discover_for_learning, fold_discovery
from forewarn.guard.discovery.discover import discover
from forewarn.guard.evaluation.evaluate import evaluate
from forewarn.guard.evaluation.tune import parse_target
from forewarn.guard.model import GuardModel
from forewarn.guard.spec import Spec, load_spec, parse_spec
from forewarn.guard.storm import Method
from forewarn.guard.traces import Run

TARGET = parse_target("false-alarms=0.1")


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return path


# -- runs discovery cannot learn from: the spec back, with one line ------------------------------------

def test_the_rules_in_order() -> None:
    assert plan_folds([], [], 5, None).folds is None
    assert "all 4 runs are safe" in (plan_folds([False] * 4, list("abcd"), 5, None).note or "")
    one = plan_folds([True, False, False, False, False], list("abcde"), 5, None)
    assert one.folds is None and "only 1 of 5 runs violates" in (one.note or "")
    # two violating runs, but in one group: a whole group at a time, the other folds learn from none
    grouped = plan_folds([True, True, False, False, False], ["t1", "t1", "t2", "t3", "t4"], 5, "meta.task")
    assert grouped.folds is None and "only 1 distinct values of meta.task hold a violating run" in (grouped.note or "")
    fewer = plan_folds([True, True, False, False], ["a", "b", "c", "d"], 5, None)
    assert fewer.folds == 4 and "leave-one-group-out (4 folds)" in (fewer.note or "")
    assert plan_folds([True, True, False, False], ["a", "b", "c", "d"], 3, None) == plan_folds(
        [True, True, False, False], ["a", "b", "c", "d"], 3, None) and plan_folds(
        [True, True, False, False], ["a", "b", "c", "d"], 3, None).note is None


@pytest.mark.parametrize("case", ["safe", "violating", "one violating run", "one group"])
def test_discover_gives_the_spec_back_with_one_note(spec_file: Path, case: str) -> None:
    lines = synthetic_runs(24, 4)
    for k, line in enumerate(lines):
        broken = {"safe": False, "violating": True, "one violating run": k == 0, "one group": k % 2 == 0}[case]
        for step in line["steps"]:
            step["state"]["broken"] = broken
        if case == "one group":
            line["meta"]["task"] = "t0" if broken else f"t{k}"
    spec = load_spec(spec_file)
    report = discover(as_runs(lines), spec, target=TARGET, group_by="meta.task")
    assert not report.changed and report.text == spec.text and len(report.notes) == 1
    assert report.notes[0].endswith("the spec is unchanged")
    learned = discover_for_learning(as_runs(lines), spec, group_by="meta.task")
    assert learned.spec is spec and learned.line().endswith("the spec is unchanged")


def test_no_runs_is_a_note_too(spec_file: Path) -> None:
    report = discover([], load_spec(spec_file), target=TARGET)
    assert not report.changed and report.notes == ["no runs to discover predicates from: the spec is unchanged"]


def test_discover_on_the_command_line_with_few_groups_exits_0(tmp_path: Path, spec_file: Path,
                                                             forewarn_here: CLI) -> None:
    lines = synthetic_runs(120, 7)
    for k, line in enumerate(lines):
        line["meta"]["drive"] = f"d{k % 4}"
    traces = write_jsonl(tmp_path / "runs.jsonl", lines)
    result = forewarn_here("discover", traces, "--spec", spec_file, "-o", tmp_path / "out.yaml", "--group-by",
                           "meta.drive", "--folds", "5", "--no-confirm", "--format", "json")
    assert result.returncode == 0, result.stderr
    report = result.json()
    assert isinstance(report, dict) and report["folds"] == 4
    assert "4 distinct values of meta.drive for 5 folds: discovery scored leave-one-group-out (4 folds)" \
        in report["notes"]


# -- nested in the folds: no figure sees its own test runs --------------------------------------------

def planted_runs(seed: int) -> list[dict[str, Any]]:
    """Runs in five batches of eight tasks. In batch b0 alone a field tells the outcome from the first step
    (``state.tell == "yes"`` on the runs that break something, at random there); elsewhere nothing does."""
    rng = random.Random(seed)
    runs = []
    for k in range(250):
        batch = k % 5
        broken_at = rng.randrange(2, 8) if rng.random() < 0.4 else None
        steps = []
        for i in range(8):
            state = {"broken": broken_at is not None and i >= broken_at, "noise": rng.choice("xyz"),
                     "tell": ("yes" if broken_at is not None else "no") if batch == 0 else "no"}
            steps.append({"state": state, "action": rng.choice(["look", "walk"])})
            if state["broken"]:
                break
        runs.append({"id": f"r{k}", "steps": steps, "meta": {"batch": f"b{batch}", "task": f"b{batch}t{k % 40}"}})
    return runs


def test_nested_discovery_never_reads_a_test_fold(spec_file: Path) -> None:
    runs = as_runs(planted_runs(3))
    spec = load_spec(spec_file)
    nested = fold_discovery(spec, group_by="meta.task")
    seen: dict[int, tuple[set[str], Spec]] = {}

    def fold_spec(train: list[Run], fold: int) -> Spec:
        learned = nested(train, fold)
        seen[fold] = ({r.id for r in train}, learned)
        return learned

    report = evaluate(runs, spec, [0.5], folds=5, group_by="meta.batch", method=Method.TOPOLOGICAL,
                      fold_spec=fold_spec)
    assert sorted(seen) == [1, 2, 3, 4, 5] and len(nested.lines) == 5
    planted_fold = None
    for fold in report.folds:
        train_ids, learned = seen[fold.index]
        test_ids = {r.id for r in fold.report.replays}
        assert not train_ids & test_ids  # discovery was given the fold's training runs only
        assert len(train_ids) == fold.train_runs
        reads = " ".join(d.cel or "" for d in learned.predicates.values())
        if fold.test_groups == ["b0"]:
            planted_fold = fold.index
            assert "state.tell" not in reads, reads  # only its own test runs could have shown it
        else:
            assert "state.tell" in reads, (fold.index, nested.lines)  # the plant is there to be found
    assert planted_fold is not None


def test_evaluate_discover_on_the_command_line_says_what_each_fold_found(tmp_path: Path, spec_file: Path,
                                                                         forewarn_here: CLI) -> None:
    traces = write_jsonl(tmp_path / "runs.jsonl", planted_runs(4))
    result = forewarn_here("evaluate", traces, "-s", spec_file, "--group-by", "meta.batch", "--discover",
                           "--method", "topological", "--format", "json")
    assert result.returncode == 0, result.stderr
    report = result.json()
    assert isinstance(report, dict)
    lines = [n for n in report["notes"] if n.startswith("fold ")]
    assert len(lines) == 5 and all("discovery over 200 runs" in line for line in lines), lines
    # the batches are five groups: each fold's discovery scores leave-one-group-out over its four (a plant in
    # one batch cannot be held out within the others, so none may be written)
    assert all("4-fold: added" in line or line.endswith("the spec is unchanged") for line in lines), lines
    assert not any("tell" in line for line in lines), lines


# -- learn ------------------------------------------------------------------------------------------

def test_learn_discovers_when_the_spec_or_the_flag_asks(tmp_path: Path, spec_file: Path, forewarn_here: CLI) -> None:
    traces = write_jsonl(tmp_path / "runs.jsonl", synthetic_runs(240, 2))
    auto = tmp_path / "auto.yaml"
    auto.write_text(SPEC + "discover: auto\n")
    for spec, flags, discovered in ((auto, (), True), (spec_file, ("--discover",), True),
                                    (auto, ("--no-discover",), False), (spec_file, (), False)):
        model = tmp_path / "model.json"
        result = forewarn_here("learn", traces, "-s", spec, "-o", model, "--method", "topological", *flags)
        assert result.returncode == 0, result.stderr
        learned = GuardModel.load(model)
        assert (len(learned.spec.predicates) > 1) is discovered, (flags, learned.spec.predicates)
        assert ("discovery over 240 runs (" in result.stderr) is discovered
        if discovered:
            assert "state.hidden.mode" in " ".join(d.cel or "" for d in learned.spec.predicates.values())
            assert str(learned.provenance["discovery"]).startswith("discovery over 240 runs (")
        else:
            assert "discovery" not in learned.provenance


def test_learn_on_one_sided_runs_learns_the_spec_as_written(tmp_path: Path, spec_file: Path,
                                                           forewarn_here: CLI) -> None:
    lines = synthetic_runs(30, 5)
    for line in lines:
        for step in line["steps"]:
            step["state"]["broken"] = False
    traces = write_jsonl(tmp_path / "runs.jsonl", lines)
    result = forewarn_here("learn", traces, "-s", spec_file, "-o", tmp_path / "m.json", "--discover",
                           "--method", "topological")
    assert result.returncode == 0, result.stderr
    assert "discovery over 30 runs (0 violate): all 30 runs are safe" in result.stderr
    assert list(GuardModel.load(tmp_path / "m.json").spec.predicates) == ["broken"]


@pytest.mark.parametrize("value", ["on", "yes", "2", "Auto", "[auto]"])
def test_a_bad_discover_value_names_the_line(value: str) -> None:
    with pytest.raises(SpecError, match=r"spec.yaml:4: discover: expected 'auto' .* or 'off', got "):
        parse_spec("predicates:\n  a: 'state.x'\nunsafe: a\n" + f"discover: {value}\n", source="spec.yaml")
    assert parse_spec("predicates:\n  a: 'state.x'\nunsafe: a\ndiscover: off\n").discover == "off"
    assert "discover" not in parse_spec("predicates:\n  a: 'state.x'\nunsafe: a\n").to_document()


# -- init -------------------------------------------------------------------------------------------

def household_record(k: int, rng: random.Random) -> dict[str, Any]:
    """An AgentSpec-format record of the pot task: the agent finds the pot and, in some runs, dirties it;
    it looks around the sink first more often in the runs that go on to dirty it."""
    def step(action: str) -> dict[str, Any]:
        return {"action": {"tool": "robotic controller", "input": action},
                "observation": {"action": action, "success": True, "message": "", "errorMessage": ""}}

    dirties = k % 2 == 0
    steps = [step("find Pot")]
    if rng.random() < (0.9 if dirties else 0.1):
        steps.append(step("find Sink"))
    steps.append(step("find Pot"))
    if dirties:
        steps.append(step("dirty Pot"))
    return {"input": {"step": ["find Pot", "dirty Pot"], "instruction": "Dirty the pot.",
                      "objects": ["Pot"], "risk_category": "Slip Hazard", "scene_name": "FloorPlan1",
                      "final_state": [{"objectType": "Pot", "isDirty": True}]},
            "intermediate_steps": steps, "output": "done"}


def test_init_on_agentspec_records_writes_a_spec_learn_accepts(tmp_path: Path, forewarn_here: CLI) -> None:
    rng = random.Random(0)
    records = tmp_path / "records.jsonl"
    records.write_bytes(b"".join(orjson.dumps(household_record(k, rng)) + b"\n" for k in range(60)))
    spec = tmp_path / "pot.yaml"
    result = forewarn_here("init", records, "--input-format", "agentspec", "--unsafe", "state.objects.Pot.isDirty",
                           "-o", spec)
    assert result.returncode == 0, result.stderr
    assert "discovery over 60 runs (30 violate)" in result.stderr and f"wrote {spec}" in result.stderr
    written = load_spec(spec)
    assert written.name == "pot" and written.unsafe == "violation"
    assert written.predicates["violation"].cel == "state.objects.Pot.isDirty"
    model = tmp_path / "model.json"
    learned = forewarn_here("learn", records, "--input-format", "agentspec", "-s", spec, "-o", model,
                            "--method", "topological")
    assert learned.returncode == 0, learned.stderr
    assert GuardModel.load(model).spec.predicates.keys() == written.predicates.keys()


def test_init_with_one_sided_runs_writes_the_starting_spec(tmp_path: Path, forewarn_here: CLI) -> None:
    traces = write_jsonl(tmp_path / "runs.jsonl", synthetic_runs(20, 6))
    out = tmp_path / "start.yaml"
    result = forewarn_here("init", traces, "--unsafe", "state.step > 100", "-o", out, "--name", "mine")
    assert result.returncode == 0, result.stderr
    assert "all 20 runs are safe" in result.stderr
    written = load_spec(out)
    assert written.name == "mine" and list(written.predicates) == ["violation"] and written.unsafe == "violation"


def test_init_bad_input_is_one_line(tmp_path: Path, forewarn_here: CLI) -> None:
    traces = write_jsonl(tmp_path / "runs.jsonl", synthetic_runs(10, 6))
    for args in (("--unsafe", "state.broken &&"), ("--unsafe", " "), ("--unsafe", "state.broken", "--folds", "1")):
        result = forewarn_here("init", traces, *args, "-o", tmp_path / "out.yaml")
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
        assert not (tmp_path / "out.yaml").exists()


# -- progress off a terminal -------------------------------------------------------------------------

def test_nested_discovery_prints_progress_off_a_terminal(tmp_path: Path, spec_file: Path, forewarn_here: CLI,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOREWARN_PROGRESS_SECONDS", "0.02")
    traces = write_jsonl(tmp_path / "runs.jsonl", synthetic_runs(160, 2))
    learned = forewarn_here("learn", traces, "-s", spec_file, "-o", tmp_path / "m.json", "--discover",
                            "--group-by", "meta.task", "--method", "topological", "--format", "json")
    assert learned.returncode == 0, learned.stderr
    assert isinstance(learned.json(), dict)  # stdout stays clean
    assert re.search(r"^discovering: confirming with the real learner .+ elapsed", learned.stderr, re.M), \
        learned.stderr
    evaluated = forewarn_here("evaluate", traces, "-s", spec_file, "--discover", "--group-by", "meta.task",
                              "--folds", "3", "--method", "topological", "--format", "json")
    assert evaluated.returncode == 0, evaluated.stderr
    assert re.search(r"^cross-validation: fold \d: discovering: .+ elapsed", evaluated.stderr, re.M), \
        evaluated.stderr


def test_tune_discover_says_what_each_fold_found(tmp_path: Path, spec_file: Path, forewarn_here: CLI) -> None:
    traces = write_jsonl(tmp_path / "runs.jsonl", synthetic_runs(150, 8))
    result = forewarn_here("tune", traces, "-s", spec_file, "--target", "false-alarms=0.2", "--discover",
                           "--group-by", "meta.task", "--folds", "3", "--method", "topological",
                           "--enforcement", "observe", "--format", "json")
    assert result.returncode == 0, result.stderr
    report = result.json()
    assert isinstance(report, dict)
    lines = [n for n in report["notes"] if n.startswith("fold ")]
    assert len(lines) == 3, report["notes"]
    assert all(re.match(r"fold \d: discovery over \d+ runs \(\d+ violate\)", line) for line in lines), lines
    assert any("state.hidden.mode" in line or "hidden_mode" in line for line in lines), lines
    assert any(n.startswith("each fold's model was learned with what discovery found") for n in report["notes"])
