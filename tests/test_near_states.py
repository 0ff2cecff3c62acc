"""An unseen abstract state judged from the nearest seen states (guard/nearest.py, Guard's back-off)."""
from __future__ import annotations

import math
from fractions import Fraction as F
from pathlib import Path
from typing import Any

import pytest

from _support import WriteRuns
from forewarn.guard.model import GuardModel
from forewarn.guard.nearest import back_off, nearest
from forewarn.guard.pipeline import learn_model
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import Action, parse_spec

# four predicates, bits a=1, b=2, c=4, d=8; unsafe when a, b and c hold (state 7)
SPEC = """\
name: near
predicates:
  a: 'state.a'
  b: 'state.b'
  c: 'state.c'
  d: 'state.d'
unsafe: 'a && b && c'
learning:
  alpha: 0.1
guard:
  thresholds: {reflect: 0.9, ask_human: 0.5, stop: 0.2}
  unseen_state: ask_human
"""
RUNS = [[0, 1, 7]] * 3 + [[0, 2, 0]] * 5 + [[0, 1, 0]] * 2 + [[0, 2, 7]]


def state(bits: int) -> dict[str, Any]:
    return {name: bool(bits >> k & 1) for k, name in enumerate("abcd")}


def learned(write_runs: WriteRuns, spec: str = SPEC) -> GuardModel:
    runs = [{"id": f"r{i}", "steps": [{"state": state(b)} for b in bits]} for i, bits in enumerate(RUNS)]
    return learn_model([write_runs(runs)], parse_spec(spec))


# -- the mathematics -------------------------------------------------------------------------


def test_nearest_finds_every_state_at_the_smallest_distance() -> None:
    seen = [0b0000, 0b0011, 0b0101, 0b1111, 0b0110]
    assert nearest(0b0111, seen, 1) == (1, [1, 2, 3, 4])
    assert nearest(0b0001, seen, 1) == (1, [0, 1, 2])
    assert nearest(0b1000, seen, 1) == (1, [0])
    assert nearest(0b1001, seen, 1) == (2, [])  # the nearest is two predicates away: beyond reach
    assert nearest(0b1001, seen, 2) == (2, [0, 1, 2, 3])
    assert nearest(0b1001, seen, 0) == (1, [])  # 0: an unseen state is never judged from another
    assert nearest(0b1, [], 3) == (4, [])
    wide = 1 << 90  # past 63 bits, as a spec with many predicates has
    assert nearest(wide | 1, [wide, 1, 0], 1) == (1, [0, 1])


def test_back_off_is_the_visit_weighted_mean_inside_the_hull_of_the_intervals() -> None:
    near = back_off([F(1, 10), F(1, 2), F(3, 4)], [3, 1, 0], [F(0), F(1, 5), F(1, 2)], [F(3, 10), F(4, 5), F(9, 10)])
    assert near.value == (3 * F(1, 10) + 1 * F(1, 2)) / 4 == F(1, 5)
    assert (near.low, near.high, near.visits) == (F(0), F(9, 10), 4)
    assert near.low is not None and near.high is not None and near.low <= near.value <= near.high
    # every neighbour's interval lies inside the hull: never narrower than the widest of them
    assert near.high - near.low >= max(h - lo for lo, h in [(F(0), F(3, 10)), (F(1, 5), F(4, 5)), (F(1, 2), F(9, 10))])
    # none was ever left: equal weights
    assert back_off([F(1, 4), F(3, 4)], [0, 0]).value == F(1, 2)
    assert back_off([F(1, 4)], [7]) == back_off([F(1, 4)], [7], None, None)
    with pytest.raises(ValueError, match="at least one neighbour"):
        back_off([], [])


# -- the guard -------------------------------------------------------------------------------


def test_an_unseen_state_takes_the_risk_of_its_seen_neighbours(write_runs: WriteRuns) -> None:
    model = learned(write_runs)
    states = model.dtmc.states
    assert 0b0011 not in states  # a and b: never seen; a (1) and b (2) one predicate away, abc (7) is unsafe
    prop = model.properties[0]
    assert prop.ci_low is not None and prop.ci_high is not None
    a, b = states.index(0b0001), states.index(0b0010)
    visits = [int(model.visits[a]), int(model.visits[b])]
    exact = back_off([F(model.outcome.values[i]) for i in (a, b)], visits,
                     [F(prop.ci_low[i]) for i in (a, b)], [F(prop.ci_high[i]) for i in (a, b)])
    decision = Guard(model).decide(state(0b0011))
    assert decision.p_unsafe is not None and math.isclose(decision.p_unsafe, float(exact.value), rel_tol=1e-12)
    assert (decision.ci_low, decision.ci_high) == (float(exact.low), float(exact.high))  # type: ignore[arg-type]
    assert decision.visits == sum(visits) and decision.index is None and not decision.unsafe_now
    assert decision.action is not Action.ALLOW  # the risk of both neighbours is high here
    assert decision.message.endswith("The runs this model was learned from never showed this state: its risk is "
                                     "that of the 2 seen states 1 predicate away, its interval spans theirs.")
    # one neighbour: its figures exactly
    d = Guard(model).decide(state(0b1000))  # d alone: only the start state (0) is one predicate away
    start = states.index(0)
    assert (d.p_unsafe, d.ci_low, d.ci_high, d.visits) == (model.outcome.values[start], prop.ci_low[start],
                                                           prop.ci_high[start], model.visits[start])


def test_the_unseen_action_only_where_nothing_near_was_seen(write_runs: WriteRuns) -> None:
    model = learned(write_runs)
    far = Guard(model).decide(state(0b1100))  # c and d: every seen state is two predicates away or more
    assert (far.action, far.p_unsafe, far.known) == (Action.ASK_HUMAN, None, False)
    assert "never occurred" in far.message
    two = learned(write_runs, SPEC + "  near_states: 2\n")
    reached = Guard(two).decide(state(0b1100))
    assert reached.p_unsafe is not None and reached.action is not Action.ALLOW
    assert "the seen state 2 predicates away" in reached.message  # only the start state (0) is that near
    never = learned(write_runs, SPEC + "  near_states: 0\n")
    assert Guard(never).decide(state(0b0011)).p_unsafe is None
    # an unsafe state never seen is a violation, whatever lies near it
    unsafe = Guard(model).decide(state(0b1111))
    assert unsafe.unsafe_now and unsafe.action is Action.STOP and unsafe.p_unsafe == 1.0


def test_a_session_meets_a_backed_off_state_once(write_runs: WriteRuns, tmp_path: Path) -> None:
    guard = Guard(GuardModel.load(learned(write_runs).save(tmp_path / "m.json")))  # as a saved model holds it
    first = guard.session().observe(state(0))
    size = len(guard._visits)
    session = guard.session()
    session.observe(state(0))
    again = [session.observe(state(0b0011)) for _ in range(3)]
    assert len(guard._visits) == size + 1  # one entry for the state, however often it is met
    assert first.p_unsafe is not None and all(d.p_unsafe == again[0].p_unsafe for d in again)
    other = guard.with_policy(guard.policy).session()  # a clone shares the entries
    other.observe(state(0))
    assert other.observe(state(0b0011)).p_unsafe == again[0].p_unsafe and len(guard._visits) == size + 1
