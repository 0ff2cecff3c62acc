"""`P~b` queries (a bound instead of `=?`): a per-state verdict, for learned models and PRISM files."""
from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np

from _support import CLI, can_reach, reach_probabilities
from forewarn.guard.model import GuardModel
from forewarn.guard.storm import Method, check_dtmc


def exact_reach(model_path: Path, label: str = "unsafe") -> dict[int, Fraction]:
    dtmc = GuardModel.load(model_path).dtmc
    rows = {i: dict(dtmc.exact_row(i)) for i in range(dtmc.size)}
    targets = {int(i) for i in np.flatnonzero(dtmc.unsafe)} if label == "unsafe" else {dtmc.end_index}
    return reach_probabilities(rows, targets)


def test_a_bounded_query_on_a_learned_model_gives_a_verdict_per_state(toy_model_path: Path,
                                                                    forewarn_here: CLI) -> None:
    exact = exact_reach(toy_model_path)
    assert any(v > Fraction(9, 20) for v in exact.values()) and any(0 < v <= Fraction(9, 20) for v in exact.values())
    queries: list[tuple[str, Callable[[Fraction], bool]]] = [
        ('P>0.45 [F "unsafe"]', lambda v: v > Fraction(9, 20)), ('P<=0.45 [F "unsafe"]', lambda v: v <= Fraction(9, 20)),
        ('P>=1 [F "unsafe"]', lambda v: v == 1), ('P>0 [F "unsafe"]', lambda v: v > 0)]
    for query, holds in queries:
        result = forewarn_here("check", toy_model_path, "--property", query, "--method", "exact", "--format", "json")
        assert result.returncode == 0, result.stderr
        document = result.json()
        assert isinstance(document, dict) and document["property"] == query
        states = document["states"]
        assert [s["verdict"] for s in states] == [holds(exact[i]) for i in range(len(states))], query
        # beside the verdict, the probability the bound is compared with, and that probability's interval
        assert [s["value"] for s in states] == [float(exact[i]) for i in range(len(states))]
        assert all(s["ci_low"] <= s["value"] <= s["ci_high"] for s in states)

    table = forewarn_here("check", toy_model_path, "--property", 'P>0.45 [F "unsafe"]')
    assert table.returncode == 0, table.stderr
    assert "holds" in table.stdout and "true" in table.stdout and "false" in table.stdout


def test_a_boolean_combination_has_verdicts_and_no_single_value(toy_model_path: Path, forewarn_here: CLI) -> None:
    query = '!P>0.45 [F "unsafe"] & P>0 [F "end"]'
    result = forewarn_here("check", toy_model_path, "--property", query, "--method", "exact", "--format", "json")
    assert result.returncode == 0, result.stderr
    unsafe, end = exact_reach(toy_model_path), exact_reach(toy_model_path, "end")
    states = result.json()["states"]
    assert [s["verdict"] for s in states] == [unsafe[i] <= Fraction(9, 20) and end[i] > 0 for i in range(len(states))]
    assert all(s["value"] is None for s in states)
    assert forewarn_here("check", toy_model_path, "--property", query).returncode == 0


def test_verdicts_agree_across_methods_through_the_python_api(toy_model_path: Path) -> None:
    dtmc = GuardModel.load(toy_model_path).dtmc
    rows = {i: dict(dtmc.exact_row(i)) for i in range(dtmc.size)}
    reach = can_reach(rows, {int(i) for i in np.flatnonzero(dtmc.unsafe)})
    for method in Method:
        outcome = check_dtmc(dtmc, 'P>0 [F "unsafe"]', method=method)
        assert outcome.verdicts is not None
        assert outcome.verdicts.tolist() == [i in reach for i in range(dtmc.size)]
    assert check_dtmc(dtmc, 'P=? [F "unsafe"]').verdicts is None  # a quantitative query has none


# Two processes draw 1..3 each round and retry on a tie (QComp's leader_sync, in small).
LEADER = """\
dtmc
module control
  s : [0..2] init 0;
  [go] s=0 -> (s'=1);
  [retry] s=1 & a=b -> (s'=0);
  [win] s=1 & a!=b -> (s'=2);
  [done] s=2 -> (s'=2);
endmodule
module p1
  a : [0..3] init 0;
  [go] true -> 1/3:(a'=1) + 1/3:(a'=2) + 1/3:(a'=3);
  [retry] true -> (a'=0);
endmodule
module p2 = p1 [a=b] endmodule
label "elected" = s=2;
"""

WALK = ('dtmc\nconst int N;\nmodule walk\n  x : [0..N];\n'
        "  [] x>0 & x<N -> 1/3:(x'=x-1) + 2/3:(x'=x+1);\n  [] x=0 | x=N -> 1:(x'=x);\n"
        'endmodule\ninit x=1 | x=2 endinit\nlabel "goal" = x=N;\n')


def test_prism_files_report_the_initial_states_verdicts(tmp_path: Path, forewarn_here: CLI) -> None:
    leader = tmp_path / "leader.pm"
    leader.write_text(LEADER, encoding="utf-8")
    sure = forewarn_here("check", leader, "--property", 'P>=1 [F "elected"]', "--format", "json")
    assert sure.returncode == 0, sure.stderr
    document = sure.json()
    assert isinstance(document, dict)
    assert document["verdict"] is True and document["initial"] == 1.0
    assert [s["verdict"] for s in document["initial_states"]] == [True]
    assert all(s["verdict"] for s in document["states"])  # every state elects eventually
    # within two steps: go, then win with probability 2/3
    soon = forewarn_here("check", leader, "--property", 'P>0.7 [F<=2 "elected"]', "--method", "exact",
                         "--format", "json").json()
    assert soon["verdict"] is False and soon["initial"] == float(Fraction(2, 3))
    table = forewarn_here("check", leader, "--property", 'P>=1 [F "elected"]')
    assert table.returncode == 0 and 'P>=1 [F "elected"] is true (probability 1) in the initial state' \
        in table.stdout

    # two initial states, x=1 (4/7 to reach the goal) and x=2 (6/7): the model holds if all do
    walk = tmp_path / "walk.pm"
    walk.write_text(WALK, encoding="utf-8")
    half = forewarn_here("check", walk, "--property", 'P>0.5 [F "goal"]', "--const", "N=3", "--method", "exact",
                         "--format", "json").json()
    assert half["verdict"] is True
    most = forewarn_here("check", walk, "--property", 'P>0.8 [F "goal"]', "--const", "N=3", "--method", "exact",
                         "--format", "json").json()
    assert most["verdict"] is False
    assert sorted(s["verdict"] for s in most["initial_states"]) == [False, True]
    by_index = {s["index"]: s for s in most["states"]}
    assert {by_index[s["index"]]["value"] for s in most["initial_states"]} == {4 / 7, 6 / 7}
    text = forewarn_here("check", walk, "--property", 'P>0.8 [F "goal"]', "--const", "N=3")
    assert text.returncode == 0 and "is false" in text.stdout and "1 of 2 initial states" in text.stdout
