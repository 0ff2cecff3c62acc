"""The synchronous product of a learned chain with monitors, over reachable states only.

A product state is ``(abstract state, q₁, …, qₘ)``. Every abstract state of the chain is
a possible start — ``(s, δ(q0, L(s)))`` — so a session may begin anywhere the chain has
been; from there only reachable combinations are built, never the full cross product.
A product state is unsafe where the spec's unsafe condition holds or any monitor is in
``viol``; unsafe states and ``end`` are absorbing. Monitors stop in ``end`` (weak
finite-run semantics), so every ``end`` collapses into one product state.

Transition probabilities and counts are those of the chain: each successor s' of s
has exactly one product successor ``(s', δ(q, L(s')))``, so rows keep their length and
eq. 1 of the paper holds for product rows as it does for chain rows.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from guard.learning import END, LearnedDTMC
from monitors.base import VIOL, Monitor

__all__ = ["build_product", "initial_monitor_states", "advance"]


def initial_monitor_states(monitors: Sequence[Monitor], bits: int) -> tuple[int, ...]:
    """Monitor states after reading a run's first abstract state."""
    return tuple(m.step(m.initial, bits) for m in monitors)


def advance(monitors: Sequence[Monitor], q: tuple[int, ...], bits: int) -> tuple[int, ...]:
    """Monitor states after reading the next abstract state."""
    return tuple(m.step(qk, bits) for m, qk in zip(monitors, q))


def build_product(chain: LearnedDTMC, monitors: Sequence[Monitor]) -> LearnedDTMC:
    """The reachable product of ``chain`` with ``monitors`` (the chain itself when there are none)."""
    if not monitors:
        return chain
    m = len(monitors)
    end_c = chain.end_index
    matrix, counts = chain.matrix, chain.counts
    index: dict[tuple[int, tuple[int, ...]], int] = {}
    base: list[int] = []
    qs: list[tuple[int, ...]] = []
    queue: deque[int] = deque()

    def state_of(i: int, q: tuple[int, ...]) -> int:
        key = (i, q)
        found = index.get(key)
        if found is None:
            found = index[key] = len(base)
            base.append(i)
            qs.append(q)
            queue.append(found)
        return found

    for i in range(end_c):
        state_of(i, initial_monitor_states(monitors, chain.states[i]))

    rows_cols: list[list[int]] = []
    rows_probs: list[np.ndarray] = []
    rows_counts: list[np.ndarray] = []
    absorbing_rows: list[bool] = []
    end_marker = -1
    while queue:
        k = queue.popleft()
        i, q = base[k], qs[k]
        while len(rows_cols) <= k:
            rows_cols.append([]), rows_probs.append(np.empty(0)), rows_counts.append(np.empty(0))
            absorbing_rows.append(False)
        if chain.unsafe[i] or VIOL in q:
            absorbing_rows[k] = True
            continue
        start, stop = matrix.indptr[i], matrix.indptr[i + 1]
        targets = []
        for j in matrix.indices[start:stop]:
            j = int(j)
            if j == end_c:
                targets.append(end_marker)
            else:
                targets.append(state_of(j, advance(monitors, q, chain.states[j])))
        rows_cols[k] = targets
        rows_probs[k] = matrix.data[start:stop]
        rows_counts[k] = counts.data[start:stop]

    n = len(base) + 1
    end = n - 1
    indptr = [0]
    cols_parts, prob_parts, count_parts = [], [], []
    for k in range(n - 1):
        if absorbing_rows[k]:
            cols, probs, cnt = np.array([k]), np.ones(1), np.zeros(1)
        else:
            cols = np.array([end if t == end_marker else t for t in rows_cols[k]], dtype=np.int64)
            order = np.argsort(cols, kind="stable")
            cols, probs, cnt = cols[order], rows_probs[k][order], rows_counts[k][order]
        cols_parts.append(cols), prob_parts.append(probs), count_parts.append(cnt)
        indptr.append(indptr[-1] + len(cols))
    cols_parts.append(np.array([end])), prob_parts.append(np.ones(1)), count_parts.append(np.zeros(1))
    indptr.append(indptr[-1] + 1)
    indices = np.concatenate(cols_parts).astype(np.int64)
    product_matrix = sp.csr_matrix((np.concatenate(prob_parts), indices, np.array(indptr)), shape=(n, n))
    product_counts = sp.csr_matrix((np.concatenate(count_parts), indices, np.array(indptr)), shape=(n, n))

    monitor_states = np.array(qs + [tuple([0] * m)], dtype=np.int64).reshape(n, m)
    violations = monitor_states == VIOL
    violations[end] = False
    unsafe = np.array([bool(chain.unsafe[base[k]]) for k in range(n - 1)] + [False]) | violations.any(axis=1)
    initial: dict[int, int] = {}
    for i, runs in chain.initial.items():
        k = index[(i, initial_monitor_states(monitors, chain.states[i]))]
        initial[k] = initial.get(k, 0) + runs
    return LearnedDTMC(
        predicates=list(chain.predicates),
        states=[chain.states[i] for i in base] + [END],
        unsafe=unsafe,
        initial=initial,
        counts=product_counts,
        matrix=product_matrix,
        alpha=chain.alpha,
        invalid_observed=chain.invalid_observed,
        monitors=[mon.name for mon in monitors],
        monitor_states=monitor_states,
    )
