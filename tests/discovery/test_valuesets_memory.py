"""Value-set candidates (held out honestly) and action memory proposed by ``discover``."""
from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path
from statistics import NormalDist
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


Z2 = Fraction(NormalDist().inv_cdf(0.95)) ** 2


def _above(k: int, n: int, t: Fraction) -> bool:
    """Whether Wilson's one-sided 95 % lower bound on k/n is at least ``t``, from the interval's definition
    (the shares t with n (k/n - t)² <= z² t (1 - t)), not from the closed form the code uses."""
    share = Fraction(k, n)
    return share > t and n * (share - t) ** 2 >= Z2 * t * (1 - t)


def test_value_set_counts_groups_not_steps() -> None:
    # 12 groups of two steps; groups 0-4 hold a violating run. Fold 0: groups 0, 1, 5-8; fold 1: 2-4, 9-11.
    # "a" on one step of each violating group; "b" on both steps of group 0 and one of safe group 5 (two of
    # its three steps violate, but one of its two groups); "c" on safe steps only.
    group = np.repeat(np.arange(12, dtype=np.int64), 2)
    y = (group < 5).astype(np.float64)
    fold = np.isin(group, [2, 3, 4, 9, 10, 11]).astype(np.int64)
    sets = ValueSets(np.arange(24, dtype=np.int64), y, fold, group)
    a_rows = [2 * g for g in range(5)]
    rows = np.array(a_rows + [0, 1, 10] + [2 * g + 1 for g in range(5, 12)], dtype=np.int64)
    codes = np.array([0] * 5 + [1] * 3 + [2] * 7, dtype=np.int64)
    base = Fraction(5, 12)
    # the oracle: "a" 5 violating groups of 5, "b" 1 of 2, "c" 0 of 7
    assert _above(5, 5, Fraction(5, 4) * base) and not _above(1, 2, Fraction(5, 4) * base)
    chosen = sets.sets(rows, codes, ["a", "b", "c"], 1.25, 1)
    assert chosen is not None
    members, held = chosen
    assert members == ["a"]
    assert not _above(5, 5, 2 * base) and sets.sets(rows, codes, ["a", "b", "c"], 2.0, 1) is None
    # without fold 0: groups 2-4 and 9-11, base 1/2, "a" 3 of 3 is not above 5/8; without fold 1: groups 0, 1
    # and 5-8, base 1/3, "a" 2 of 2 is above 5/12, so fold 1's steps that carry "a" are members
    assert not _above(3, 3, Fraction(5, 8)) and _above(2, 2, Fraction(5, 12))
    assert held[0].tolist() == [False] * 24
    assert np.flatnonzero(held[1] & (fold == 1)).tolist() == [4, 6, 8]


def test_value_set_needs_two_groups() -> None:
    # "a" on every step of one violating group: a value of one task cannot generalise to another
    group = np.array([0, 0, 1, 1, 2, 2, 3, 3], dtype=np.int64)
    y = np.array([1, 1, 0, 0, 0, 0, 0, 0], dtype=np.float64)
    sets = ValueSets(np.arange(8, dtype=np.int64), y, np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=np.int64), group)
    assert sets.sets(np.array([0, 1], dtype=np.int64), np.array([0, 0], dtype=np.int64), ["a"], 1.25, 1) is None


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
    ("---\nname: a\npredicates:\n  x: state.x\nunsafe: x\n...\n# the end\n", True),  # an explicit document end
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
