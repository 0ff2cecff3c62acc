"""The delta-method spread of a learned chain's reach probabilities (the Markov test's and the runs forecast's).

σ_x² = Σ_i N_xi² · V_i / n_i with ``N`` the learned chain's fundamental matrix ``(I − Q̂)⁻¹``, ``V_i`` the
variance of the successors' values under row ``i`` and ``n_i`` its departures: reach probabilities move by
``Σ_j N_xi·x_j`` per unit of ``P_ij``. Product states that share a chain row share its estimate: their terms
are correlated, so each is multiplied by the number of product states of that chain state (Cauchy–Schwarz:
an upper bound). ``β_x = (N·b)_x`` bounds the shift smoothing adds (``b_i = ½‖P̂_i − n_i·/n_i‖₁``). Past
:data:`DENSE_STATES` transient states ``N`` is not formed: ``σ_x² ≤ (N·1)_x · (N·w)_x`` (``N_xi`` is at most
the expected steps from ``x``), two sparse solves.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..chain import LearnedDTMC, visits
from ._solve import solve_nonnegative

DENSE_STATES = 2000  # up to this many transient states the fundamental matrix is inverted whole


def chain_spread(dtmc: LearnedDTMC, values: np.ndarray, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``states``: the delta-method standard deviation σ_x of the chain's value and the
    smoothing shift bound β_x (module docstring)."""
    n_states = dtmc.size
    matrix = dtmc.matrix.tocsr()
    transient = ~dtmc.absorbing
    index = np.flatnonzero(transient)
    position = np.full(n_states, -1, dtype=np.int64)
    position[index] = np.arange(len(index))
    rows = np.repeat(np.arange(n_states), np.diff(matrix.indptr))
    cols = matrix.indices
    p = matrix.data
    departures = visits(dtmc).astype(float)
    # V_i: variance of the successors' values under the learned row
    mean = np.bincount(rows, weights=p * values[cols], minlength=n_states)
    second = np.bincount(rows, weights=p * values[cols] ** 2, minlength=n_states)
    variance = np.maximum(second - mean**2, 0.0)
    counts = dtmc.counts.tocsr().data if dtmc.counts.nnz == len(p) else None
    empirical = p if counts is None else counts / np.maximum(departures[rows], 1.0)
    seen = departures[rows] > 0
    shift = 0.5 * np.bincount(rows, weights=np.where(seen, np.abs(p - empirical), 0.0), minlength=n_states)
    shift[departures == 0] = 1.0  # a row never observed: nothing bounds how far it is off
    # product states sharing one chain row carry correlated terms: weigh each by their number
    share = np.ones(n_states)
    if dtmc.monitor_states is not None:
        chain_of = np.asarray(dtmc.states)
        _, inverse, sizes = np.unique(chain_of, return_inverse=True, return_counts=True)
        share = sizes[inverse.ravel()].astype(float)
    weight = share * variance / np.maximum(departures, 1.0)
    keep = transient[rows] & transient[cols]
    q = sp.csr_matrix((p[keep], (position[rows[keep]], position[cols[keep]])), shape=(len(index), len(index)))
    system = (sp.identity(len(index), format="csr") - q).tocsr()
    local = position[states]
    none = np.full(len(states), np.inf)
    beta_all = solve_nonnegative(system, shift[index])
    if beta_all is None:  # some state never absorbs: nothing bounds the chain's error, test nothing
        return none, none
    beta = beta_all[local]
    if len(index) <= DENSE_STATES:  # the fundamental matrix itself
        try:
            fundamental = np.linalg.inv(system.toarray())
        except np.linalg.LinAlgError:
            return none, none
        sigma = np.sqrt(np.maximum((fundamental[local] ** 2) @ weight[index], 0.0))
        return sigma, beta
    # larger chains: N_xi ≤ Σ_i N_xi (expected steps from x), so Σ_i N_xi²·w_i ≤ (N·1)_x · (N·w)_x — two solves
    steps = solve_nonnegative(system, np.ones(len(index)))
    spread = solve_nonnegative(system, weight[index])
    if steps is None or spread is None:
        return none, none
    return np.sqrt(steps[local] * spread[local]), beta
