"""Does the chain agree with the runs? A per-state test of the Markov assumption over the abstraction.

Two estimates of a reach probability ``p_x`` exist for a state ``x`` that runs visited: the
chain's value ``p̂_x`` (learned from every transition), and the first-visit frequency
``k_x / n_x`` (guard/outcomes.py), which needs no Markov assumption. Under the assumption both
estimate the same number. When runs come from kinds the abstraction does not tell apart (an
agent that intends the hazard and one that does not, sharing abstract states) they estimate
different numbers, and intersecting their intervals is confidently wrong.

The test, at family-wise level ``γ`` over the ``m`` states tested (each at ``γ/m``), rejects at
``x`` when two intervals, each at level ``γ/2m``, are disjoint:

* the exact (Clopper–Pearson) interval of ``(k_x, n_x)``;
* the chain's: ``p̂_x ± (β_x + z·σ_x)``, ``z`` the normal quantile at ``1 − γ/4m``. ``σ_x²`` is
  the delta-method variance of the reach probability, ``Σ_i N_xi² · V_i / n_i`` with ``N`` the
  learned chain's fundamental matrix ``(I − Q̂)⁻¹``, ``V_i = Var_{P̂_i}(p̂)`` the variance of the
  successors' values under row ``i`` and ``n_i`` its departures (reach probabilities move by
  ``Σ_j N_xi·x_j`` per unit of ``P_ij``). Product states that share a chain row share its
  estimate: their terms are correlated, so each is multiplied by the number of product states
  of that chain state (Cauchy–Schwarz: an upper bound). ``β_x = (N·b)_x`` bounds the shift
  smoothing adds (``b_i = ½‖P̂_i − n_i·/n_i‖₁``, as guard/pac/).

Under the assumption each interval misses with probability at most ``γ/2m`` (the second
asymptotically), so a false rejection anywhere has probability at most ``γ`` whatever the
dependence between the two. A rejected state's value becomes the runs' first-visit frequency
and it is marked "(runs differ)"; no interval depends on the test (a visited state's interval is
the runs' own whatever the test says: below its power the chain's cannot be trusted either,
docs/intervals.md). States visited by fewer than :data:`MIN_RUNS` runs, and
all but the :data:`MAX_TESTED` most visited, are not tested. σ and β come from guard/pac/_spread.py;
past its ``DENSE_STATES`` transient states ``N`` is not formed: ``σ_x² ≤ (N·1)_x · (N·w)_x``
(``N_xi`` is at most the expected steps from ``x``), two sparse solves, a wider chain interval and so
a more cautious test.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.stats import norm

from .chain import LearnedDTMC
from .intervals import clopper_pearson
from .outcomes import OutcomeCounts
from .pac import chain_spread

__all__ = ["chain_spread"]  # names other modules import through this one

# The test's family-wise level. A false flag costs only width (the direct interval holds anyway);
# a missed one costs coverage. On the known Markov chains of bench/_coverage.py it flagged no state
# in 500 learnings; on the two-kinds chain a lower level left coverage under 1 − δ at 200 runs.
MARKOV_LEVEL = 0.5
MIN_RUNS = 10
MAX_TESTED = 2000


@dataclass(frozen=True)
class MarkovTest:
    """Per reach property, the states where the chain and the runs disagree (a bool per state)."""

    level: float  # family-wise γ
    tested: int  # m: (state, property) pairs tested
    mismatch: list[np.ndarray]


def markov_test(dtmc: LearnedDTMC, values: Sequence[np.ndarray], outcomes: Sequence[OutcomeCounts],
                level: float) -> MarkovTest:
    """Test each reach property's states (``values``: the chain's own, before shrinking)."""
    transient = ~dtmc.absorbing
    candidates = [np.flatnonzero(transient & (o.runs >= MIN_RUNS)) for o in outcomes]
    tested = sum(len(c) for c in candidates)
    if tested > MAX_TESTED:  # the most visited states, over all properties
        cut = np.sort(np.concatenate([o.runs[c] for o, c in zip(outcomes, candidates)]))[-MAX_TESTED]
        candidates = [c[o.runs[c] >= cut][:MAX_TESTED] for o, c in zip(outcomes, candidates)]
        tested = sum(len(c) for c in candidates)
    mismatch = [np.zeros(dtmc.size, dtype=bool) for _ in outcomes]
    if tested == 0:
        return MarkovTest(level, 0, mismatch)
    each = level / (2 * tested)
    z = float(norm.ppf(1 - each / 2))
    for t, (o, states) in enumerate(zip(outcomes, candidates)):
        if not len(states):
            continue
        sigma, beta = chain_spread(dtmc, values[t], states)
        low, high = clopper_pearson(o.reached[states], o.runs[states], each)
        centre = values[t][states]
        radius = beta + z * sigma
        mismatch[t][states] = (high < centre - radius) | (low > centre + radius)
    return MarkovTest(level, tested, mismatch)


def reaching(matrix: sp.csr_matrix, targets: np.ndarray) -> np.ndarray:
    """Per state, whether it reaches one of ``targets`` (a bool per state) with positive probability."""
    graph = sp.csr_matrix(matrix, copy=True)
    graph.data = np.ones(len(graph.data))
    out = targets.copy()
    frontier = targets.copy()
    while frontier.any():
        found = (graph @ frontier.astype(float)) > 0  # the predecessors of the frontier
        frontier = found & ~out
        out |= found
    return out
