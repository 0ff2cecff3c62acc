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

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    import scipy.sparse as sp

from ..errors import MonitorError, StateSpaceTooLargeError, UsageError
from .base import VIOL, Monitor


class Chain(Protocol):
    """What the product reads of a learned chain (``forewarn.guard.learning.LearnedDTMC`` is one).

    States are indexed ``0 … size-1``; the last is ``end``. ``states`` holds each state's
    predicate bit mask (``end``'s is ignored); ``matrix``, ``counts`` and ``pseudo`` share
    one CSR sparsity.
    """

    states: list[int]
    unsafe: np.ndarray  # bool per state
    initial: dict[int, int]
    matrix: sp.csr_matrix
    counts: sp.csr_matrix
    pseudo: sp.csr_matrix | None


@dataclass(frozen=True)
class Product:
    """The reachable product as plain arrays; the last state is the one ``end``.

    ``base[i]`` is the chain state of product state ``i`` (``end`` excluded) and
    ``monitor_states[i]`` its monitors' states (the ``end`` row is all zeros).
    """

    base: np.ndarray
    monitor_states: np.ndarray
    unsafe: np.ndarray
    initial: dict[int, int]
    matrix: sp.csr_matrix
    counts: sp.csr_matrix
    pseudo: sp.csr_matrix | None


def initial_monitor_states(monitors: Sequence[Monitor], bits: int) -> tuple[int, ...]:
    """Monitor states after reading a run's first abstract state."""
    return tuple(m.step(m.initial, bits) for m in monitors)


def advance(monitors: Sequence[Monitor], q: tuple[int, ...], bits: int) -> tuple[int, ...]:
    """Monitor states after reading the next abstract state."""
    return tuple(m.step(qk, bits) for m, qk in zip(monitors, q))


def reachable_product(chain: Chain, monitors: Sequence[Monitor], *,
                      max_states: int | None = 5_000_000) -> Product:
    """The reachable product of ``chain`` with (at least one of) ``monitors``.

    Breadth-first, one layer at a time: monitors step all of a layer's transitions at
    once (:meth:`Monitor.step_array`), and a product state is packed into one integer
    (chain state and monitor states in mixed radix), so the only per-transition Python
    work is one dictionary look-up.

    Raises:
        ProductTooLargeError: more than ``max_states`` reachable product states.
    """
    if not monitors:
        raise UsageError("a product needs at least one monitor")
    import scipy.sparse as sp  # here: a guard that loads a model and decides never needs scipy

    m = len(monitors)
    size = len(chain.states)
    end_c = size - 1
    matrix, counts = chain.matrix, chain.counts
    prepared = [mon.prepare(chain.states[:-1]) for mon in monitors]
    absorbing_chain = chain.unsafe.copy()  # unsafe and end absorb
    absorbing_chain[end_c] = True
    indptr_c = matrix.indptr
    packer = _Packer(monitors, size)

    index: dict[int, int] = {}
    keys: list[int] = []

    def add(new_keys: np.ndarray) -> np.ndarray:
        distinct, inverse = np.unique(new_keys, return_inverse=True)
        found_at = []
        get = index.get
        for key in distinct.tolist():
            found = get(key)
            if found is None:
                found = index[key] = len(keys)
                keys.append(key)
            found_at.append(found)
        out = np.asarray(found_at, dtype=np.int64)[inverse.reshape(-1)]
        if max_states is not None and len(keys) > max_states:
            raise ProductTooLargeError(
                f"the product of the learned chain ({size} states) with monitors "
                f"{[mon.name for mon in monitors]} exceeds the limit of {max_states:,} reachable states "
                "(max_states); lower the monitors' bounds ('within'), coarsen the abstraction, "
                "or resample to a longer period", states=len(keys), limit=max_states)
        return out

    starts = np.arange(end_c, dtype=np.int64)
    q0 = np.column_stack([mon.step_array(np.full(end_c, mon.initial, dtype=np.int64), starts, prep)
                          for mon, prep in zip(monitors, prepared)]) if end_c else np.zeros((0, m), np.int64)
    first = add(packer.pack(starts, q0))
    frontier_keys = np.asarray(keys, dtype=np.int64)
    frontier = np.arange(len(keys), dtype=np.int64)

    edge_src: list[np.ndarray] = []
    edge_dst: list[np.ndarray] = []
    edge_p: list[np.ndarray] = []
    edge_n: list[np.ndarray] = []
    edge_x: list[np.ndarray] = []  # back-off pseudo-counts, when the chain has them
    while frontier.size:
        c, q = packer.unpack(frontier_keys)
        live = ~absorbing_chain[c] & ~(q == VIOL).any(axis=1)
        src, c, q = frontier[live], c[live], q[live]
        if not src.size:
            break
        lengths = indptr_c[c + 1] - indptr_c[c]
        positions = np.repeat(indptr_c[c] - np.cumsum(np.r_[0, lengths[:-1]]), lengths) + np.arange(lengths.sum())
        targets = matrix.indices[positions].astype(np.int64)
        e_q = np.repeat(q, lengths, axis=0)
        inner = targets != end_c
        next_q = np.column_stack([mon.step_array(e_q[inner, k], targets[inner], prep)
                                  for k, (mon, prep) in enumerate(zip(monitors, prepared))])
        before = len(keys)
        dst = np.full(len(targets), -1, dtype=np.int64)  # -1: end, numbered last
        dst[inner] = add(packer.pack(targets[inner], next_q))
        edge_src.append(np.repeat(src, lengths))
        edge_dst.append(dst)
        edge_p.append(matrix.data[positions])
        edge_n.append(counts.data[positions])
        if chain.pseudo is not None:
            edge_x.append(chain.pseudo.data[positions])
        frontier = np.arange(before, len(keys), dtype=np.int64)
        frontier_keys = np.asarray(keys[before:], dtype=np.int64)

    n = len(keys) + 1
    end = n - 1
    base, monitor_states = packer.unpack(np.asarray(keys, dtype=np.int64))
    monitor_states = np.vstack([monitor_states, np.zeros((1, m), dtype=np.int64)])
    violations = monitor_states == VIOL
    violations[end] = False
    unsafe = np.append(chain.unsafe[base], False) | violations.any(axis=1)
    absorbing = np.append(absorbing_chain[base], True) | violations.any(axis=1)
    loops = np.flatnonzero(absorbing)
    src = np.concatenate(edge_src + [loops])
    dst = np.concatenate(edge_dst + [loops])
    dst[dst == -1] = end
    probs = np.concatenate(edge_p + [np.ones(len(loops))])
    cnts = np.concatenate(edge_n + [np.zeros(len(loops))])
    order = np.lexsort((dst, src))
    src, dst, probs, cnts = src[order], dst[order], probs[order], cnts[order]
    pseudo = None
    if chain.pseudo is not None:
        pseudo = np.concatenate(edge_x + [np.zeros(len(loops))])[order]
    row_ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))])
    product_matrix = sp.csr_matrix((probs, dst, row_ptr), shape=(n, n))
    product_counts = sp.csr_matrix((cnts, dst, row_ptr), shape=(n, n))
    product_pseudo = None if pseudo is None else sp.csr_matrix((pseudo, dst, row_ptr.copy()), shape=(n, n))
    initial: dict[int, int] = {}
    for i, runs in chain.initial.items():
        k = int(first[i])
        initial[k] = initial.get(k, 0) + runs
    return Product(base=base, monitor_states=monitor_states, unsafe=unsafe, initial=initial,
                   matrix=product_matrix, counts=product_counts, pseudo=product_pseudo)


class _Packer:
    """(chain state, monitor states) ↔ one int64, in mixed radix (monitor state + 1 ≥ 0)."""

    def __init__(self, monitors: Sequence[Monitor], chain_size: int) -> None:
        radices = []
        for mon in monitors:
            bound = mon.state_bound
            if bound is None:
                raise MonitorError(f"monitor {mon.name!r} does not state a bound on its states (state_bound)")
            radices.append(bound + 1)
        self.span = math.prod(radices)  # Python ints: numpy's product would wrap past 2**63 unnoticed
        if self.span * chain_size >= 2**62:
            raise ProductTooLargeError("the monitors' state spaces are too large to combine "
                                       f"({self.span:,} monitor-state combinations times {chain_size:,} chain "
                                       "states pass 2**62); lower the monitors' bounds ('within')",
                                       states=self.span * chain_size, limit=2**62)
        self.radices = np.array(radices, dtype=np.int64)
        self.multipliers = np.concatenate([[1], np.cumprod(self.radices)[:-1]]).astype(np.int64)

    def pack(self, chain_states: np.ndarray, q: np.ndarray) -> np.ndarray:
        packed: np.ndarray = chain_states * self.span + ((q + 1) * self.multipliers).sum(axis=1)
        return packed

    def unpack(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        code = keys % self.span
        q = (code[:, None] // self.multipliers) % self.radices - 1
        return keys // self.span, q


class ProductTooLargeError(StateSpaceTooLargeError):
    """The reachable product would not fit the configured limit (a :class:`StateSpaceTooLargeError`)."""
