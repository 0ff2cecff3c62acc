"""`forewarn check` on PRISM files: several initial states, the model's own state order, rewards."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from _support import CLI, expected_steps, reach_probabilities

# Herman-style: every configuration x<2 is an initial state; expected steps to "done".
# From x=0: 1/2 → x=1, 1/2 → x=2; x=1: 1/2 → x=0, 1/2 → x=3; x=2 → x=3; x=3 absorbing ("done").
STEPS = """\
dtmc
module m
  x : [0..3];
  [] x=0 -> 0.5:(x'=1) + 0.5:(x'=2);
  [] x=1 -> 0.5:(x'=0) + 0.5:(x'=3);
  [] x=2 -> 1:(x'=3);
  [] x=3 -> 1:(x'=3);
endmodule
init x<2 endinit
rewards "steps"
  true : 1;
endrewards
label "done" = x=3;
"""
ROWS = {0: {1: Fraction(1, 2), 2: Fraction(1, 2)}, 1: {0: Fraction(1, 2), 3: Fraction(1, 2)},
        2: {3: Fraction(1)}, 3: {3: Fraction(1)}}

# Storm explores from the initial state z=2 first, so its internal index 0 is z=2; the
# report's order follows the variable: z=0, z=1, z=2.
BACKWARDS = """\
dtmc
module m
  z : [0..2] init 2;
  [] z=2 -> 0.25:(z'=1) + 0.75:(z'=0);
  [] z=1 -> 1:(z'=0);
  [] z=0 -> 1:(z'=0);
endmodule
label "zero" = z=0;
label "one" = z=1;
"""


@pytest.fixture
def steps_model(tmp_path: Path) -> Path:
    path = tmp_path / "steps.pm"
    path.write_text(STEPS, encoding="utf-8")
    return path


def test_expected_steps_over_every_initial_state(forewarn_here: CLI, steps_model: Path) -> None:
    oracle = expected_steps(ROWS, {3})
    assert (oracle[0], oracle[1], oracle[2]) == (Fraction(8, 3), Fraction(7, 3), Fraction(1))
    result = forewarn_here("check", steps_model, "--property", 'R{"steps"}=? [F "done"]', "--method", "exact",
                           "--format", "json")
    assert result.returncode == 0, result.stderr
    document = result.json()
    assert isinstance(document, dict)
    assert [s["variables"] for s in document["initial_states"]] == [{"x": 0}, {"x": 1}]
    assert [Fraction(s["value"]).limit_denominator(100) for s in document["initial_states"]] == [
        oracle[0], oracle[1]]
    assert document["initial"] == pytest.approx(float(oracle[0]))  # the max, as QComp reports it
    assert document["initial_aggregate"] == "max over 2 initial states"
    assert [s["index"] for s in document["states"]] == [0, 1, 2, 3]
    assert [s["variables"]["x"] for s in document["states"]] == [0, 1, 2, 3]
    assert [s["initial"] for s in document["states"]] == [True, True, False, False]
    for state in document["states"]:
        assert state["value"] == pytest.approx(float(oracle.get(state["index"], Fraction(0))), abs=1e-12)
    table = forewarn_here("check", steps_model, "--property", 'R{"steps"}=? [F "done"]')
    assert table.returncode == 0
    assert "2 initial states" in table.stdout and "min 2.33333, max 2.66667" in table.stdout
    assert "[x=0]  2.66667" in table.stdout and "[x=1]  2.33333" in table.stdout


def test_a_state_that_may_never_reach_the_target_has_infinite_expected_reward(forewarn_here: CLI,
                                                                               steps_model: Path) -> None:
    # x=2 is reached from x=0 only with probability 1/2: the others' expected steps are infinite
    result = forewarn_here("check", steps_model, "--property", 'R{"steps"}=? [F x=2]', "--format", "json")
    assert result.returncode == 0, result.stderr
    document = result.json()
    assert isinstance(document, dict)
    assert [(s["value"], s["infinite"]) for s in document["states"]] == [
        (None, True), (None, True), (0.0, False), (None, True)]
    assert document["initial"] is None


def test_states_follow_the_models_own_variables(forewarn_here: CLI, tmp_path: Path) -> None:
    path = tmp_path / "backwards.pm"
    path.write_text(BACKWARDS, encoding="utf-8")
    oracle = reach_probabilities({2: {1: Fraction(1, 4), 0: Fraction(3, 4)}, 1: {0: Fraction(1)},
                                  0: {0: Fraction(1)}}, {1})
    result = forewarn_here("check", path, "--property", 'P=? [F "one"]', "--method", "exact", "--format", "json")
    assert result.returncode == 0, result.stderr
    document = result.json()
    assert isinstance(document, dict)
    assert [(s["index"], s["variables"], s["value"]) for s in document["states"]] == [
        (0, {"z": 0}, float(oracle[0])), (1, {"z": 1}, float(oracle[1])), (2, {"z": 2}, float(oracle[2]))]
    assert document["initial"] == float(Fraction(1, 4))
    assert document["initial_states"] == [{"index": 2, "variables": {"z": 2}, "value": 0.25}]
    table = forewarn_here("check", path, "--property", 'P=? [F "one"]')
    assert "0.25 in the initial state (3 states, 4 transitions; the initial state is [z=2])" in table.stdout


def test_an_unknown_reward_model_is_one_line_and_storm_stays_off_stdout(forewarn_here: CLI,
                                                                        steps_model: Path) -> None:
    result = forewarn_here("check", steps_model, "--property", 'R{"energy"}=? [F "done"]', "--format", "json")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Cannot build unknown reward model 'energy'" in result.stderr and "Traceback" not in result.stderr


HERMAN5 = """\
// Herman's self-stabilising ring of 5 processes, as in the PRISM and QComp benchmark sets
dtmc
const double p = 0.5;
module process1
  x1 : [0..1];
  [step] (x1=x5) -> p : (x1'=0) + 1-p : (x1'=1);
  [step] !(x1=x5) -> (x1'=x5);
endmodule
module process2 = process1 [ x1=x2, x5=x1 ] endmodule
module process3 = process1 [ x1=x3, x5=x2 ] endmodule
module process4 = process1 [ x1=x4, x5=x3 ] endmodule
module process5 = process1 [ x1=x5, x5=x4 ] endmodule
formula num_tokens = (x1=x5?1:0)+(x2=x1?1:0)+(x3=x2?1:0)+(x4=x3?1:0)+(x5=x4?1:0);
label "stable" = num_tokens=1;
rewards "steps"
  true : 1;
endrewards
init true endinit
"""


def herman_rows(n: int = 5) -> tuple[dict[int, dict[int, Fraction]], set[int]]:
    """The ring by hand: a process whose bit equals its left neighbour's holds a token and
    flips a fair coin; the others copy their left neighbour. State = bits x1..xn, x1 first."""
    rows: dict[int, dict[int, Fraction]] = {}
    stable = set()
    for state in range(2 ** n):
        bits = [(state >> (n - 1 - i)) & 1 for i in range(n)]
        tokens = [bits[i] == bits[i - 1] for i in range(n)]
        if sum(tokens) == 1:
            stable.add(state)
        outcomes: dict[int, Fraction] = {0: Fraction(1)}
        for i in range(n):
            choices = [(0, Fraction(1, 2)), (1, Fraction(1, 2))] if tokens[i] else [(bits[i - 1], Fraction(1))]
            outcomes = {(prefix << 1) | b: p * q for prefix, p in outcomes.items() for b, q in choices}
        rows[state] = outcomes
    return rows, stable


def test_herman5_expected_steps_match_qcomps_reference(forewarn_here: CLI, tmp_path: Path) -> None:
    """Issue 14: one arbitrary initial state's value (2.933) was reported where QComp's
    reference for herman.5 is 3.2, the maximum over its 32 initial states."""
    path = tmp_path / "herman5.pm"
    path.write_text(HERMAN5, encoding="utf-8")
    rows, stable = herman_rows()
    oracle = expected_steps(rows, stable)
    values = {s: oracle.get(s, Fraction(0)) for s in rows}
    assert max(values.values()) == Fraction(16, 5) and values[0] == Fraction(44, 15)
    result = forewarn_here("check", path, "--property", 'R{"steps"}=? [F "stable"]', "--method", "exact",
                           "--format", "json")
    assert result.returncode == 0, result.stderr
    document = result.json()
    assert isinstance(document, dict)
    assert document["initial"] == float(Fraction(16, 5))
    assert len(document["initial_states"]) == 32
    for state in document["states"]:  # index = the bits x1..x5 read as a number: the model's own order
        bits = int("".join(str(state["variables"][f"x{i}"]) for i in range(1, 6)), 2)
        assert state["index"] == bits
        assert Fraction(state["value"]).limit_denominator(1000) == values[bits]
