"""The MDP beside the chain (guard/mdp.py, guard/mdp_learn.py): Pmin, Pmax and every choice's risk
against an exact oracle (policy enumeration, linear systems solved in Fractions), Storm's MDP engine
against Storm's own PRISM front end, the model file, and the commands that show it."""
from __future__ import annotations

import itertools
import random
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import stormpy

from forewarn.errors import ModelFileError
from forewarn.guard.mdp import ANY, END_CHOICE, Advice
from forewarn.guard.mdp_learn import check_mdp
from forewarn.guard.model import GuardModel, _checksum
from forewarn.guard.pipeline import learn_model_from_runs
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import parse_spec
from forewarn.guard.storm import Method, build_sparse_mdp, check_sparse_model
from forewarn.guard.traces import Run

SPEC = """
name: corridor
predicates:
  near: state.x == 1
  bad: state.x == 2
  done: state.x == 3
unsafe: bad
learning: {alpha: 0.5, mdp: true}
guard: {thresholds: {reflect: 0.2, ask_human: 0.15, stop: 0.1}}
"""

Choices = dict[int, list[dict[int, Fraction]]]  # state → its choices' rows


def corridor_runs(n: int, seed: int) -> list[Run]:
    """Runs of an agent that, from x = 0 or 1, picks 'look' (safe moves), 'jump' (risky) or 'finish'."""
    rng = random.Random(seed)
    runs = []
    for i in range(n):
        x = 0
        steps: list[dict[str, Any]] = [{"state": {"x": 0}}]
        for _ in range(5):
            action = rng.choice(["look", "jump", "finish"])
            if action == "look":
                x = rng.choice([0, 1])
            elif action == "jump":
                x = 2 if rng.random() < (0.3 if x == 0 else 0.7) else 1 - x
            else:
                x = 3
            steps.append({"state": {"x": x}, "action": action})
            if x in (2, 3):
                break
        runs.append(Run(id=str(i), steps=steps, meta={}))
    return runs


def reach(rows: dict[int, dict[int, Fraction]], target: set[int]) -> dict[int, Fraction]:
    """Exact probability of reaching ``target`` in a DTMC: 0 where the graph cannot, else the unique
    solution of x = P x (+ the one-step mass into the target), by Gauss–Jordan in Fractions."""
    can = set(target)
    changed = True
    while changed:
        changed = False
        for s, row in rows.items():
            if s not in can and any(j in can for j in row):
                can.add(s)
                changed = True
    unknown = sorted(can - target)
    position = {s: k for k, s in enumerate(unknown)}
    size = len(unknown)
    a = [[Fraction(int(r == c)) for c in range(size)] + [Fraction(0)] for r in range(size)]
    for s in unknown:
        for j, p in rows[s].items():
            if j in target:
                a[position[s]][size] += p
            elif j in position:
                a[position[s]][position[j]] -= p
    for col in range(size):
        pivot = next(r for r in range(col, size) if a[r][col] != 0)
        a[col], a[pivot] = a[pivot], a[col]
        head = a[col][col]
        a[col] = [v / head for v in a[col]]
        for r in range(size):
            if r != col and a[r][col] != 0:
                factor = a[r][col]
                a[r] = [v - factor * w for v, w in zip(a[r], a[col])]
    out = {s: Fraction(int(s in target)) for s in rows}
    for s in unknown:
        out[s] = a[position[s]][size]
    return out


def oracle(choices: Choices, target: set[int]) -> tuple[dict[int, Fraction], dict[int, Fraction]]:
    """Pmin and Pmax of reaching ``target``, exactly: the best and worst of every memoryless deterministic
    policy, state by state (one such policy is optimal in every state at once for reachability)."""
    states = sorted(choices)
    low: dict[int, Fraction] = {}
    high: dict[int, Fraction] = {}
    for pick in itertools.product(*(range(len(choices[s])) for s in states)):
        values = reach({s: choices[s][k] for s, k in zip(states, pick)}, target)
        for s in states:
            low[s] = min(low.get(s, Fraction(1)), values[s])
            high[s] = max(high.get(s, Fraction(0)), values[s])
    return low, high


def exact_choices(model: GuardModel) -> Choices:
    """The learned MDP's rows recomputed in Fractions from its counts and α (eq. 1 per choice)."""
    mdp = model.mdp
    assert mdp is not None
    alpha = Fraction(model.dtmc.alpha)
    chain = model.dtmc.matrix
    out: Choices = {}
    for s in range(mdp.states):
        out[s] = []
        for c in range(int(mdp.choices[s]), int(mdp.choices[s + 1])):
            a, b = int(mdp.indptr[c]), int(mdp.indptr[c + 1])
            targets = mdp.indices[a:b].tolist()
            counts = [Fraction(int(n)) for n in mdp.counts[a:b].tolist()]
            name = mdp.classes[int(mdp.choice_class[c])]
            if name == ANY and sum(counts) == 0:  # the chain's own row (an absorbing self-loop, or never left)
                row = dict(zip(chain.indices[chain.indptr[s]:chain.indptr[s + 1]].tolist(),
                               [Fraction(p).limit_denominator(10**9) for p in
                                chain.data[chain.indptr[s]:chain.indptr[s + 1]].tolist()]))
            elif name == END_CHOICE:
                row = {targets[0]: Fraction(1)}
            else:
                total = sum(counts) + alpha * len(targets)
                row = {j: (n + alpha) / total for j, n in zip(targets, counts)}
            assert sum(row.values()) == 1
            out[s].append(row)
    return out


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> tuple[GuardModel, Path]:
    spec = parse_spec(SPEC)
    model = learn_model_from_runs(corridor_runs(300, 7), spec, precision=1e-10)
    path = tmp_path_factory.mktemp("mdp") / "model.json"
    model.save(path)
    return model, path


def test_pmin_pmax_and_risks_match_the_exact_oracle(learned: tuple[GuardModel, Path]) -> None:
    model, _ = learned
    mdp = model.mdp
    assert mdp is not None and mdp.pmin is not None and mdp.pmax is not None and mdp.risk is not None
    choices = exact_choices(model)
    unsafe = set(np.flatnonzero(model.dtmc.unsafe).tolist())
    low, high = oracle(choices, unsafe)
    assert {mdp.classes[k] for k in mdp.choice_class.tolist()} >= {"look", "jump", "finish"}
    for s in range(mdp.states):
        assert mdp.pmin[s] == pytest.approx(float(low[s]), abs=1e-8)
        assert mdp.pmax[s] == pytest.approx(float(high[s]), abs=1e-8)
        for k, c in enumerate(range(int(mdp.choices[s]), int(mdp.choices[s + 1]))):
            q = sum(p * low[j] for j, p in choices[s][k].items())  # one Bellman step over the exact Pmin
            assert mdp.risk[c] == pytest.approx(float(q), abs=1e-8)
            assert mdp.risk_low is not None and mdp.risk_high is not None
            assert mdp.risk_low[c] <= mdp.risk[c] <= mdp.risk_high[c]
        # Bellman: the least risk of a choice is Pmin; the greatest is at most Pmax
        risks = [mdp.risk[c] for c in range(int(mdp.choices[s]), int(mdp.choices[s + 1]))]
        assert min(risks) == pytest.approx(mdp.pmin[s], abs=1e-8)
        assert max(risks) <= mdp.pmax[s] + 1e-8
    near = model.dtmc.index()[1]  # jumping from x = 1 is riskier than looking
    assert mdp.risk[_choice(model, near, "jump")] > mdp.risk[_choice(model, near, "look")]


def _choice(model: GuardModel, state: int, name: str) -> int:
    mdp = model.mdp
    assert mdp is not None
    return next(c for c in range(int(mdp.choices[state]), int(mdp.choices[state + 1]))
                if mdp.classes[int(mdp.choice_class[c])] == name)


def test_exact_storm_agrees_with_the_oracle_in_fractions(learned: tuple[GuardModel, Path]) -> None:
    model, _ = learned
    mdp = model.mdp
    assert mdp is not None
    choices = exact_choices(model)
    exact = [p for s in range(mdp.states) for row in choices[s] for _, p in sorted(row.items())]
    from forewarn.guard.storm import labels_of

    unsafe = set(np.flatnonzero(model.dtmc.unsafe).tolist())
    low, high = oracle(choices, unsafe)
    for formula, want in (('Pmin=? [F "unsafe"]', low), ('Pmax=? [F "unsafe"]', high)):
        got = check_mdp(mdp, labels_of(model.dtmc), formula, method=Method.EXACT, exact=exact).values
        assert [Fraction(v).limit_denominator(10**12) for v in got] == pytest.approx(
            [want[s] for s in range(mdp.states)], abs=1e-12)


QCOMP_STYLE = """
mdp
// a two-stage gamble: in each stage the player may bet (risky) or hold; two losses are ruin
module gamble
  stage : [0..2] init 0;
  lost : [0..2] init 0;
  [bet] stage<2 & lost<2 -> 0.4 : (stage'=stage+1) & (lost'=lost+1) + 0.6 : (stage'=stage+1);
  [hold] stage<2 & lost<2 -> 0.9 : (stage'=stage+1) + 0.1 : (lost'=lost+1);
  [done] stage=2 | lost=2 -> true;
endmodule
label "ruin" = lost=2;
"""


def test_our_mdp_builder_answers_as_storms_prism_front_end(tmp_path: Path) -> None:
    path = tmp_path / "gamble.nm"
    path.write_text(QCOMP_STYLE)
    program = stormpy.parse_prism_program(str(path))
    reference = stormpy.build_model(program)
    matrix = reference.transition_matrix
    n = reference.nr_states
    groups = [matrix.get_row_group_start(s) for s in range(n)] + [matrix.nr_rows]
    choices = np.array(groups, dtype=np.int64)
    indptr, indices, probabilities = [0], [], []
    rows: Choices = {s: [] for s in range(n)}
    for s in range(n):
        for r in range(groups[s], groups[s + 1]):
            row = {e.column: Fraction(e.value).limit_denominator(1000) for e in matrix.get_row(r)}
            rows[s].append(row)
            for j, p in sorted(row.items()):
                indices.append(j)
                probabilities.append(float(p))
            indptr.append(len(indices))
    ruin = sorted(reference.labeling.get_states("ruin"))
    ours = build_sparse_mdp(choices, np.array(indptr), np.array(indices), np.array(probabilities), {"ruin": ruin})
    low, high = oracle(rows, set(ruin))
    for formula, want in (('Pmin=? [F "ruin"]', low), ('Pmax=? [F "ruin"]', high)):
        theirs = stormpy.model_checking(reference, stormpy.parse_properties(formula)[0], only_initial_states=False)
        mine = check_sparse_model(ours, formula, precision=1e-10).values
        assert mine == pytest.approx(list(theirs.get_value_vector()), abs=1e-8)
        assert mine == pytest.approx([float(want[s]) for s in range(n)], abs=1e-8)
    # by hand, (stage, lost): Pmin(1,1) = 0.1 (hold), Pmin(1,0) = 0 (bet ends the game), Pmin(0,1) = 0.9·0.1 + 0.1,
    # Pmin(0,0) = 0.1·0.19 (hold); Pmax(1,1) = 0.4, Pmax(1,0) = 0.04, Pmax(0,1) = 0.4 + 0.6·0.4, Pmax(0,0) = bet
    initial = reference.initial_states[0]
    assert (low[initial], high[initial]) == (Fraction(19, 1000), Fraction(4, 10) * Fraction(4, 10)
                                             + Fraction(6, 10) * Fraction(4, 100))


def test_the_model_file_keeps_the_mdp_and_refuses_a_broken_one(learned: tuple[GuardModel, Path]) -> None:
    model, path = learned
    loaded = GuardModel.load(path)
    assert loaded.mdp is not None and model.mdp is not None
    assert loaded.mdp.classes == model.mdp.classes
    assert np.array_equal(loaded.mdp.pmin, model.mdp.pmin)  # type: ignore[arg-type]
    document = orjson.loads(path.read_bytes())
    older = {k: v for k, v in document.items() if k != "mdp"}  # a file written before the MDP
    older["checksum"] = _checksum(older)
    assert GuardModel.from_document(older).mdp is None
    broken: dict[str, Any] = orjson.loads(path.read_bytes())
    broken["mdp"]["probabilities"][0] = 0.25
    broken["checksum"] = _checksum(broken)
    with pytest.raises(ModelFileError, match=r"mdp\.probabilities: choice 0 sums to"):
        GuardModel.from_document(broken, source="m.json")


def test_decisions_carry_p_min_and_the_safest_moves(learned: tuple[GuardModel, Path]) -> None:
    model, path = learned
    guard = Guard.load(path)
    decision = guard.session().observe({"x": 1})
    advice = Advice(model.mdp)  # type: ignore[arg-type]
    near = model.dtmc.index()[1]
    assert decision.p_min == pytest.approx(model.mdp.pmin[near])  # type: ignore[union-attr, index]
    risks = [a.risk for a in decision.alternatives]
    assert risks == sorted(risks) and decision.alternatives == advice.alternatives(near)
    names = {a.action_class for a in decision.alternatives}
    assert {"look", "jump", "finish"} <= names <= {"look", "jump", "finish", END_CHOICE}
    assert decision.to_dict()["alternatives"][0]["risk"] == risks[0]


def cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forewarn", *map(str, args)], cwd=cwd, text=True,
                          capture_output=True, timeout=180)


def test_learn_check_and_states_on_the_command_line(tmp_path: Path, learned: tuple[GuardModel, Path]) -> None:
    model, _ = learned
    runs = tmp_path / "runs.jsonl"
    runs.write_bytes(b"".join(orjson.dumps({"id": r.id, "steps": r.steps}) + b"\n" for r in corridor_runs(300, 7)))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("mdp: true", "mdp: false"))
    learnt = cli("learn", runs, "--spec", spec, "-o", tmp_path / "m.json", "--mdp", "--precision", "1e-10", cwd=tmp_path)
    assert learnt.returncode == 0, learnt.stderr
    asked = cli("check", tmp_path / "m.json", "-p", 'Pmin=? [F "unsafe"]', "--format", "json", cwd=tmp_path)
    assert asked.returncode == 0, asked.stderr
    values = [row["value"] for row in orjson.loads(asked.stdout)["states"]]
    assert values == pytest.approx(model.mdp.pmin.tolist(), abs=1e-8)  # type: ignore[union-attr]
    listed = cli("states", tmp_path / "m.json", "--format", "json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    row = orjson.loads(listed.stdout)["states"][model.dtmc.index()[1]]
    moves = row["next_moves"]
    assert [m["risk"] for m in moves] == sorted(m["risk"] for m in moves)
    assert {m["action_class"] for m in moves} >= {"look", "jump"} and all(m["visits"] > 0 for m in moves)
    plain = tmp_path / "plain.json"
    assert cli("learn", runs, "--spec", spec, "-o", plain, cwd=tmp_path).returncode == 0
    refused = cli("check", plain, "-p", 'Pmax=? [F "unsafe"]', cwd=tmp_path)
    assert refused.returncode == 2 and "learn it with --mdp" in refused.stderr


def test_an_mdp_over_a_chain_with_memory_matches_the_oracle(tmp_path: Path) -> None:
    """With learning.memory (the previous state, dwell; no actions) the MDP is over the chain's memory states."""
    spec = parse_spec(SPEC.replace("learning: {alpha: 0.5, mdp: true}",
                                   "learning: {alpha: 0.5, mdp: true, memory: {previous: true, dwell: 4}}"))
    model = learn_model_from_runs(corridor_runs(200, 3), spec, precision=1e-10)
    mdp = model.mdp
    assert mdp is not None and mdp.pmin is not None and mdp.pmax is not None
    assert mdp.states == model.dtmc.size > 5  # more states than the predicates alone make
    low, high = oracle(exact_choices(model), set(np.flatnonzero(model.dtmc.unsafe).tolist()))
    assert mdp.pmin.tolist() == pytest.approx([float(low[s]) for s in range(mdp.states)], abs=1e-8)
    assert mdp.pmax.tolist() == pytest.approx([float(high[s]) for s in range(mdp.states)], abs=1e-8)
    path = model.save(tmp_path / "memory.json")
    decision = Guard.load(path).session().observe({"x": 0})
    assert decision.index is not None and decision.p_min == pytest.approx(mdp.pmin[decision.index])
    remembering = parse_spec(SPEC.replace("learning: {alpha: 0.5, mdp: true}",
                                          "learning: {mdp: true, memory: {actions: 1}}"))
    remembered = learn_model_from_runs(corridor_runs(200, 3), remembering, precision=1e-10)  # tests/test_mdp_monitor_oracle
    assert remembered.mdp is not None and remembered.mdp.states == remembered.dtmc.size
    low, high = oracle(exact_choices(remembered), set(np.flatnonzero(remembered.dtmc.unsafe).tolist()))
    assert remembered.mdp.pmin is not None
    assert remembered.mdp.pmin.tolist() == pytest.approx([float(low[s]) for s in range(remembered.mdp.states)],
                                                         abs=1e-8)
