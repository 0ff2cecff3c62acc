"""The MDP over the product with monitors, and over states that remember the last action
(learning.memory.actions): Pmin, Pmax and every choice's risk against an exact oracle — the MDP built
here from the runs' counts (and the monitor's steps), solved by backward induction in Fractions (the
runs only move forward: the MDP is acyclic) — and the shield's property on it; a spec with
learning.kinds is refused with its reason."""
from __future__ import annotations

import random
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from forewarn.errors import SpecError
from forewarn.guard.mdp import ANY, END_CHOICE
from forewarn.guard.memory import build_memory
from forewarn.guard.model import GuardModel
from forewarn.guard.monitoring import build_monitors
from forewarn.guard.pipeline import learn_model_from_runs
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import parse_spec
from forewarn.guard.traces import Run
from forewarn.monitors.product import advance

SPEC = """
name: ladder
predicates:
  one: state.x == 1
  two: state.x == 2
  three: state.x >= 3
  bad: state.bad
unsafe: bad
monitors:
  - name: three_after_one
    kind: bounded_response
    trigger: one
    response: three
    within: 1
learning: {alpha: 0, mdp: true}
guard: {thresholds: {reflect: 0.2, ask_human: null, stop: null}}
"""


def ladder_runs(n: int, seed: int) -> list[Run]:
    """x only grows: 'step' (x + 1, or a fall: bad) or 'leap' (x + 2, or a fall), or the run ends."""
    rng = random.Random(seed)
    runs = []
    for i in range(n):
        x = 0
        steps: list[dict[str, Any]] = [{"state": {"x": 0, "bad": False}}]
        while x < 3 and rng.random() > 0.1:
            action = rng.choice(["step", "leap"])
            fall = rng.random() < (0.2 if action == "step" else 0.5)
            x = x if fall else x + (1 if action == "step" else 2)
            steps.append({"state": {"x": x, "bad": fall}, "action": action})
            if fall:
                break
        runs.append(Run(id=str(i), steps=steps, meta={}))
    return runs


Rows = dict[int, list[tuple[str, dict[int, Fraction]]]]
HOLDS = {"one": lambda s: s["x"] == 1, "two": lambda s: s["x"] == 2, "three": lambda s: s["x"] >= 3,
         "bad": lambda s: s["bad"]}


def abstract(names: list[str], state: dict[str, Any]) -> int:
    """The abstract state: bit k for the k-th predicate that holds."""
    return sum(1 << k for k, name in enumerate(names) if HOLDS[name](state))


def oracle_rows(model: GuardModel, runs: list[Run]) -> Rows:
    """The product MDP from the runs: counts per (abstract state, action, abstract state) up to the first
    unsafe step (α = 0: the observed frequencies), each product state (bits, q) taking its bits' counts
    and each successor its monitor states (the monitor stepped on the successor's bits)."""
    dtmc = model.dtmc
    counts: dict[tuple[int, str], dict[int, int]] = {}
    ends: dict[int, int] = {}
    for run in runs:
        bits = [abstract(dtmc.predicates, step["state"]) for step in run.steps]
        for t in range(1, len(run.steps)):
            row = counts.setdefault((bits[t - 1], run.steps[t]["action"]), {})
            row[bits[t]] = row.get(bits[t], 0) + 1
        if not run.steps[-1]["state"]["bad"]:
            ends[bits[-1]] = ends.get(bits[-1], 0) + 1
    monitors = build_monitors(model.spec)
    index = dtmc.product_index()
    rows: Rows = {}
    for (b, q), i in index.items():
        if dtmc.absorbing[i]:
            rows[i] = [(ANY, {i: Fraction(1)})]
            continue
        rows[i] = []
        for (src, action), seen in sorted(counts.items()):
            if src == b:
                total = sum(seen.values())
                rows[i].append((action, {index[(d, advance(monitors, q, d))]: Fraction(n, total)
                                         for d, n in seen.items()}))
        if ends.get(b):
            rows[i].append((END_CHOICE, {dtmc.end_index: Fraction(1)}))
    rows[dtmc.end_index] = [(ANY, {dtmc.end_index: Fraction(1)})]
    return rows


def assert_matches_oracle(model: GuardModel, rows: Rows) -> None:
    """Pmin, Pmax, each choice's row and risk against backward induction in Fractions over ``rows``."""
    mdp, dtmc = model.mdp, model.dtmc
    assert mdp is not None and mdp.pmin is not None and mdp.pmax is not None and mdp.risk is not None
    unsafe = set(int(i) for i in dtmc.unsafe.nonzero()[0])

    @cache
    def value(s: int, best: bool) -> Fraction:
        if s in unsafe:
            return Fraction(1)
        if rows[s] == [(ANY, {s: Fraction(1)})]:
            return Fraction(0)
        q = [sum((p * value(j, best) for j, p in row.items()), Fraction(0)) for _, row in rows[s]]
        return min(q) if best else max(q)

    for s in range(mdp.states):
        got = {mdp.classes[int(mdp.choice_class[c])]: c for c in range(int(mdp.choices[s]), int(mdp.choices[s + 1]))}
        assert sorted(got) == sorted(name for name, _ in rows[s])
        assert mdp.pmin[s] == pytest.approx(float(value(s, True)), abs=1e-9)
        assert mdp.pmax[s] == pytest.approx(float(value(s, False)), abs=1e-9)
        for name, row in rows[s]:
            c = got[name]
            targets = dict(zip(mdp.indices[mdp.indptr[c]:mdp.indptr[c + 1]].tolist(),
                               mdp.probabilities[mdp.indptr[c]:mdp.indptr[c + 1]].tolist()))
            assert targets == pytest.approx({j: float(p) for j, p in row.items()}, abs=1e-12)
            risk = sum((p * value(j, True) for j, p in row.items()), Fraction(0))
            assert mdp.risk[c] == pytest.approx(float(risk), abs=1e-9)


@pytest.fixture(scope="module")
def ladder(tmp_path_factory: pytest.TempPathFactory) -> tuple[GuardModel, list[Run], Path]:
    runs = ladder_runs(400, 5)
    model = learn_model_from_runs(runs, parse_spec(SPEC), precision=1e-10)
    path = model.save(tmp_path_factory.mktemp("ladder") / "model.json")
    return model, runs, path


def test_the_product_mdp_matches_the_exact_oracle(ladder: tuple[GuardModel, list[Run], Path]) -> None:
    model, runs, _ = ladder
    mdp, dtmc = model.mdp, model.dtmc
    assert mdp is not None and mdp.pmin is not None and mdp.pmax is not None and mdp.risk is not None
    assert dtmc.monitors == ["three_after_one"] and mdp.states == dtmc.size
    rows = oracle_rows(model, runs)
    assert_matches_oracle(model, rows)
    # the monitor makes the same abstract state two product states with other risks: after `one`, a step
    # to `two` breaks the rule (three within one step), a leap to `three` keeps it
    one = [i for (bits, _), i in dtmc.product_index().items()
           if not dtmc.absorbing[i] and bits == abstract(dtmc.predicates, {"x": 1, "bad": False})]
    assert one
    for i in one:
        risks = {mdp.classes[int(mdp.choice_class[c])]: float(mdp.risk[c])
                 for c in range(int(mdp.choices[i]), int(mdp.choices[i + 1]))}
        assert risks["step"] == pytest.approx(1.0) and risks["leap"] < 1.0


@pytest.mark.parametrize("theta", [0.1, 0.3, 0.5, 0.7, 0.95])
def test_the_shield_on_the_product_lets_through_only_moves_under_theta(
        ladder: tuple[GuardModel, list[Run], Path], theta: float) -> None:
    model, _, path = ladder
    guard = Guard.load(path)
    advice = guard.advice
    mdp = model.mdp
    assert advice is not None and mdp is not None and mdp.risk is not None
    for s in range(mdp.states):
        named = {mdp.classes[int(mdp.choice_class[c])]: float(mdp.risk[c])
                 for c in range(int(mdp.choices[s]), int(mdp.choices[s + 1]))}
        named.pop(ANY, None)
        under = advice.under(s, theta)
        assert [a.action_class for a in under] == sorted((n for n, r in named.items() if r < theta),
                                                         key=lambda n: (named[n], n))
        for name, risk in named.items():
            move = advice.option(s, name)
            assert move is not None and (move in under) == (risk < theta)


def test_decisions_on_the_product_carry_its_p_min(ladder: tuple[GuardModel, list[Run], Path]) -> None:
    model, _, path = ladder
    session = Guard.load(path).session()
    session.observe({"x": 0, "bad": False})
    decision = session.observe({"x": 1, "bad": False}, action="step")
    mdp = model.mdp
    assert mdp is not None and mdp.pmin is not None and decision.index is not None
    assert decision.p_min == pytest.approx(mdp.pmin[decision.index])
    names = [a.action_class for a in decision.alternatives]
    assert names[-1] == "step" and decision.alternatives[-1].risk == pytest.approx(1.0)  # the rule's breach


def test_a_spec_with_kinds_is_refused_with_its_reason() -> None:
    spec = parse_spec(SPEC.replace("monitors:", "monitors_:").split("monitors_:")[0]
                      + "learning: {mdp: true, kinds: 2}\n")
    with pytest.raises(SpecError, match="partially observable"):
        learn_model_from_runs(ladder_runs(40, 1), spec)


MEMORY_SPEC = SPEC.split("monitors:")[0] + "learning: {alpha: 0, mdp: true, memory: {actions: 1}}\n" \
    + "guard: {thresholds: {reflect: 0.2, ask_human: null, stop: null}}\n"


def memory_oracle(model: GuardModel, runs: list[Run]) -> tuple[Rows, dict[tuple[int, str], int]]:
    """The MDP over (abstract state, the last action's class) from the runs (α = 0), and where each such
    pair is among the model's states (the memory's label read back with ``label_parts``)."""
    dtmc = model.dtmc
    width = len(dtmc.predicates)
    memory = build_memory(model.spec.learning.memory, width, dtmc.actions)
    assert memory is not None
    where: dict[tuple[int, str], int] = {}
    for i, state in enumerate(dtmc.states[:-1]):
        _, _, remembered = memory.label_parts(state >> width)
        assert remembered is not None
        where[state & ((1 << width) - 1), remembered[0]] = i
    counts: dict[tuple[tuple[int, str], str], dict[tuple[int, str], int]] = {}
    ends: dict[tuple[int, str], int] = {}
    for run in runs:
        states = [(abstract(dtmc.predicates, step["state"]), step.get("action") or "") for step in run.steps]
        for t in range(1, len(states)):
            row = counts.setdefault((states[t - 1], run.steps[t]["action"]), {})
            row[states[t]] = row.get(states[t], 0) + 1
        if not run.steps[-1]["state"]["bad"]:
            ends[states[-1]] = ends.get(states[-1], 0) + 1
    rows: Rows = {dtmc.end_index: [(ANY, {dtmc.end_index: Fraction(1)})]}
    for key, i in where.items():
        if dtmc.absorbing[i]:
            rows[i] = [(ANY, {i: Fraction(1)})]
            continue
        rows[i] = [(action, {where[d]: Fraction(n, sum(seen.values())) for d, n in seen.items()})
                   for (src, action), seen in sorted(counts.items()) if src == key]
        if ends.get(key):
            rows[i].append((END_CHOICE, {dtmc.end_index: Fraction(1)}))
    return rows, where


def test_an_mdp_whose_states_remember_the_last_action_matches_the_oracle() -> None:
    """learning.memory.actions: the remembered action is part of the state, the next move's class the choice."""
    runs = ladder_runs(400, 9)
    model = learn_model_from_runs(runs, parse_spec(MEMORY_SPEC), precision=1e-10)
    rows, where = memory_oracle(model, runs)
    assert {last for _, last in where} >= {"step", "leap"}  # the same abstract state, other remembered moves
    assert_matches_oracle(model, rows)


def test_a_smoothed_move_leads_only_to_states_that_remember_it(tmp_path: Path) -> None:
    model = learn_model_from_runs(ladder_runs(300, 4), parse_spec(MEMORY_SPEC.replace("alpha: 0", "alpha: 0.5")))
    mdp, dtmc = model.mdp, model.dtmc
    assert mdp is not None
    width = len(dtmc.predicates)
    memory = build_memory(model.spec.learning.memory, width, dtmc.actions)
    assert memory is not None
    smoothed = 0
    for c in range(len(mdp.choice_class)):
        name = mdp.classes[int(mdp.choice_class[c])]
        if name in (ANY, END_CHOICE):
            continue
        targets = mdp.indices[mdp.indptr[c]:mdp.indptr[c + 1]].tolist()
        smoothed += int((mdp.counts[mdp.indptr[c]:mdp.indptr[c + 1]] == 0).sum())
        for j in targets:
            remembered = memory.label_parts(dtmc.states[j] >> width)[2]
            assert remembered == (name,)  # taking `name` can only lead where `name` is the last action
    assert smoothed > 0  # α gave some unobserved successor mass: the restriction was exercised
    guard = Guard.load(model.save(tmp_path / "memory-actions.json"))  # the model file loads, with its MDP
    session = guard.session()
    session.observe({"x": 0, "bad": False})
    decision = session.observe({"x": 1, "bad": False}, action="step")
    assert decision.p_min is not None and decision.alternatives
