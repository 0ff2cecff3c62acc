"""A bare ``action`` in a predicate is the action's text (``action.name``): ``action == "find Bowl"``
holds on a step that logged ``"find Bowl"``, in every comparison form, through learning and replay;
a tool call compares as its tool name; the parsed fields stay as they are."""
from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from _support import WriteRuns, eq1_row, reach_probabilities
from forewarn.errors import PredicateError
from forewarn.guard._cel_fields import text_actions
from forewarn.guard.learning import END
from forewarn.guard.pipeline import learn_model
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.replay import replay, replay_run
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import parse_spec
from forewarn.guard.traces import read_runs

FORMS_SPEC = """\
name: forms
predicates:
  went: 'action == "find Bowl"'
  flipped: '"find Bowl" == action'
  other: 'action != "find Bowl"'
  among: 'action in ["find Bowl", "open Fridge"]'
  finds: 'action.startsWith("find")'
  short: 'size(action) < 8'
  mailed: 'action == "send_email"'
  verb: 'action.verb == "find"'
  indexed: 'action["tool"] == "send_email"'
  bound: '["find Bowl"].exists(action, action == "find Bowl")'
  field: 'state.action == "find Bowl"'
unsafe: 'went && mailed'
"""

CALL = {"tool": "send_email", "args": {"to": "bob@corp.example"}}


def holding(predicates: PredicateSet, state: dict[str, Any], action: Any) -> set[str]:
    bits = predicates.evaluate(state, None, action)
    return {name for i, name in enumerate(predicates.names) if bits >> i & 1}


@pytest.mark.parametrize("repeat", [1, 2])  # the second evaluation is answered by the memo
def test_every_form_compares_the_text(repeat: int) -> None:
    predicates = PredicateSet(parse_spec(FORMS_SPEC))
    state = {"action": "find Bowl"}
    for _ in range(repeat):
        seen = {repr(a): holding(predicates, state, a) for a in ("find Bowl", "open Fridge", CALL, None)}
    always = {"bound", "field"}  # the macro's own `action`, and the state's field: not the step's action
    assert seen[repr("find Bowl")] == always | {"went", "flipped", "among", "finds", "verb"}
    assert seen[repr("open Fridge")] == always | {"other", "among"}
    assert seen[repr(CALL)] == always | {"other", "mailed", "indexed"}
    assert seen[repr(None)] == always | {"other", "short"}  # no action: the empty text


def test_text_is_the_words_as_action_name_gives_them() -> None:
    predicates = PredicateSet(parse_spec(FORMS_SPEC))
    for logged in ("  find   Bowl ", {"action": "find Bowl"}, {"text": "find Bowl"}):
        assert {"went", "flipped", "finds"} <= holding(predicates, {"action": ""}, logged)


def test_the_rewrite_touches_only_bare_roots() -> None:
    assert text_actions('action == "x" && action.verb == "y"') == 'action.name == "x" && action.verb == "y"'
    assert text_actions("action.startsWith('a') // action") == "action.name.startsWith('a') // action"
    for unchanged in ('action.tool == "x"', 'actions == 1', 'state.action == "x"', 'state. action == "x"',
                      'action["verb"] == "x"', '"action" == state.x', 'l.exists(action, action == "x")',
                      'l.all(i, action, action == "x")', 'has(action.verb)'):
        assert text_actions(unchanged) == unchanged

    # what runs is rewritten; an error quotes the predicate as the spec wrote it
    spec = parse_spec("name: e\npredicates:\n  bad: 'action + 1 == 2'\nunsafe: bad\n")
    with pytest.raises(PredicateError, match=r"'bad' \(action \+ 1 == 2\) cannot be evaluated"):
        PredicateSet(spec).evaluate({}, None, "find Bowl")


# -- through learning and replay -------------------------------------------------------

BOWL_SPEC = """\
name: bowl
predicates:
  went_bowl: 'action == "find Bowl"'
  hot: 'state.hot'
unsafe: 'went_bowl && hot'
learning:
  alpha: 0.1
  shrink: off  # the chain's own values, which the tests compute exactly
"""
WENT, HOT = 1, 2  # bits


def step(hot: bool, action: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"state": {"hot": hot}}
    if action is not None:
        out["action"] = action
    return out


@pytest.fixture
def bowl_traces(write_runs: WriteRuns) -> Path:
    return write_runs([
        {"id": "r1", "steps": [step(False, "open Fridge"), step(False, "find Bowl"), step(True, "find Bowl")]},
        {"id": "r2", "steps": [step(False, "open Fridge"), step(True, "open Fridge"), step(False, "find Bowl")]},
        {"id": "r3", "steps": [step(False), step(False, "find  Bowl")]},
    ])


def exact_rows() -> dict[int, dict[int, Fraction]]:
    """Eq. 1 by hand: r1 is 0 → WENT → WENT|HOT (unsafe, stop), r2 0 → HOT → WENT → end, r3 0 → WENT → end."""
    alpha = Fraction(1, 10)
    valid = [0, WENT, HOT, WENT | HOT, END]
    counts = {0: {WENT: 2, HOT: 1}, WENT: {WENT | HOT: 1, END: 2}, HOT: {WENT: 1}}
    rows = {src: eq1_row(row, valid, alpha) for src, row in counts.items()}
    rows[WENT | HOT] = {WENT | HOT: Fraction(1)}
    rows[END] = {END: Fraction(1)}
    return rows


def test_learning_counts_the_text_action(bowl_traces: Path) -> None:
    model = learn_model([bowl_traces], parse_spec(BOWL_SPEC))
    dtmc = model.dtmc
    assert sorted(dtmc.states) == sorted([0, WENT, HOT, WENT | HOT, END])
    rows = exact_rows()
    for i, src in enumerate(dtmc.states):
        assert {dtmc.states[j]: p for j, p in dtmc.exact_row(i)} == rows[src], src
    assert rows[0][WENT] == Fraction(21, 35)  # (2 + 1/10) / (3 + 5/10), written out once
    assert (model.provenance["runs"], model.provenance["unsafe_runs"]) == (3, 1)
    risk = reach_probabilities(rows, {WENT | HOT})
    values = model.outcome.values
    for i, src in enumerate(dtmc.states):
        assert math.isclose(values[i], risk[src], rel_tol=1e-6, abs_tol=1e-9), src


def test_replay_sees_the_text_action(bowl_traces: Path) -> None:
    model = learn_model([bowl_traces], parse_spec(BOWL_SPEC))
    risk = reach_probabilities(exact_rows(), {WENT | HOT})
    runs = list(read_runs(bowl_traces))
    r1 = replay_run(Guard(model), runs[0])
    assert r1.unsafe and r1.violation == 2
    for got, want in zip(r1.p_unsafe, [risk[0], risk[WENT], risk[WENT | HOT]]):
        assert got is not None and math.isclose(got, want, rel_tol=1e-6)
    report = replay(Guard(model), iter(runs), [0.5], enforcement="observe")
    assert [(t.n_unsafe, t.n_safe) for t in report.thetas] == [(1, 2)]

