"""Predicates that read the run's metadata (``meta``) beside the step's ``state``."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import cel
import pytest
from hypothesis import given, settings
from test_predicates import RICH_PREDICATES, STATES, spec_text

from _support import CLI, WriteRuns
from forewarn.errors import PredicateError, TraceError
from forewarn.guard.pipeline import learn_model
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.replay import replay_run
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import Action, parse_spec
from forewarn.guard.traces import Run

# A multi-task agent: the same concrete step is dangerous in one task and harmless in another.
META_SPEC = """\
name: kitchen
predicates:
  stove_task: 'meta.task_hazard == "stove"'
  burner_on: 'state.burner.on'
  left: 'state.left'
unsafe: 'stove_task && burner_on && left'
learning: {alpha: 0.1}
guard:
  thresholds: {reflect: 0.9, ask_human: 0.5, stop: 0.2}
  unseen_state: ask_human
"""


def kitchen_run(run_id: str, hazard: str | None, steps: list[tuple[bool, bool]]) -> dict[str, Any]:
    meta = {} if hazard is None else {"task_hazard": hazard, "task": f"t-{hazard}"}
    return {"id": run_id, "meta": meta,
            "steps": [{"state": {"burner": {"on": on}, "left": left}} for on, left in steps]}


RISKY = [(False, False), (True, False), (True, True)]  # burner on, then the agent leaves
CAREFUL = [(False, False), (True, False), (False, False)]


def kitchen_runs() -> list[dict[str, Any]]:
    return ([kitchen_run(f"s{i}", "stove", RISKY if i < 6 else CAREFUL) for i in range(10)]
            + [kitchen_run(f"k{i}", "knife", RISKY) for i in range(10)])


@pytest.fixture
def kitchen(write_runs: WriteRuns, tmp_path: Path) -> tuple[Path, Path]:
    spec = tmp_path / "kitchen.yaml"
    spec.write_text(META_SPEC, encoding="utf-8")
    return write_runs(kitchen_runs(), name="kitchen.jsonl"), spec


def test_predicates_read_meta_beside_state_and_the_memo_keeps_them_apart() -> None:
    predicates = PredicateSet(parse_spec(META_SPEC))
    state = {"burner": {"on": True}, "left": True}
    # the same state, over and over, under two metadata: the memo must not answer one for the other
    for _ in range(3):
        assert predicates.evaluate(state, {"task_hazard": "stove"}) == 0b111
        assert predicates.evaluate(state, {"task_hazard": "knife"}) == 0b110
        assert predicates.evaluate(state, {"task_hazard": "stove", "other": [1, 2]}) == 0b111
    assert predicates.is_unsafe(predicates.evaluate(state, {"task_hazard": "stove"}))
    assert not predicates.is_unsafe(predicates.evaluate(state, {"task_hazard": "knife"}))


def test_meta_works_in_has_macros_and_nested_fields() -> None:
    predicates = PredicateSet(parse_spec(
        "predicates:\n"
        "  flagged: 'has(meta.flags) && meta.flags.exists(f, f == \"hot\")'\n"
        "  deep: 'meta.task.kind == state.kind'\n"
        "unsafe: 'flagged && deep'\n"))
    assert predicates.evaluate({"kind": "a"}, {"task": {"kind": "a"}}) == 0b10
    assert predicates.evaluate({"kind": "a"}, {"task": {"kind": "b"}, "flags": ["hot"]}) == 0b01
    assert predicates.evaluate({"kind": "b"}, {"task": {"kind": "b"}, "flags": ["cold"]}) == 0b10


def test_a_missing_meta_field_is_the_same_clear_error_as_a_missing_state_field() -> None:
    predicates = PredicateSet(parse_spec(META_SPEC))
    with pytest.raises(PredicateError, match=r"predicate 'stove_task' .* reads field 'task_hazard', "
                                             r"which the run's meta lacks") as caught:
        predicates.evaluate({"burner": {"on": True}, "left": False}, {"task": "t1"})
    assert caught.value.where == "meta"
    with pytest.raises(PredicateError, match="which the run's meta lacks"):
        predicates.evaluate({"burner": {"on": True}, "left": False})  # no metadata at all
    with pytest.raises(PredicateError, match=r"reads field 'on', which the state lacks") as caught:
        predicates.evaluate({"burner": {}, "left": False}, {"task_hazard": "stove"})
    assert caught.value.where == "state"


def test_learning_counts_each_run_under_its_own_meta(kitchen: tuple[Path, Path]) -> None:
    traces, spec_path = kitchen
    from forewarn.guard.spec import load_spec

    model = learn_model([traces], load_spec(spec_path))
    # only the six risky stove runs violate: the knife runs do the same steps harmlessly
    assert model.provenance["unsafe_runs"] == 6
    assert model.provenance["runs"] == 20
    d = model.dtmc
    unsafe_bits = [bits for i, bits in enumerate(d.states[:-1]) if d.unsafe[i]]
    assert unsafe_bits == [0b111]


def test_replay_and_the_guard_pass_each_runs_meta(kitchen: tuple[Path, Path]) -> None:
    traces, spec_path = kitchen
    from forewarn.guard.spec import load_spec

    guard = Guard(learn_model([traces], load_spec(spec_path)))
    risky_stove = Run("x", [{"state": {"burner": {"on": on}, "left": left}} for on, left in RISKY],
                      meta={"task_hazard": "stove"})
    risky_knife = Run("y", risky_stove.steps, meta={"task_hazard": "knife"})
    assert replay_run(guard, risky_stove).violation == 2
    assert replay_run(guard, risky_knife).violation is None
    # the Python guard: metadata given when the session opens (the old signatures still work)
    stove = guard.session(metadata={"task_hazard": "stove"})
    knife = guard.session(None, metadata={"task_hazard": "knife"})
    burner_on = {"burner": {"on": True}, "left": False}
    d_stove = stove.observe(burner_on)
    d_knife = knife.observe(burner_on)
    assert d_stove.p_unsafe is not None and d_knife.p_unsafe is not None
    assert d_stove.p_unsafe > 0.5 > d_knife.p_unsafe
    assert stove.preview({"burner": {"on": True}, "left": True}).unsafe_now
    assert not knife.preview({"burner": {"on": True}, "left": True}).unsafe_now
    assert guard.decide(burner_on, {"task_hazard": "stove"}) == guard.session(
        metadata={"task_hazard": "stove"}).observe(burner_on)
    with pytest.raises(PredicateError, match="run's meta lacks"):
        guard.session().observe(burner_on)
    assert guard.session(metadata={"task_hazard": "stove"}).observe(burner_on).action is not Action.ALLOW


def test_learn_names_the_run_whose_meta_lacks_a_field(kitchen: tuple[Path, Path], write_runs: WriteRuns,
                                                       forewarn_here: CLI, tmp_path: Path) -> None:
    _, spec_path = kitchen
    traces = write_runs(kitchen_runs()[:3] + [kitchen_run("bare", None, RISKY)], name="bare.jsonl")
    result = forewarn_here("learn", traces, "--spec", spec_path, "-o", tmp_path / "m.json")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{traces}:4: meta (run 'bare'): predicate 'stove_task'" in lines[0]
    assert "which the run's meta lacks" in lines[0]
    assert not (tmp_path / "m.json").exists()


def test_trace_error_for_meta_names_meta_not_a_step(kitchen: tuple[Path, Path]) -> None:
    from forewarn.guard.traces import abstract_run

    predicates = PredicateSet(parse_spec(META_SPEC))
    run = Run("r", [{"state": {"burner": {"on": False}, "left": False}}], meta={}, source="f.jsonl", line=7)
    with pytest.raises(TraceError, match=r"^f\.jsonl:7: meta \(run 'r'\): predicate 'stove_task'"):
        abstract_run(run, predicates)


# -- the fast path stays exact with meta: property-based, against plain CEL on the whole context

MIXED_PREDICATES = {
    **{f"m_{name}": expr.replace("state", "meta") for name, expr in RICH_PREDICATES.items()},
    "same_a": 'has(meta.a) && has(state.a) && meta.a == state.a',
    "c_either": '(has(meta.b) && type(meta.b) == map && has(meta.b.c)) || (has(state.b) && type(state.b) == map)',
    "state_flag": 'has(state.a) && type(state.a) == bool && state.a',
}
_MIXED = PredicateSet(parse_spec(spec_text(MIXED_PREDICATES, "state_flag")))
_MIXED_PROGRAMS = [cel.compile(expr) for expr in MIXED_PREDICATES.values()]


def reference(state: dict[str, Any], meta: dict[str, Any]) -> int | None:
    bits = 0
    for index, program in enumerate(_MIXED_PROGRAMS):
        try:
            value = program.execute({"state": state, "meta": meta})
        except Exception:
            return None
        if value.__class__ is not bool:
            return None
        bits |= int(value) << index
    return bits


@settings(max_examples=150, deadline=None)
@given(STATES, STATES)
def test_projection_and_memo_with_meta_agree_with_plain_cel(state: dict[str, Any], meta: dict[str, Any]) -> None:
    expected = reference(state, meta)
    for _ in range(2):  # the second call is answered from the memo, shared across examples
        if expected is None:
            with pytest.raises(PredicateError):
                _MIXED.evaluate(state, meta)
        else:
            assert _MIXED.evaluate(state, meta) == expected
    # the same state under another metadata is not answered for the first one
    swapped = reference(meta, state)
    if swapped is not None:
        assert _MIXED.evaluate(meta, state) == swapped
