"""The estimation levers: memory, back-off smoothing, shrinking towards the frequency.

Exact oracles are written by hand on the toy domain (tests/_support.py: a = bit 0,
b = bit 1, unsafe when both hold; NONE=0, A=1, AB=3).
"""
from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from _support import AB, CLI, NONE, TOY_SPEC, A, B, WriteRuns, reach_probabilities, toy_run, toy_state
from forewarn.guard import Guard
from forewarn.guard.learning import END, LearnedDTMC
from forewarn.guard.memory import Memory
from forewarn.guard.pipeline import learn_model
from forewarn.guard.shrinkage import KAPPA_GRID, STACK_GRID, VISIT_GRID, reach_label
from forewarn.guard.spec import ALPHA_AUTO_REMOVED, Spec, parse_spec
from forewarn.guard.storm import Method

F = Fraction
N4, A5 = NONE | 1 << 2, A | 1 << 2  # NONE and A having held for 2 steps or more (dwell 2: label 1)


def toy_with(learning: str) -> Spec:
    text = TOY_SPEC.replace("learning:\n  alpha: 0.1\n", "learning:\n" + learning)
    return parse_spec(text)


def rows_exact(dtmc: LearnedDTMC) -> dict[int, dict[int, Fraction]]:
    return {dtmc.states[i]: {dtmc.states[j]: p for j, p in dtmc.exact_row(i)} for i in range(dtmc.size)}


# -- the memory automaton -----------------------------------------------------------------

def test_dwell_buckets_are_log_spaced_and_capped() -> None:
    memory = Memory(2, dwell=8)  # buckets: 1 | 2-3 | 4-7 | 8+
    labels = [memory.label(s) for s in _states(memory, [1] * 12)]
    assert labels == [0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3]
    assert memory.encode_run([1, 1, 2, 2, 2, 2]) == [1, 1 | 1 << 2, 2, 2 | 1 << 2, 2 | 1 << 2, 2 | 2 << 2]


def test_previous_remembers_the_last_different_state() -> None:
    memory = Memory(2, previous=True)  # no dwell: one bucket
    assert [memory.label(s) for s in _states(memory, [0, 0, 1, 1, 2, 0])] == [0, 0, 1, 1, 2, 3]
    assert memory.successor_keys(1, 1, True) == [(1, 0)] and memory.successor_keys(1, 1, False) == [(2, 0)]
    assert memory.arrival_key(2) == (2, 0)


def _states(memory: Memory, abstract: list[int]) -> list[int]:
    out, state = [], memory.initial
    for bits in abstract:
        state = memory.step(state, bits)
        out.append(state)
    return out


# -- back-off smoothing: exact rows by hand ----------------------------------------------------

BACKOFF = "  alpha: 0.75\n  structure: observed\n  shrink: off\n  memory: {dwell: 2, backoff: 2}\n"
BACKOFF_RUNS = [[NONE, NONE, NONE], [NONE, A, A], [NONE, AB]]
# Memoryless chain (structure observed, α = 3/4):
#   NONE: NONE 2, A 1, AB 1, end 1 → (n + 3/4)/8 = 11/32, 7/32, 7/32, 7/32
#   A:    A 1, end 1               → 1/2, 1/2
LOW = {NONE: {NONE: F(11, 32), A: F(7, 32), AB: F(7, 32), END: F(7, 32)}, A: {A: F(1, 2), END: F(1, 2)}}
# Chain over (bits, dwell label), β = 2; a stay splits its prior mass over the labels that
# exist (NONE fresh → NONE fresh or NONE held); rows are (n + β·π) / (N + β·Z):
BACKOFF_ROWS = {
    NONE: {NONE: F(11, 32) / 5, N4: (1 + F(11, 32)) / 5, A: (1 + F(7, 16)) / 5, AB: (1 + F(7, 16)) / 5,
           END: F(7, 16) / 5},
    N4: {N4: (1 + F(11, 16)) / 4, A: F(7, 16) / 4, AB: F(7, 16) / 4, END: (1 + F(7, 16)) / 4},
    A: {A: F(1, 2) / 3, A5: (1 + F(1, 2)) / 3, END: F(1) / 3},
    A5: {A5: F(1, 3), END: F(2, 3)},
    AB: {AB: F(1)},
    END: {END: F(1)},
}


def test_backoff_rows_match_the_hand_fractions(write_runs: WriteRuns) -> None:
    for src, row in BACKOFF_ROWS.items():
        assert sum(row.values()) == 1, src
    path = write_runs([toy_run(f"r{i}", bits) for i, bits in enumerate(BACKOFF_RUNS)])
    model = learn_model([path], toy_with(BACKOFF), method=Method.EXACT)
    assert rows_exact(model.dtmc) == BACKOFF_ROWS
    for i, src in enumerate(model.dtmc.states):  # the float matrix says the same
        for j, p in model.dtmc.exact_row(i):
            assert math.isclose(model.dtmc.matrix[i, j], p, rel_tol=1e-12), (src, j)
    reach = reach_probabilities(BACKOFF_ROWS, {AB})
    values = model.outcome.values
    for i, src in enumerate(model.dtmc.states):
        assert math.isclose(values[i], reach[src], rel_tol=1e-12, abs_tol=1e-15), src
    assert model.provenance["levers"]["backoff"] == {"chosen": 2.0}


def test_shrink_blends_the_chain_with_each_states_frequency(write_runs: WriteRuns) -> None:
    path = write_runs([toy_run(f"r{i}", bits) for i, bits in enumerate(BACKOFF_RUNS)])
    model = learn_model([path], toy_with(BACKOFF.replace("shrink: off", "shrink: 2")), method=Method.EXACT)
    p = reach_probabilities(BACKOFF_ROWS, {AB})
    # runs that visited each state before a violation (each run once), and those that went on to one:
    # NONE 3 (1), N4 1 (0: the first run, though it visits N4 twice), A 1 (0), A5 1 (0)
    expected = {NONE: (1 + 2 * p[NONE]) / 5, N4: 2 * p[N4] / 3, A: 2 * p[A] / 3, A5: 2 * p[A5] / 3,
                AB: F(1), END: F(0)}
    for i, src in enumerate(model.dtmc.states):
        assert math.isclose(model.outcome.values[i], expected[src], rel_tol=1e-12, abs_tol=1e-15), src
    assert model.provenance["levers"]["shrink"]["unsafe"] == {"kappa": 2.0}


SHRINK_RUNS = [[NONE, A, AB], [NONE, A, NONE], [NONE, NONE, A, AB], [NONE, B, B], [NONE, B, A, AB], [A, NONE],
               [NONE, A, B], [B, A, AB], [NONE, B], [A, A, AB], [NONE, A, AB], [B, NONE, A]]


def test_shrink_auto_scores_are_the_kfold_brier_of_refitted_models(write_runs: WriteRuns) -> None:
    spec = toy_with("  alpha: 0.1\n  shrink: auto\n")
    model = learn_model([write_runs([toy_run(f"r{i}", b) for i, b in enumerate(SHRINK_RUNS)])], spec)
    entry = model.provenance["levers"]["shrink"]["unsafe"]
    items = sorted(Counter(tuple(b) for b in SHRINK_RUNS).items())
    off = toy_with("  alpha: 0.1\n  shrink: off\n")
    grid = ([("runs", kappa) for kappa in KAPPA_GRID] + [("visits", kappa) for kappa in VISIT_GRID]
            + [("stack", w) for w in STACK_GRID])
    squared = np.zeros(len(grid))
    visits = 0
    per_run = []  # each held-out run's squared errors per blend
    for fold in range(5):  # the distinct runs in sorted order, dealt round-robin
        train = [list(p) for n, (p, w) in enumerate(items) if n % 5 != fold for _ in range(w)]
        test = [list(p) for n, (p, w) in enumerate(items) if n % 5 == fold for _ in range(w)]
        sub = learn_model([write_runs([toy_run(f"t{i}", b) for i, b in enumerate(train)], name=f"f{fold}.jsonl")],
                          off)
        index = sub.dtmc.index()
        n: Counter[int] = Counter()  # runs that visit a state before the violation, each once
        k: Counter[int] = Counter()  # of them, those that violate
        nv: Counter[int] = Counter()  # every visit before the violation (counting)
        kv: Counter[int] = Counter()  # of them, those a violation followed
        for bits in train:
            cut = next((i for i, b in enumerate(bits) if b == AB), len(bits))
            for b in set(bits[:cut]):
                n[b] += 1
                k[b] += cut < len(bits)
            for b in bits[:cut]:
                nv[b] += 1
                kv[b] += cut < len(bits)
        for bits in test:  # scored at every step, as forewarn evaluate does
            cut = next((i for i, b in enumerate(bits) if b == AB), len(bits))
            run = np.zeros(len(grid))
            for b in bits[:cut]:
                if b not in index:
                    continue
                p = sub.outcome.values[index[b]]
                visits += 1
                for g, (towards, kappa) in enumerate(grid):
                    hits, out_of = (k[b], n[b]) if towards == "runs" else (kv[b], nv[b])
                    if towards == "stack":  # the chain's weight, the rest counting's (the chain's where unseen)
                        pred = kappa * p + (1 - kappa) * (kv[b] / nv[b] if nv[b] else p)
                    else:
                        pred = p if math.isinf(kappa) or out_of == 0 else (hits + kappa * p) / (out_of + kappa)
                    run[g] += (pred - (cut < len(bits))) ** 2
            squared += run
            per_run.append(run)
    first, stacked = len(KAPPA_GRID), len(KAPPA_GRID) + len(VISIT_GRID)
    assert np.allclose(entry["cv_brier"], squared[:first] / visits, rtol=1e-9)
    assert np.allclose(entry["cv_brier_visits"], squared[first:stacked] / visits, rtol=1e-9)
    assert np.allclose(entry["cv_brier_stacks"], squared[stacked:] / visits, rtol=1e-9)
    scores = list(entry["cv_brier"]) + list(entry["cv_brier_visits"]) + list(entry["cv_brier_stacks"])
    counting = first  # κ = 1 towards visits: counting with one visit's worth of the chain
    # counting is the default (the runs hold violations); the best of all replaces it only if its gain
    # over held-out runs is significant (one-sided, 1.645 SE)
    default = counting
    best = min(range(len(grid)), key=lambda i: (round(scores[i], 12), i != default))
    gain = np.array([r[default] - r[best] for r in per_run])
    significant = gain.sum() > 1.645 * math.sqrt(((gain - gain.mean()) ** 2).sum())
    towards, chosen = grid[best if significant else default]
    if towards == "stack":
        assert (entry["towards"], entry["chain_weight"], entry["kappa"]) == ("stack", chosen, None)
    else:
        assert (entry["towards"], entry["kappa"]) == (towards, "inf" if math.isinf(chosen) else chosen)
    assert scores[grid.index((towards, chosen))] <= scores[counting]
    again = learn_model([write_runs([toy_run(f"r{i}", b) for i, b in enumerate(SHRINK_RUNS)], name="again.jsonl")],
                        spec)
    assert again.provenance["levers"]["shrink"] == model.provenance["levers"]["shrink"]
    assert np.array_equal(again.outcome.values, model.outcome.values)


def test_shrink_auto_takes_counting_where_it_wins_held_out(write_runs: WriteRuns) -> None:
    """Safe runs linger in the start state, violating ones leave it at once: the per-step frequency (counting)
    beats the chain on every held-out fold, so the default stores it where the runs visited, with one visit's
    worth of the chain's value added."""
    runs = [[NONE, A, AB]] * 20 + [[NONE] * 6 + [B]] * 20 + [[NONE] * 5 + [A, NONE]] * 10
    model = learn_model([write_runs([toy_run(f"r{i}", b) for i, b in enumerate(runs)])],
                        toy_with("  alpha: 0.1\n  shrink: auto\n"))
    entry = model.provenance["levers"]["shrink"]["unsafe"]
    assert (entry["towards"], entry["kappa"]) == ("visits", 1.0)
    chain = learn_model([write_runs([toy_run(f"r{i}", b) for i, b in enumerate(runs)], name="chain.jsonl")],
                        toy_with("  alpha: 0.1\n  shrink: off\n"))
    for state, hits, visits in ((NONE, 20, 20 + 120 + 60), (A, 20, 30)):  # every visit before a violation
        i = model.dtmc.states.index(state)
        p = F(chain.outcome.values[chain.dtmc.states.index(state)])
        assert math.isclose(model.outcome.values[i], float((hits + p) / (visits + 1)), rel_tol=1e-12)


def test_reach_label_reads_reach_properties_only() -> None:
    assert reach_label('P=? [F "unsafe"]') == ("unsafe", None)
    assert reach_label('P=? [F<=12 "viol_x"]') == ("viol_x", 12)
    assert reach_label('P=? [G !"unsafe"]') is None


# -- alpha: auto, removed --------------------------------------------------------------------

def test_alpha_auto_is_a_one_line_error_saying_it_was_removed_and_why(tmp_path: Path, toy_traces: Path,
                                                                     forewarn_here: CLI) -> None:
    spec = tmp_path / "auto.yaml"
    spec.write_text(TOY_SPEC.replace("learning:\n  alpha: 0.1\n", "learning:\n  alpha: auto\n"), encoding="utf-8")
    result = forewarn_here("learn", toy_traces, "--spec", spec, "-o", tmp_path / "m.json")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {spec}:9: learning.alpha: {ALPHA_AUTO_REMOVED}"]


def test_structure_observed_smooths_over_observed_successors_only(write_runs: WriteRuns) -> None:
    path = write_runs([toy_run(f"r{i}", bits) for i, bits in enumerate(BACKOFF_RUNS)])
    model = learn_model([path], toy_with("  alpha: 0.75\n  structure: observed\n  shrink: off\n"),
                        method=Method.EXACT)
    assert rows_exact(model.dtmc) == {**LOW, AB: {AB: F(1)}, END: {END: F(1)}}


def test_state_for_inverts_the_label() -> None:
    for memory in (Memory(2, dwell=8), Memory(2, previous=True), Memory(2, dwell=4, previous=True)):
        for m in _states(memory, [0, 0, 1, 1, 1, 1, 1, 2, 0, 3, 3]):
            bits = ((m >> 12) & 7) - 1
            assert memory.label(memory.state_for(bits, memory.label(m))) == memory.label(m)


@pytest.mark.parametrize("memory", ["{dwell: 4}", "{dwell: 4, previous: true}"])
def test_states_lists_every_memory_state_with_its_own_risk(write_runs: WriteRuns, tmp_path: Path,
                                                           forewarn_here: CLI, memory: str) -> None:
    """`forewarn states` on a model with memory: each chain state's row is that state's risk."""
    runs = [[NONE, NONE, A, A, A, NONE, A, AB], [NONE, A, A, NONE, NONE, NONE], [A, A, NONE, AB]] * 2
    path = write_runs([toy_run(f"r{i}", bits) for i, bits in enumerate(runs)])
    spec = tmp_path / "spec.yaml"
    spec.write_text(TOY_SPEC.replace("learning:\n", f"learning:\n  shrink: off\n  memory: {memory}\n"))
    model_path = tmp_path / "model.json"
    assert forewarn_here("learn", path, "--spec", spec, "-o", model_path).returncode == 0
    result = forewarn_here("states", model_path, "--format", "json")
    assert result.returncode == 0, result.stderr
    model = learn_model([path], parse_spec(spec.read_text()))
    rows = result.json()["states"]
    assert len(rows) == len(model.dtmc.states) - 1 > 4  # more chain states than predicate valuations
    for row in rows:
        assert row["p_unsafe"] == pytest.approx(model.outcome.values[row["index"]], abs=1e-9)


# -- run time: a session reaches the chain state learning counted ------------------------------

def test_sessions_advance_the_memory_as_learning_encodes_it(write_runs: WriteRuns) -> None:
    runs = [[NONE, NONE, A, A, A, NONE, A, AB], [NONE, A, A, NONE, NONE, NONE], [A, A, NONE, AB]] * 2
    path = write_runs([toy_run(f"r{i}", bits) for i, bits in enumerate(runs)])
    spec = toy_with("  alpha: 0.1\n  memory: {dwell: 4, previous: true}\n")
    model = learn_model([path], spec)
    guard = Guard(model)
    memory = guard.memory
    assert memory is not None
    index = model.dtmc.product_index()
    for bits_run in runs:
        session = guard.session()
        for bits, chain_state in zip(bits_run, memory.encode_run(bits_run)):
            state = toy_state(bits)
            previewed = session.preview(state)
            decision = session.observe(state)
            assert previewed == decision
            assert session.monitor_states is not None
            assert memory.encode(bits, session.monitor_states[-1]) == chain_state
            assert decision.abstract_state == {"a": bool(bits & 1), "b": bool(bits & 2)}
            i = index[(chain_state, ())]
            assert decision.p_unsafe == model.outcome.values[i]
        resumed = guard.session()
        resumed.restore([(r.abstract, r.monitors) for r in session.history])
        assert resumed.monitor_states == session.monitor_states
        assert [r.decision for r in resumed.history] == [r.decision for r in session.history]


def test_a_history_never_seen_gets_the_visit_weighted_mean_of_its_states_histories(write_runs: WriteRuns) -> None:
    path = write_runs([toy_run("r0", [NONE, A, A, AB]), toy_run("r1", [NONE, NONE, A]),
                       toy_run("r2", [A, NONE])])
    model = learn_model([path], toy_with("  alpha: 0.1\n  shrink: off\n  memory: {dwell: 4}\n"))
    dtmc, values = model.dtmc, model.outcome.values
    visits = np.asarray(dtmc.counts.sum(axis=1)).ravel()
    histories = [i for i, s in enumerate(dtmc.states[:-1]) if s & 3 == A]  # A fresh, A held 2-3 steps
    assert len(histories) == 2
    mean = float(np.dot(visits[histories], values[histories]) / visits[histories].sum())
    session = Guard(model).session()
    decisions = [session.observe(toy_state(A)) for _ in range(6)]  # A held 4+ steps: never seen
    assert decisions[0].p_unsafe == values[dtmc.states.index(A)]
    assert decisions[2].p_unsafe == values[dtmc.states.index(A | 1 << 2)]
    assert all(d.known for d in decisions) and decisions[-1].p_unsafe == pytest.approx(mean, rel=1e-12)


def test_a_model_with_memory_round_trips_through_its_file(write_runs: WriteRuns, tmp_path: Path) -> None:
    path = write_runs([toy_run(f"r{i}", bits) for i, bits in enumerate(BACKOFF_RUNS)])
    model = learn_model([path], toy_with(BACKOFF))
    loaded = type(model).load(model.save(tmp_path / "m.json"))
    assert loaded.dtmc.states == model.dtmc.states
    assert np.array_equal(loaded.outcome.values, model.outcome.values)


# -- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize(("learning", "fragment"), [
    ("  alpha: fast\n", "learning.alpha: expected a number in [0, 1e6], got 'fast'"),
    ("  shrink: -1\n", "learning.shrink: expected a number in [0, 1e6] or 'auto' or 'off', got -1"),
    ("  structure: dense\n", "learning.structure"),
    ("  memory: {dwell: 1}\n", "learning.memory.dwell"),
    ("  memory: {backoff: 0}\n", "learning.memory.backoff: expected a number in (0, 1e6] or 'auto', got 0"),
    ("  memory: {lag: 2}\n", "learning.memory.lag"),
    ("  alpha: .inf\n", "learning.alpha: expected a number in [0, 1e6], got inf"),
    ("  shrink: 1e2x\n", "learning.shrink: expected a number in [0, 1e6] or 'auto' or 'off', got '1e2x'"),
])
def test_bad_learning_keys_are_one_line_exit_2(learning: str, fragment: str, tmp_path: Path, toy_traces: Path,
                                               forewarn_here: CLI) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(TOY_SPEC.replace("learning:\n  alpha: 0.1\n", "learning:\n" + learning), encoding="utf-8")
    result = forewarn_here("learn", toy_traces, "--spec", spec, "-o", tmp_path / "m.json")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "bad.yaml:9" in lines[0], lines
    assert not (tmp_path / "m.json").exists()


def test_bundles_learn_every_member_with_memory_and_shrinking(write_runs: WriteRuns, tmp_path: Path) -> None:
    from forewarn.guard.bundle import GuardBundle, learn_bundle

    runs = []
    for i, bits in enumerate(SHRINK_RUNS * 2):
        run = toy_run(f"r{i}", bits)
        run["meta"] = {"task": "t1" if i % 2 else "t2"}
        runs.append(run)
    spec = toy_with("  alpha: 0.1\n  memory: {dwell: 4}\n")
    bundle = learn_bundle([write_runs(runs)], spec, group_by="meta.task", min_group_runs=5)
    loaded = GuardBundle.load(bundle.save(tmp_path / "bundle.json"))
    for model in (loaded.pooled, *loaded.members.values()):
        assert any(s >> 2 for s in model.dtmc.states[:-1])  # chain states carry memory labels
        assert "kappa" in model.provenance["levers"]["shrink"]["unsafe"]
    t1 = [bits for i, bits in enumerate(SHRINK_RUNS * 2) if i % 2]
    alone = learn_model([write_runs([toy_run(f"s{i}", b) for i, b in enumerate(t1)], name="t1.jsonl")], spec)
    assert np.array_equal(loaded.members["t1"].outcome.values, alone.outcome.values)
