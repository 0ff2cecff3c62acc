"""The linear algebra the PAC bounds share: the jump chain, its fundamental system and non-negative
solves, the smoothing shift, one narrowing loop and the search for a runs factor."""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ..learning import LearnedDTMC


def smoothing_shift(dtmc: LearnedDTMC) -> np.ndarray:
    """Per state, ½‖P̂_i − p̃_i‖₁: how far smoothing moved the row from the empirical one (0 unobserved)."""
    matrix, counts = dtmc.matrix, dtmc.counts
    n = dtmc.size
    visits = np.asarray(counts.sum(axis=1)).ravel()
    rows = np.repeat(np.arange(n), np.diff(matrix.indptr))
    if np.array_equal(matrix.indptr, counts.indptr) and np.array_equal(matrix.indices, counts.indices):
        empirical = counts.data / np.maximum(visits[rows], 1)  # the same sparsity, as learn_dtmc builds it
    else:  # a hand-built chain: read the counts at the matrix's entries
        empirical = np.asarray(counts[rows, matrix.indices]).ravel() / np.maximum(visits[rows], 1)
    distance = np.bincount(rows, weights=np.abs(matrix.data - empirical), minlength=n)
    # empirical mass outside the matrix's support (none in a learned chain) is distance too
    outside = 1.0 - np.bincount(rows, weights=empirical, minlength=n)
    return np.where(visits > 0, 0.5 * (distance + np.maximum(outside, 0.0)), 0.0)


def system_of(dtmc: LearnedDTMC, transient: np.ndarray) -> sp.csr_matrix:
    """I − Q, Q the learned chain restricted to its transient (non-absorbing) states."""
    q = dtmc.matrix[transient][:, transient]
    system: sp.csr_matrix = (sp.identity(transient.size, format="csr") - q.tocsr()).tocsr()
    return system


def solve_nonnegative(system: sp.csr_matrix, rhs: np.ndarray) -> np.ndarray | None:
    """x with (I − Q) x = rhs ≥ 0, i.e. x = (I − Q)⁻¹ rhs; ``None`` if I − Q is singular
    (some states never absorb) or the solution is not a finite non-negative vector."""
    solution: np.ndarray | None = None
    with warnings.catch_warnings():
        # a singular system means some states never absorb (B = ∞), which the checks below
        # report; scipy's warnings must not decide it (they raise under -W error)
        warnings.simplefilter("ignore")
        try:
            guess, info = spla.bicgstab(system, rhs, rtol=1e-10, atol=0.0, maxiter=20 * len(rhs) + 1000)
            if info == 0 and np.all(np.isfinite(guess)) and \
                    np.linalg.norm(system @ guess - rhs, np.inf) <= 1e-7 * max(1.0, float(np.abs(guess).max())):
                solution = guess
        except (ArithmeticError, ValueError):
            solution = None
        if solution is None:  # bicgstab broke down (it does on transposed systems of action-memory chains)
            solution = _gmres(system, rhs)
        if solution is None:  # a direct solve: exact but, on a chain with many successors per state, slow
            try:
                solution = spla.spsolve(system.tocsc(), rhs, permc_spec="MMD_AT_PLUS_A")
            except RuntimeError:
                return None
    solution = np.atleast_1d(solution)
    if not np.all(np.isfinite(solution)) or np.any(solution < -1e-9):
        return None
    nonnegative: np.ndarray = np.maximum(solution, 0.0)
    return nonnegative


def _gmres(system: sp.csr_matrix, rhs: np.ndarray) -> np.ndarray | None:
    """GMRES's solution when it meets the same residual test as bicgstab's, else ``None``."""
    try:
        guess, info = spla.gmres(system, rhs, rtol=1e-12, atol=0.0, restart=100, maxiter=50)
    except (ArithmeticError, ValueError):
        return None
    if info == 0 and np.all(np.isfinite(guess)) and \
            np.linalg.norm(system @ guess - rhs, np.inf) <= 1e-7 * max(1.0, float(np.abs(guess).max())):
        return np.asarray(guess)
    return None



def narrow(system: sp.csr_matrix, radius_of: Callable[[np.ndarray], np.ndarray], m: int,
            rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """ε̂ from 1 down: each round solves (I − Q̂)ε̂' = r(ε̂) and keeps min(ε̂, ε̂'); every round's bound
    is valid on its own, so stopping early (``rounds``, no change, a failed solve) only costs tightness.
    Returns ε̂ and the last radius."""
    bound, radius = np.ones(m), np.ones(m)
    for _ in range(rounds):
        radius = radius_of(bound)
        step = solve_nonnegative(system, radius)
        if step is None:
            break
        narrower = np.minimum(bound, step)
        done = float(np.max(bound - narrower, initial=0.0)) < 1e-9
        bound = narrower
        if done:
            break
    return bound, radius


def smallest_scale(met: Callable[[float], bool], top: float = 1e8) -> float | None:
    """The smallest k ≥ 1 (to 3 %) with ``met(k)``, for a ``met`` that only turns true as k grows; None past ``top``.
    The probes are powers of 1.03, so two searches share most of them."""
    if met(1.0):
        return 1.0
    low, high = 0, math.ceil(math.log(top) / math.log(1.03))
    if not met(1.03**high):
        return None
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if met(1.03**mid) else (mid, high)
    return float(1.03**high)


def jump_chain(dtmc: LearnedDTMC) -> LearnedDTMC:
    """The chain seen only when it changes state: transient self-loops removed, rows rescaled
    (P'_ij = P_ij / (1 − P_ii)), self-loop counts dropped. Reach probabilities are the same,
    and a state's departures to *other* states are i.i.d. draws from P'_i, so its sampling
    error is bounded from those alone, and (I − Q̂')⁻¹ counts changes of state, not steps."""
    matrix, counts = dtmc.matrix.tocsr(), dtmc.counts.tocsr()
    transient = ~dtmc.absorbing

    def drop_loops(m: sp.csr_matrix) -> tuple[sp.csr_matrix, np.ndarray]:
        rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
        loop = (rows == m.indices) & transient[rows]
        loops = np.bincount(rows[loop], weights=m.data[loop], minlength=m.shape[0])
        keep = ~loop
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows[keep], minlength=m.shape[0]))])
        return sp.csr_matrix((m.data[keep], m.indices[keep], indptr), shape=m.shape), loops

    jumps, stay = drop_loops(matrix)
    jump_counts, _ = drop_loops(counts)
    scale = np.where(stay < 1.0, 1.0 / np.maximum(1.0 - stay, 1e-300), 1.0)
    jumps = sp.csr_matrix((jumps.data * np.repeat(scale, np.diff(jumps.indptr)), jumps.indices, jumps.indptr),
                          shape=jumps.shape)
    return replace(dtmc, matrix=jumps, counts=jump_counts)


def start_weights(dtmc: LearnedDTMC, transient: np.ndarray) -> tuple[int, np.ndarray]:
    """The runs, and the share of them that start in each transient state (in ``transient``'s order)."""
    runs = sum(dtmc.initial.values())
    position = {int(i): k for k, i in enumerate(transient.tolist())}
    mu = np.zeros(transient.size)
    for i, count in dtmc.initial.items():
        if int(i) in position:
            mu[position[int(i)]] += count / max(runs, 1)
    return runs, mu


def bernstein(n: np.ndarray, log_term: float, variance: np.ndarray) -> np.ndarray:
    """Bernstein's radius for a mean of n terms in [0, 1] of variance at most ``variance``, at δ'."""
    radius: np.ndarray = (log_term / 3 + np.sqrt(log_term**2 / 9 + 2 * n * log_term * variance)) / n
    return radius


def variance_bound(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max v(1 − v) over v in [lo, hi] ∩ [0, 1]: a bound on the variance of terms in [0, 1] of mean v."""
    lo, hi = np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)
    return np.where((lo <= 0.5) & (hi >= 0.5), 0.25, np.maximum(lo * (1 - lo), hi * (1 - hi)))


def limiting_states(system: sp.csr_matrix, weights: np.ndarray, radius: np.ndarray, transient: np.ndarray,
              count: int) -> list[int]:
    """The states carrying most of weights·(I − Q̂)⁻¹·r (one transposed solve), largest first."""
    if not weights.any():
        return []
    row = solve_nonnegative(system.T.tocsr(), weights)
    if row is None:
        return []
    share = row * radius
    return [int(transient[k]) for k in np.argsort(-share, kind="stable")[:count] if share[k] > 0]


def finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def growth(big_a: np.ndarray, big_c: np.ndarray, epsilon: float) -> np.ndarray:
    """The m with A/√m + C/m = ε, per entry: C·u² + A·u = ε for u = 1/√m, in the form free of
    cancellation, u = 2ε / (A + √(A² + 4Cε)) (C = 0 included)."""
    with np.errstate(divide="ignore"):
        u = 2 * epsilon / (big_a + np.sqrt(big_a**2 + 4 * big_c * epsilon))
        return 1.0 / u**2

