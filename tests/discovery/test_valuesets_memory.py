"""Value-set candidates (held out honestly) and action memory proposed by ``discover``."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from _support import CLI
from forewarn.guard.discovery.discover import discover
from forewarn.guard.discovery.valuesets import ValueSets
from forewarn.guard.discovery.write import insert_action_memory, memory_slot
from forewarn.guard.evaluation.tune import parse_target
from forewarn.guard.pipeline import learn_model
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import load_spec, parse_spec
from forewarn.guard.traces import Run

SPEC = """\
name: synthetic
predicates:
  broken: 'state.broken'
unsafe: 'broken'
guard:
  unseen_state: allow
"""
RISKY = ["smash", "crush", "shatter", "tear"]
HARMLESS = ["tidy", "wipe", "fold", "stack", "sort", "open"]


def test_value_set_final_and_held_out_membership() -> None:
    # steps 0-3 in fold 0, 4-7 in fold 1; value 0 ("a") on steps 0 and 4 (both violating, groups 0 and 2),
    # value 1 ("b") on step 1 only (one group), value 2 ("c") on safe steps
    y = np.array([1, 1, 0, 0, 1, 0, 0, 0], dtype=np.float64)
    sets = ValueSets(np.arange(8, dtype=np.int64), y, np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=np.int64),
                     np.array([0, 0, 1, 1, 2, 2, 3, 3], dtype=np.int64))
    rows = np.array([0, 4, 1, 2, 3, 5, 6], dtype=np.int64)
    codes = np.array([0, 0, 1, 2, 2, 2, 2], dtype=np.int64)
    chosen = sets.sets(rows, codes, ["a", "b", "c"], 2.0, 1)
    assert chosen is not None
    members, held = chosen
    # overall rate 3/8; "a": (2 + 3/8) / 3 = 19/24 >= 2 * 3/8; "b" is seen in one group only
    assert members == ["a"]
    # without fold 0, "a" is seen once, in one group: each fold's steps are scored with an empty set
    assert [h.tolist() for h in held] == [[False] * 8, [False] * 8]


def _word_runs(seed: int) -> list[Run]:
    """Tasks named by a verb and an object; tasks of a risky verb (any of four) often break something."""
    rng = random.Random(seed)
    runs = []
    objects = ["cup", "vase", "book", "lamp", "plate", "box", "phone", "towel"]
    for t in range(120):
        verb = rng.choice(RISKY + HARMLESS)
        words = sorted({verb, rng.choice(objects), rng.choice(["the", "a"])})
        for r in range(2):
            steps: list[dict[str, Any]] = []
            for i in range(6):
                broken = i == 4 and rng.random() < (0.7 if verb in RISKY else 0.03)
                steps.append({"state": {"broken": broken, "step": i}, "action": rng.choice(["look", "walk"])})
                if broken:
                    break
            runs.append(Run(id=f"t{t}-{r}", steps=steps, meta={"task": f"t{t}", "words": words}))
    return runs


def test_discover_pools_a_family_of_words_into_one_set() -> None:
    report = discover(_word_runs(3), parse_spec(SPEC), target=parse_target("false-alarms=0.2"), folds=4,
                      group_by="meta.task", confirm=False, max_predicates=2, action_memory=False)
    sets = [s.cel for s in report.added if ".exists(v, v in [" in s.cel]
    assert sets, [s.cel for s in report.added]
    assert all(f'"{w}"' in sets[0] for w in RISKY)
    assert not any(f'"{w}"' in sets[0] for w in HARMLESS)
    assert not any("meta.task" in s.cel for s in report.added)  # the grouping field is never proposed
    learned = parse_spec(report.text)
    assert len(learned.predicates) == 1 + len(report.added)


def _action_runs(seed: int) -> list[Run]:
    """``pick knife`` two steps before the break: only a state that remembers two actions sees it."""
    rng = random.Random(seed)
    runs = []
    for k in range(400):
        knife = rng.random() < 0.4
        steps: list[dict[str, Any]] = []
        for i in range(7):
            action = "pick knife" if (i == 2 and knife) else ("pick spoon" if i == 2 else rng.choice(["look", "wait"]))
            if i == 3:
                action = "walk on"
            broken = i == 4 and rng.random() < (0.8 if knife else 0.05)
            steps.append({"state": {"broken": broken, "noise": rng.random() < 0.5}, "action": action})
            if broken:
                break
        runs.append(Run(id=f"r{k}", steps=steps, meta={"task": f"t{k % 40}"}))
    return runs


def test_discover_proposes_action_memory_and_writes_it() -> None:
    runs = _action_runs(5)
    target = parse_target("false-alarms=0.2")
    # predicates may not read the action: what the state cannot see, only action memory can
    report = discover(runs, parse_spec(SPEC), target=target, folds=4, group_by="meta.task", confirm=False,
                      exclude=("action",))
    assert report.memory is not None and report.memory.actions >= 1
    assert report.memory.after.brier < report.memory.before.brier
    written = parse_spec(report.text)
    assert written.learning.memory.actions == report.memory.actions
    assert written.learning.memory.action_class == report.memory.action_class
    assert {o for o, _ in report.memory_options} >= {"actions: 1, action_class: verb", "actions: 2, action_class: raw"}
    without = discover(runs, parse_spec(SPEC), target=target, folds=4, group_by="meta.task", confirm=False,
                       exclude=("action",), action_memory=False)
    assert without.memory is None and parse_spec(without.text).learning.memory.actions == 0


@pytest.mark.parametrize("text, slot", [
    ("name: a\npredicates:\n  x: state.x\nunsafe: x\n", True),
    ("name: a\npredicates:\n  x: state.x\nunsafe: x\nlearning:\n  alpha: 0.2\n", True),
    ("name: a\npredicates:\n  x: state.x\nunsafe: x\nlearning:\n  memory:\n    dwell: 4\nguard:\n  unseen_state: allow\n",
     True),
    ("name: a\npredicates: {x: state.x}\nunsafe: x\nlearning: {alpha: 1}\n", False),
    ("name: a\npredicates:\n  x: state.x\nunsafe: x\nlearning:\n  memory: off\n", False),
    ("name: a\npredicates:\n  x: state.x\nunsafe: x\nlearning:\n  memory:\n    actions: 0\n", False),
])
def test_action_memory_written_into_the_users_yaml(text: str, slot: bool) -> None:
    assert memory_slot(text) is slot
    if slot:
        before = parse_spec(text)
        after = parse_spec(insert_action_memory(text, 2, "verb", "discovered: a test"))
        assert (after.learning.memory.actions, after.learning.memory.action_class) == (2, "verb")
        assert after.learning.memory.dwell == before.learning.memory.dwell
        assert after.learning.alpha == before.learning.alpha
        assert after.guard == before.guard


def test_cli_writes_action_memory_the_learner_uses(tmp_path: Path, forewarn_here: CLI) -> None:
    runs = _action_runs(6)
    traces = tmp_path / "runs.jsonl"
    traces.write_bytes(b"".join(orjson.dumps({"id": r.id, "steps": r.steps, "meta": r.meta}) + b"\n" for r in runs))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "found.yaml"
    result = forewarn_here("discover", traces, "--spec", spec, "-o", out, "--group-by", "meta.task",
                           "--exclude", "action", "--format", "json")
    assert result.returncode == 0, result.stderr
    figures = result.json()
    assert isinstance(figures, dict)
    memory = figures["action_memory"]
    assert isinstance(memory, dict) and memory["actions"] in (1, 2)
    found = load_spec(out)
    assert found.learning.memory.actions == memory["actions"]
    # the chain remembers the knife two steps back: after "walk on", the knife run is the risky one
    session_knife, session_spoon = (Guard(learn_model([traces], found)).session() for _ in range(2))
    for session, picked in ((session_knife, "pick knife"), (session_spoon, "pick spoon")):
        for action in ("look", "wait", picked):
            session.observe({"broken": False, "noise": False}, action=action)
    knife = session_knife.observe({"broken": False, "noise": False}, action="walk on").p_unsafe
    spoon = session_spoon.observe({"broken": False, "noise": False}, action="walk on").p_unsafe
    assert knife is not None and spoon is not None and knife > 2 * spoon
    off = forewarn_here("discover", traces, "--spec", spec, "-o", tmp_path / "off.yaml", "--group-by", "meta.task",
                        "--exclude", "action", "--no-action-memory", "--no-confirm")
    assert off.returncode == 0, off.stderr
    assert (tmp_path / "off.yaml").read_text() == SPEC
