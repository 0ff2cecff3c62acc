from __future__ import annotations

import math
from fractions import Fraction
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _support import AB, NONE, TOY_SPEC, A, B, Row, WriteRuns, eq1_row, install_package, toy_run
from forewarn.guard.learning import (
    END,
    LearnedDTMC,
    TransitionCounts,
    count_transitions,
    learn_dtmc,
    spec_transition_rule,
)
from forewarn.guard.pipeline import learn_model, transition_rule
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.spec import Spec, parse_spec
from forewarn.guard.traces import read_runs

ALPHA = Fraction(1, 10)

# The toy_traces fixture, abstracted by hand (AB is unsafe):
#   r1: NONE A AB NONE   → NONE→A, A→AB; cut at AB (the trailing NONE is not counted)
#   r2: NONE B B         → NONE→B, B→B, B→end
#   r3: NONE A NONE      → NONE→A, A→NONE, NONE→end
#   r4: NONE B A AB      → NONE→B, B→A, A→AB
#   r5: AB NONE          → starts unsafe: nothing counted
TOY_COUNTS: dict[int, dict[int, int]] = {
    NONE: {A: 2, B: 2, END: 1},
    A: {AB: 2, NONE: 1},
    B: {B: 1, END: 1, A: 1},
}


def learn(path: Path, spec_text: str, alpha: float) -> LearnedDTMC:
    spec = parse_spec(spec_text)
    predicates = PredicateSet(spec)
    counts = count_transitions(read_runs(path), predicates)
    return learn_dtmc(counts, predicates, alpha=alpha, rule=transition_rule(spec, predicates))


def rows_of(dtmc: LearnedDTMC) -> dict[int, dict[int, float]]:
    """The learned matrix as {source bits: {target bits: probability}}."""
    out: dict[int, dict[int, float]] = {}
    m = dtmc.matrix
    for i, src in enumerate(dtmc.states):
        cols, data = m.indices[m.indptr[i]:m.indptr[i + 1]], m.data[m.indptr[i]:m.indptr[i + 1]]
        out[src] = {dtmc.states[int(j)]: float(p) for j, p in zip(cols, data)}
    return out


def assert_rows(dtmc: LearnedDTMC, expected: dict[int, Row]) -> None:
    """Float matrix ≈ the hand Fractions, and exact_row == the hand Fractions exactly."""
    learned = rows_of(dtmc)
    assert set(learned) == set(expected)
    for src, row in expected.items():
        assert set(learned[src]) == set(row), f"support of row {src}"
        for dst, p in row.items():
            assert math.isclose(learned[src][dst], p, rel_tol=1e-12), (src, dst)
        i = dtmc.states.index(src)
        exact = {dtmc.states[j]: q for j, q in dtmc.exact_row(i)}
        assert exact == row, f"exact row {src}"
        assert sum(exact.values()) == 1


def test_counts_follow_the_runs_and_stop_at_the_first_violation(toy_traces: Path,
                                                                 toy_predicates: PredicateSet) -> None:
    counts = count_transitions(read_runs(toy_traces), toy_predicates)
    expected = {(src, dst): n for src, row in TOY_COUNTS.items() for dst, n in row.items()}
    assert dict(counts.counts) == expected
    assert dict(counts.initial) == {NONE: 4, AB: 1}
    assert counts.unsafe == {AB}
    assert (counts.runs, counts.unsafe_runs, counts.steps) == (5, 3, 16)


def test_smoothed_rows_equal_eq1_by_hand(toy_traces: Path) -> None:
    dtmc = learn(toy_traces, TOY_SPEC, alpha=0.1)
    assert dtmc.states == [NONE, A, B, AB, END]
    # by default every observed state and end is a valid successor of a non-absorbing state
    valid = [NONE, A, B, AB, END]
    expected = {src: eq1_row(TOY_COUNTS[src], valid, ALPHA) for src in (NONE, A, B)}
    expected[AB] = {AB: Fraction(1)}
    expected[END] = {END: Fraction(1)}
    assert expected[NONE][A] == Fraction(21, 55)  # (2 + 1/10) / (5 + 5/10), written out once
    assert_rows(dtmc, expected)
    assert dtmc.unsafe.tolist() == [False, False, False, True, False]
    assert dtmc.absorbing.tolist() == [False, False, False, True, True]
    assert dtmc.initial == {dtmc.states.index(NONE): 4, dtmc.states.index(AB): 1}
    assert dtmc.invalid_observed == 0
    # the counts matrix keeps the observations, nothing after a violation
    counts = dtmc.counts.toarray()
    assert counts[dtmc.states.index(AB)].sum() == 0
    assert counts[dtmc.states.index(A), dtmc.states.index(AB)] == 2


def test_alpha_zero_gives_the_maximum_likelihood_chain(toy_traces: Path) -> None:
    dtmc = learn(toy_traces, TOY_SPEC, alpha=0.0)
    expected = {src: {dst: Fraction(n, sum(row.values())) for dst, n in row.items()}
                for src, row in TOY_COUNTS.items()}
    expected[AB] = {AB: Fraction(1)}
    expected[END] = {END: Fraction(1)}
    assert_rows(dtmc, expected)
    assert dtmc.matrix.nnz == 3 + 2 + 3 + 1 + 1  # only observed transitions remain


@pytest.mark.parametrize("alpha", [Fraction(1, 10), Fraction(0)])
def test_a_state_never_seen_as_a_source_gets_the_uniform_row(alpha: Fraction,
                                                            toy_predicates: PredicateSet) -> None:
    counts = TransitionCounts()
    counts.counts[NONE, A] = 2
    counts.counts[NONE, END] = 1
    counts.initial[NONE] = 3
    dtmc = learn_dtmc(counts, toy_predicates, alpha=float(alpha))
    # AB, the unsafe state, is in the model though no run reached it (docs/method.md)
    assert dtmc.states == [NONE, A, AB, END]
    expected = {
        NONE: eq1_row({A: 2, END: 1}, [NONE, A, AB, END], alpha),
        A: {NONE: Fraction(1, 4), A: Fraction(1, 4), AB: Fraction(1, 4), END: Fraction(1, 4)},
        AB: {AB: Fraction(1)},
        END: {END: Fraction(1)},
    }
    assert_rows(dtmc, expected)


def test_max_changed_predicates_narrows_successors_and_keeps_invalid_observations(
        write_runs: WriteRuns) -> None:
    spec = TOY_SPEC.replace("learning:", "valid_transitions:\n  max_changed_predicates: 1\nlearning:")
    path = write_runs([
        toy_run("x1", [NONE, A, AB]),
        toy_run("x2", [NONE, B]),
        toy_run("x3", [NONE, AB]),  # two predicates change at once: invalid, but observed
        toy_run("x4", [NONE, A, NONE]),
    ])
    dtmc = learn(path, spec, alpha=0.1)
    counts = {NONE: {A: 2, B: 1, AB: 1, END: 1}, A: {AB: 1, NONE: 1}, B: {END: 1}}
    expected = {
        # within one flip of NONE: NONE, A, B; plus end; plus the observed NONE→AB
        NONE: eq1_row(counts[NONE], [NONE, A, B, END, AB], ALPHA),
        A: eq1_row(counts[A], [NONE, A, AB, END], ALPHA),  # A→B flips two predicates
        B: eq1_row(counts[B], [NONE, B, AB, END], ALPHA),  # B→A likewise
        AB: {AB: Fraction(1)},
        END: {END: Fraction(1)},
    }
    assert_rows(dtmc, expected)
    assert dtmc.invalid_observed == 1


def test_irreversible_predicates_narrow_successors(write_runs: WriteRuns) -> None:
    spec = TOY_SPEC.replace("learning:", "valid_transitions:\n  irreversible: [a]\nlearning:")
    path = write_runs([
        toy_run("y1", [NONE, A, A, AB]),
        toy_run("y2", [NONE, A, NONE, B]),  # A→NONE undoes a: invalid, observed twice below
        toy_run("y3", [B, A, NONE]),
    ])
    dtmc = learn(path, spec, alpha=0.1)
    counts = {NONE: {A: 2, B: 1, END: 1}, A: {A: 1, AB: 1, NONE: 2}, B: {END: 1, A: 1}}
    every = [NONE, A, B, AB, END]
    expected = {
        NONE: eq1_row(counts[NONE], every, ALPHA),
        A: eq1_row(counts[A], [A, AB, END, NONE], ALPHA),  # a stays true, except as observed
        B: eq1_row(counts[B], every, ALPHA),
        AB: {AB: Fraction(1)},
        END: {END: Fraction(1)},
    }
    assert_rows(dtmc, expected)
    assert dtmc.invalid_observed == 2


def test_three_predicates_with_a_domain_rule_and_a_hamming_bound(write_runs: WriteRuns, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # the operator's installed package registers the rule (an entry point), the spec names it
    install_package(tmp_path / "site", "toy-rules", {"toy_rules": "def no_c_without_a(src, dst):\n"
                                                                   "    return not (dst[2] and not dst[0])\n"},
                    {"toy.no_c_without_a": "toy_rules:no_c_without_a"})
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    spec = (
        "predicates:\n  a: state.a\n  b: state.b\n  c: state.c\n"
        "unsafe: a && b && c\n"
        "valid_transitions:\n  max_changed_predicates: 2\n  function: toy.no_c_without_a\n")

    def state(a: int, b: int, c: int) -> dict[str, object]:
        return {"state": {"a": bool(a), "b": bool(b), "c": bool(c)}}

    path = write_runs([
        {"id": "z1", "steps": [state(0, 0, 0), state(1, 1, 0), state(1, 1, 1)]},
        {"id": "z2", "steps": [state(0, 0, 0), state(1, 0, 1), state(0, 0, 0)]},
        {"id": "z3", "steps": [state(0, 0, 0), state(1, 1, 1)]},  # three flips: invalid, observed
    ])
    dtmc = learn(path, spec, alpha=0.5)
    s000, s011, s101, s111 = 0b000, 0b011, 0b101, 0b111  # bit 0 is a, bit 2 is c
    assert dtmc.states == [s000, s011, s101, s111, END]
    half = Fraction(1, 2)
    expected = {
        s000: eq1_row({s011: 1, s101: 1, s111: 1, END: 1}, [s000, s011, s101, END, s111], half),
        # from 011: 101 is two flips and has a; 000 is two flips; 111 is one flip
        s011: eq1_row({s111: 1}, [s000, s011, s101, s111, END], half),
        s101: eq1_row({s000: 1}, [s000, s011, s101, s111, END], half),
        s111: {s111: Fraction(1)},
        END: {END: Fraction(1)},
    }
    assert_rows(dtmc, expected)
    assert dtmc.invalid_observed == 1


def test_a_plain_function_rule(toy_traces: Path, toy_predicates: PredicateSet) -> None:
    def never_back_to_none(src: tuple[bool, ...], dst: tuple[bool, ...]) -> bool:
        return any(dst) or not any(src)

    counts = count_transitions(read_runs(toy_traces), toy_predicates)
    dtmc = learn_dtmc(counts, toy_predicates, alpha=0.1, rule=never_back_to_none)
    expected = {
        NONE: eq1_row(TOY_COUNTS[NONE], [NONE, A, B, AB, END], ALPHA),
        A: eq1_row(TOY_COUNTS[A], [A, B, AB, END, NONE], ALPHA),  # A→NONE observed: kept
        B: eq1_row(TOY_COUNTS[B], [A, B, AB, END], ALPHA),
        AB: {AB: Fraction(1)},
        END: {END: Fraction(1)},
    }
    assert_rows(dtmc, expected)
    assert dtmc.invalid_observed == 1


def test_pipeline_uses_the_spec_alpha(toy_traces: Path, toy_spec: Spec) -> None:
    model = learn_model([toy_traces], toy_spec)
    assert model.dtmc.alpha == 0.1
    expected = {src: eq1_row(TOY_COUNTS[src], [NONE, A, B, AB, END], ALPHA) for src in (NONE, A, B)}
    expected[AB] = {AB: Fraction(1)}
    expected[END] = {END: Fraction(1)}
    assert_rows(model.dtmc, expected)
    assert model.provenance["runs"] == 5
    assert model.provenance["unsafe_runs"] == 3
    assert model.provenance["inputs"][0]["bytes"] == toy_traces.stat().st_size


def test_negative_alpha_is_rejected(toy_predicates: PredicateSet) -> None:
    counts = TransitionCounts()
    counts.initial[NONE] = 1
    counts.counts[NONE, END] = 1
    with pytest.raises(ValueError, match="alpha"):
        learn_dtmc(counts, toy_predicates, alpha=-0.1)


# -- the vectorised learn_dtmc against eq. 1 written row by row ------------------------------

def reference_unsafe(observed: list[int], predicates: PredicateSet, rule: Any) -> set[int]:
    """The unseen unsafe states learning adds, by brute force: for each safe observed state without an
    observed unsafe successor, the nearest unsafe valuation changing only predicates 'unsafe' reads."""
    read = [b for b in range(predicates.width) if predicates.unsafe_mask >> b & 1]
    width = predicates.width
    seen_unsafe = [b for b in observed if predicates.is_unsafe(b)]
    added: set[int] = set()
    for s in observed:
        if predicates.is_unsafe(s) or (rule is None and seen_unsafe):
            continue
        others = s & ~sum(1 << b for b in read)
        candidates = [others | sum(1 << b for b, v in zip(read, values) if v)
                      for values in product([False, True], repeat=len(read))]
        candidates = sorted((c for c in candidates if predicates.is_unsafe(c)),
                            key=lambda c: (bin(c ^ s).count("1"), c))
        if rule is None:
            return set(candidates[:1])
        v = [tuple(bool(b >> k & 1) for k in range(width)) for b in [s, *seen_unsafe[:8]]]
        if any(rule(v[0], u) for u in v[1:]):
            continue
        allowed = [c for c in candidates if rule(v[0], tuple(bool(c >> k & 1) for k in range(width)))]
        if allowed and allowed[0] not in observed:
            added.add(allowed[0])
    return added


def reference_learn(counts: TransitionCounts, predicates: PredicateSet, alpha: float,
                    rule: Any) -> tuple[list[int], list[list[int]], list[list[float]], list[list[float]], int]:
    """States, and per row the columns, probabilities and counts, computed one row at a time."""
    observed = set(counts.initial)
    for src, dst in counts.counts:
        observed.add(src)
        if dst != END:
            observed.add(dst)
    observed |= reference_unsafe(sorted(observed), predicates, rule)
    states = sorted(observed) + [END]
    index = {bits: i for i, bits in enumerate(states)}
    end = len(states) - 1
    unsafe = [bits != END and predicates.is_unsafe(bits) for bits in states]
    seen: dict[int, dict[int, int]] = {}
    for (src, dst), n in counts.counts.items():
        seen.setdefault(index[src], {})[index[dst]] = n
    width = predicates.width
    valuation = [tuple(bool(b >> k & 1) for k in range(width)) if b != END else () for b in states]
    all_cols, all_probs, all_counts, invalid = [], [], [], 0
    for i in range(len(states)):
        if i == end or unsafe[i]:
            all_cols.append([i])
            all_probs.append([1.0])
            all_counts.append([0.0])
            continue
        if rule is None:
            valid = set(range(len(states)))
        else:
            valid = {j for j in range(end) if rule(valuation[i], valuation[j])} | {end}
        row = seen.get(i, {})
        invalid += sum(n for j, n in row.items() if j not in valid)
        cols = sorted(valid | set(row))
        row_counts = np.array([row.get(j, 0) for j in cols], dtype=np.float64)
        total, k = row_counts.sum(), len(cols)
        if total == 0 and alpha == 0:
            probs = np.full(k, 1.0 / k)
        else:
            probs = (row_counts + alpha) / (total + k * alpha)
            if alpha == 0:
                keep = row_counts > 0
                cols, probs, row_counts = [c for c, q in zip(cols, keep) if q], probs[keep], row_counts[keep]
        all_cols.append(list(cols))
        all_probs.append(probs.tolist())
        all_counts.append(row_counts.tolist())
    return states, all_cols, all_probs, all_counts, invalid


def assert_same_as_reference(counts: TransitionCounts, predicates: PredicateSet, alpha: float, rule: Any) -> None:
    dtmc = learn_dtmc(counts, predicates, alpha=alpha, rule=rule)
    states, cols, probs, row_counts, invalid = reference_learn(counts, predicates, alpha, rule)
    assert dtmc.states == states
    assert dtmc.invalid_observed == invalid
    for name, matrix, expected in (("matrix", dtmc.matrix, probs), ("counts", dtmc.counts, row_counts)):
        for i in range(len(states)):
            start, stop = matrix.indptr[i], matrix.indptr[i + 1]
            assert matrix.indices[start:stop].tolist() == cols[i], (name, i)
            assert matrix.data[start:stop].tolist() == expected[i], (name, i)  # bit for bit
    assert dtmc.initial == {states.index(b): n for b, n in counts.initial.items()}
    assert list(dtmc.initial) == [states.index(b) for b in counts.initial]


def bits_spec(width: int, unsafe: str, extra: str = "") -> Spec:
    predicates = "".join(f"  p{i}: state.p{i}\n" for i in range(width))
    return parse_spec(f"predicates:\n{predicates}unsafe: '{unsafe}'\n{extra}")


@st.composite
def chains(draw: st.DrawFn) -> tuple[TransitionCounts, int]:
    width = draw(st.integers(1, 6))
    shift = draw(st.sampled_from([0, 20]))  # past 22 predicates, states are found by binary search
    pool = [bits << shift for bits in
            draw(st.lists(st.integers(0, (1 << width) - 1), min_size=1, max_size=12, unique=True))]
    counts = TransitionCounts()
    for src, dst, n in draw(st.lists(st.tuples(st.sampled_from(pool), st.sampled_from(pool + [END]),
                                               st.integers(1, 5)), max_size=30)):
        counts.counts[src, dst] += n
    for start in draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3)):
        counts.initial[start] += 1
    return counts, width + shift


@settings(max_examples=200, deadline=None)
@given(chains(), st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.5e-3]), st.integers(0, 5), st.booleans(), st.booleans())
def test_learning_agrees_with_the_row_by_row_reference(chain: tuple[TransitionCounts, int], alpha: float,
                                                       max_changed: int, irreversible: bool, domain: bool) -> None:
    counts, width = chain
    if width > 10:  # a Hamming ball of radius 5 in 26 bits has 80,000 masks: keep the test quick
        max_changed = min(max_changed, 2)
    predicates = PredicateSet(bits_spec(width, "p0 && !p1" if width > 1 else "p0"))
    extra = (lambda s, d: sum(d) >= sum(s) - 1) if domain else None
    rule = spec_transition_rule(max_changed if max_changed else None, 1 << (width - 1) if irreversible else 0,
                                extra, width)
    assert_same_as_reference(counts, predicates, alpha, rule)
    assert_same_as_reference(counts, predicates, alpha, None)


@pytest.mark.parametrize("width", [30, 70])  # found by binary search; past 63 bits, in object arrays
def test_many_predicates(width: int) -> None:
    predicates = PredicateSet(bits_spec(width, f"p0 && p{width - 1}"))
    rule = spec_transition_rule(1, 1 << (width - 5), None, width)
    counts = TransitionCounts()
    top, mid = 1 << (width - 1), 1 << (width - 5)
    masks = [0, 1, top, top | 1, mid, mid | 2, 3]
    for i, src in enumerate(masks):
        for dst in masks[i % 3::2] + [END]:
            counts.counts[src, dst] += 1 + i
    counts.initial[0] = 2
    for alpha in (0.0, 0.1):
        assert_same_as_reference(counts, predicates, alpha, rule)
        assert_same_as_reference(counts, predicates, alpha, None)


def test_unsafe_is_evaluated_once_per_valuation_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    predicates = PredicateSet(bits_spec(6, "p0 && !p1"))
    calls: list[int] = []
    is_unsafe = predicates.is_unsafe

    def counted(bits: int) -> bool:
        calls.append(bits)
        return is_unsafe(bits)

    monkeypatch.setattr(predicates, "is_unsafe", counted)
    counts = TransitionCounts()
    for src in range(64):
        counts.counts[src, END] += 1
    counts.initial[0] = 1
    dtmc = learn_dtmc(counts, predicates, alpha=0.1)
    assert sorted(calls) == [0, 1, 2, 3]
    assert dtmc.unsafe[:-1].tolist() == [bits & 0b11 == 0b01 for bits in range(64)]


def test_exact_row_of_a_hand_built_chain_with_other_count_sparsity() -> None:
    import scipy.sparse as sp

    matrix = sp.csr_matrix(np.array([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))
    counts = sp.csr_matrix(np.array([[3.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    dtmc = LearnedDTMC(predicates=["a"], states=[0, 1, END], unsafe=np.array([False, True, False]),
                       initial={0: 1}, counts=counts, matrix=matrix, alpha=0.5)
    assert dtmc.exact_row(0) == [(0, Fraction(7, 8)), (1, Fraction(1, 8))]
    assert dtmc.exact_row(1) == [(1, Fraction(1))]


def test_provenance_hashes_each_input_while_learning_reads_it(toy_spec: Spec, toy_traces: Path) -> None:
    from forewarn.guard.pipeline import learn_model
    from forewarn.guard.traces import file_digest

    model = learn_model([toy_traces], toy_spec)
    (entry,) = model.provenance["inputs"]
    assert entry["sha256"] == file_digest(toy_traces) and entry["bytes"] == toy_traces.stat().st_size
