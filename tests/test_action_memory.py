"""learning.memory.actions: the last K action classes in the learned state — exact counts, rows and
risks on hand-built runs, the back-off towards the memoryless chain, and a session that advances
the memory on every observed and previewed step as learning counted it."""
from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any

import orjson
import pytest

from _support import reach_probabilities
from forewarn.errors import ModelFileError, SpecError
from forewarn.guard.evaluation.evaluate import evaluate
from forewarn.guard.learning import END, TransitionCounts, count_transitions
from forewarn.guard.memory import Memory, build_memory
from forewarn.guard.model import GuardModel
from forewarn.guard.pipeline import learn_model
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.replay import replay_run
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import parse_spec
from forewarn.guard.traces import parse_document

SPEC = """\
name: household
predicates:
  hot: 'state.hot'
unsafe: 'hot'
learning:
  alpha: 0.0
  shrink: 'off'
  intervals: none
  memory: {actions: 1, backoff: 1.0}
guard: {thresholds: {stop: 0.5}, unseen_state: allow}
"""
COLD, HOT = {"hot": False}, {"hot": True}


def hand_runs() -> list[dict[str, Any]]:
    """Picking the phone announces the hazard 3 times in 4; looking about never does."""
    pick_then_find = {"steps": [{"state": COLD}, {"state": COLD, "action": "pick Phone"},
                                {"state": HOT, "action": "find Bowl"}]}
    pick_then_look = {"steps": [{"state": COLD}, {"state": COLD, "action": "pick Phone"},
                                {"state": COLD, "action": "look"}]}
    look = {"steps": [{"state": COLD}, {"state": COLD, "action": "look"}]}
    runs = [pick_then_find] * 3 + [pick_then_look] + [look] * 4
    return [{"id": f"r{i}", **run} for i, run in enumerate(runs)]


# vocabulary ["", "find Bowl", "look", "pick Phone"] → ids 1..4; one predicate, no dwell: chain = bits | id << 1
C_NONE, H_FIND, C_LOOK, C_PICK = 0 | 1 << 1, 1 | 2 << 1, 0 | 3 << 1, 0 | 4 << 1


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in hand_runs()) + b"\n")
    return path


def counted(spec_text: str = SPEC) -> tuple[Memory, TransitionCounts, Counter[tuple[int, ...]]]:
    spec = parse_spec(spec_text)
    predicates = PredicateSet(spec)
    memory = build_memory(spec.learning.memory, predicates.width)
    assert memory is not None and memory.vocabulary is None
    paths: Counter[tuple[int, ...]] = Counter()
    runs = [parse_document(r) for r in hand_runs()]
    counts = count_transitions(runs, predicates, paths=paths, encode=memory.encode_run)
    compacted, recounted, kept = memory.compact(counts, paths)
    assert kept is not None  # paths were given
    return compacted, recounted, kept


def test_spec_settings() -> None:
    settings = parse_spec(SPEC).learning.memory
    assert (settings.actions, settings.action_class, settings.enabled) == (1, "raw", True)
    assert parse_spec(SPEC.replace("actions: 1", "actions: 2, action_class: verb")).learning.memory.action_class == \
        "verb"
    with pytest.raises(SpecError, match="actions"):
        parse_spec(SPEC.replace("actions: 1", "actions: 9"))
    with pytest.raises(SpecError, match="action_class"):
        parse_spec(SPEC.replace("actions: 1", "actions: 1, action_class: noun"))
    assert not parse_spec(SPEC.replace("memory: {actions: 1, backoff: 1.0}", "memory: off")).learning.memory.enabled


def test_counts_over_action_histories_are_exact() -> None:
    memory, counts, paths = counted()
    assert memory.vocabulary == ("", "find Bowl", "look", "pick Phone") and memory.base == 6
    assert dict(counts.initial) == {C_NONE: 8}
    assert dict(counts.counts) == {(C_NONE, C_PICK): 4, (C_NONE, C_LOOK): 4, (C_PICK, H_FIND): 3,
                                   (C_PICK, C_LOOK): 1, (C_LOOK, END): 5}
    assert counts.unsafe == {H_FIND} and (counts.runs, counts.steps, counts.unsafe_runs) == (8, 20, 3)
    assert paths == {(C_NONE, C_PICK, H_FIND): 3, (C_NONE, C_PICK, C_LOOK): 1, (C_NONE, C_LOOK): 4}


def test_two_actions_remember_the_one_before() -> None:
    memory, counts, _ = counted(SPEC.replace("actions: 1", "actions: 2"))
    base = memory.base  # 6: 0 before the run, the four classes, 5 for another class
    look_after_pick = 0 | (3 + base * 4) << 1  # newest "look", then "pick Phone"
    look_after_start = 0 | (3 + base * 1) << 1  # newest "look", then the first step's "" (no action)
    assert counts.counts[look_after_pick, END] == 1 and counts.counts[look_after_start, END] == 4
    assert dict(counts.initial) == {0 | (1 + base * 0) << 1: 8}  # "" and nothing before the run


def test_verb_classes_merge_objects() -> None:
    memory, counts, _ = counted(SPEC.replace("actions: 1", "actions: 1, action_class: verb"))
    assert memory.vocabulary == ("", "find", "look", "pick")
    assert counts.counts[0 | 4 << 1, 1 | 2 << 1] == 3  # "pick" → "find", whatever their objects


def test_backoff_rows_and_risks_are_exact(traces: Path) -> None:
    model = learn_model([traces], parse_spec(SPEC))
    dtmc = model.dtmc
    assert dtmc.actions == ("", "find Bowl", "look", "pick Phone")
    assert dtmc.states == [C_NONE, H_FIND, C_LOOK, C_PICK, END]
    rows = {dtmc.states[i]: {dtmc.states[j]: Fraction(p).limit_denominator(10_000)
                             for j, p in zip(*_row(dtmc, i))} for i in range(dtmc.size)}
    # memoryless chain (α = 0): cold → cold 9/17, → hot 3/17, → end 5/17. Its cold → cold mass goes to the
    # cold histories by how often cold → cold came with their newest action: "pick Phone" 4 of 9, "look" 5
    # of 9, "" never (4/17, 5/17, 0); cold → hot to "find Bowl" (3/17). β = 1: a row is (n + π) / (N + 1).
    assert rows[C_PICK] == {H_FIND: Fraction(54, 85), C_LOOK: Fraction(22, 85), C_PICK: Fraction(4, 85),
                            END: Fraction(5, 85)}
    assert rows[C_NONE] == {H_FIND: Fraction(3, 153), C_LOOK: Fraction(73, 153), C_PICK: Fraction(72, 153),
                            END: Fraction(5, 153)}
    assert rows[C_LOOK] == {H_FIND: Fraction(3, 102), C_LOOK: Fraction(5, 102), C_PICK: Fraction(4, 102),
                            END: Fraction(90, 102)}
    risk = reach_probabilities(rows, {H_FIND})
    for i, state in enumerate(dtmc.states):
        assert math.isclose(model.outcome.values[i], float(risk[state]), abs_tol=1e-6)
    # the action tells the hazard apart: after "pick Phone" far riskier than after "look"
    assert risk[C_PICK] > 5 * risk[C_LOOK]
    from forewarn.guard.states import state_rows

    # `forewarn states` decides each chain state as a run reaching it would (its history included)
    assert [row.p_unsafe for row in state_rows(model)] == model.outcome.values[:-1].tolist()
    document = orjson.loads(model.save(traces.parent / "m.json").read_bytes())
    assert document["memory_actions"] == ["", "find Bowl", "look", "pick Phone"]
    assert GuardModel.load(traces.parent / "m.json").dtmc.actions == dtmc.actions


def _row(dtmc: Any, i: int) -> tuple[list[int], list[float]]:
    start, stop = dtmc.matrix.indptr[i], dtmc.matrix.indptr[i + 1]
    return dtmc.matrix.indices[start:stop].tolist(), dtmc.matrix.data[start:stop].tolist()


def test_backoff_strength_moves_a_row_between_its_counts_and_the_memoryless_row(traces: Path) -> None:
    rows: dict[float, float] = {}
    for beta in (0.3, 1000.0):
        dtmc = learn_model([traces], parse_spec(SPEC.replace("backoff: 1.0", f"backoff: {beta}"))).dtmc
        i = dtmc.states.index(C_PICK)
        row = dict(zip(*_row(dtmc, i)))
        hot = dtmc.states.index(H_FIND)
        rows[beta] = row.get(hot, 0.0)
    assert rows[0.3] > 0.7  # near its own 3 in 4
    assert abs(rows[1000.0] - 3 / 17) < 0.01  # near the memoryless cold → hot


def test_a_session_advances_the_memory_on_observe_and_preview(traces: Path) -> None:
    model = learn_model([traces], parse_spec(SPEC))
    guard = Guard(model)
    values = dict(zip(model.dtmc.states, model.outcome.values.tolist()))
    session = guard.session()
    first = session.observe(COLD)
    assert first.p_unsafe == values[C_NONE]
    # the proposed step's own action counts: the same state previewed by two actions, two risks
    assert session.preview(COLD, action="pick Phone").p_unsafe == values[C_PICK]
    assert session.preview(COLD, action="look").p_unsafe == values[C_LOOK]
    assert len(session.history) == 1 and session.monitor_states == guard.first_monitor_states(0)
    picked = session.observe(COLD, action="pick Phone")
    assert picked.p_unsafe == values[C_PICK] and picked.action.value == "stop"
    assert guard.memory is not None and guard.memory.encode(0, session.monitor_states[-1]) == C_PICK
    # an action class the runs never showed: the history is unseen, the state's histories decide
    odd = session.preview(COLD, action="juggle Knives")
    assert odd.known and odd.visits == sum(int(model.visits[i]) for i in (0, 2, 3))  # C_NONE, C_LOOK, C_PICK
    # resuming from the committed (abstract state, memory) history reaches the same state
    resumed = guard.session()
    resumed.restore([(r.abstract, r.monitors) for r in session.history])
    assert resumed.monitor_states == session.monitor_states
    assert resumed.preview(HOT, action="find Bowl").unsafe_now


def test_replay_and_sessions_reach_the_states_learning_counted(traces: Path) -> None:
    model = learn_model([traces], parse_spec(SPEC.replace("actions: 1", "actions: 2")))
    guard = Guard(model)
    index = model.dtmc.product_index()
    for raw in hand_runs():
        run = parse_document(raw)
        replayed = replay_run(guard, run)
        session = guard.session()
        for k, step in enumerate(run.steps):
            decision = session.observe(step["state"], action=step.get("action"))
            assert decision.p_unsafe == replayed.p_unsafe[k]
            assert guard.memory is not None and session.monitor_states is not None
            chain = guard.memory.encode(replayed.abstract[k], session.monitor_states[-1])
            assert model.outcome.values[index[(chain, ())]] == decision.p_unsafe


def test_evaluate_with_action_memory_beats_the_memoryless_chain() -> None:
    runs = [parse_document({**r, "meta": {"task": f"t{i % 4}"}}) for i, r in enumerate(hand_runs() * 3)]
    thetas = [0.5]
    spec = SPEC.replace("unseen_state: allow", "unseen_state: allow")
    with_memory = evaluate(runs, parse_spec(spec), thetas, folds=4, group_by="meta.task", seed=0)
    plain = evaluate(runs, parse_spec(spec.replace("memory: {actions: 1, backoff: 1.0}", "memory: off")), thetas,
                     folds=4, group_by="meta.task", seed=0)
    assert with_memory.pooled.brier is not None and plain.pooled.brier is not None
    assert with_memory.pooled.brier < plain.pooled.brier
    ahead, late = with_memory.pooled.thetas[0], plain.pooled.thetas[0]
    assert ahead.detected == late.detected == 9  # the plain chain only by looking at the violating step itself
    assert ahead.mean_advance_steps == 1.0 and late.mean_advance_steps == 0.0
    # tune reads the same held-out replays: a stop threshold detecting every violation
    from forewarn.guard.evaluation.tune import parse_target, tune

    (choice,) = [c for c in tune(with_memory, parse_spec(spec), [parse_target("stop:detection=0.9")])
                 if c.target is not None]
    assert choice.report is not None and choice.report.detected == 9


def test_a_model_file_with_actions_but_a_spec_without_is_refused(traces: Path) -> None:
    path = learn_model([traces], parse_spec(SPEC)).save(traces.parent / "m.json")
    document = orjson.loads(path.read_bytes())
    document["spec"] = document["spec"].replace("actions: 1", "dwell: 2")
    from forewarn.guard.model import _checksum

    document.pop("checksum")
    document["checksum"] = _checksum(document)
    path.write_bytes(orjson.dumps(document))
    with pytest.raises(ModelFileError, match="remembers no actions"):
        GuardModel.load(path)


def test_too_many_histories_for_a_session_state_is_one_clear_error() -> None:
    with pytest.raises(Exception, match="more than 63 bits of session state"):
        Memory(20, previous=True, actions=4, vocabulary=[f"a{i}" for i in range(1000)])


def test_histories_the_chain_never_saw_share_their_states_decision(traces: Path) -> None:
    """Two memory states the runs never showed ("look" or "pick Phone" before "juggle Knives") fall back to
    the same chain entry, and get one decision — built once, with the fallback's figures."""
    model = learn_model([traces], parse_spec(SPEC.replace("actions: 1", "actions: 2")))
    guard = Guard(model)
    decisions = []
    for before in ("look", "pick Phone"):
        session = guard.session()
        session.observe(COLD)
        session.observe(COLD, action=before)
        decisions.append(session.observe(COLD, action="juggle Knives"))
    first, second = decisions
    assert first is second and first.known and first.index is None  # an index past the chain's: the fallback
    assert guard.memory is not None
    states = {q for bits, q in guard._decisions if bits == 0 and len(q) == 1}
    assert len(states) >= 2  # two memory states, one decision
    assert first.visits == sum(int(model.visits[i]) for i, s in enumerate(model.dtmc.states[:-1]) if s & 1 == 0)


@pytest.mark.parametrize("value", ["true", "false", "'2'", "2.0"])
def test_actions_is_a_whole_number_not_a_boolean_nor_text(value: str) -> None:
    """``actions: true`` would silently remember one action (a bool is an int in Python): every value but a
    whole number is refused in one line naming the field."""
    with pytest.raises(SpecError, match=r"learning\.memory\.actions: expected a whole number of actions from 0 to 8"):
        parse_spec(SPEC.replace("memory: {actions: 1, backoff: 1.0}", f"memory: {{actions: {value}}}"))
