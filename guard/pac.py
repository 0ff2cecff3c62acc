"""PAC reports: the paper's sample-size bound, a tighter per-state bound, and an empirical-Bernstein one.

The empirical-Bernstein bound (:func:`empirical_bound`) is the tighter one with each state's
radius from the spread of the true risks over its successors (docs/method.md derives it).

**The paper's bound** (Pro2Guard Algorithm 1 line 11; Bazille et al., CAV 2020). For a
state p with n_p observed departures, the learned chain is (ε, δ)-PAC-correct once, for
every p,

    n_p ≥ (1.1·B)² · H*(p),   H*(p) = max_q 2/ε² · log(2/δ') · [1/4 − (|1/2 − n_pq/n_p| − 2ε/3)²]

with δ' = δ/|S| (a union bound over states) and B = ‖(I − Q)⁻¹‖∞ the amplification
factor: the largest expected number of steps before absorption, Q the transient part
of the learned chain. The maximum over successors q is taken outside the bracket, as
in the paper's appendix (H* = max_t H), which is the sound reading of line 11.

**The tighter bound** (:func:`tight_bound`), with the same meaning: with probability at
least 1 − δ, every state's learned probability of reaching ``unsafe`` is within ε of
the true chain's. It works on the *jump chain* (transient self-loops removed, rows
rescaled: reach probabilities are unchanged, and a state's departures to other states
are i.i.d. draws from its rescaled row). Let x be the true reach probabilities and x̂
the learned ones; both are 1 on unsafe and 0 on ``end``, and on the transient states,
exactly,

    x̂ − x = (I − Q̂)⁻¹ · e,   e_i = Σ_j (P̂_ij − P_ij) · x_j

(subtract x = P·x from x̂ = P̂·x̂; Q̂ is the learned jump chain on the transient states,
so (I − Q̂)⁻¹ ≥ 0 is known). Split e_i at the empirical row p̃_ij = n_ij/n_i:

* Σ_j (p̃_ij − P_ij) x_j is the mean of x over the n_i observed successors of i minus
  its expectation x_i: x is fixed (the true chain's) and each term lies in [0, 1], so
  Hoeffding bounds it by h_i = √(log(2/δ')/(2·n_i)), and Bernstein (variance at most
  x_i(1 − x_i)) by (L/3 + √(L²/9 + 2·n_i·L·σ²))/n_i, L = log(2/δ'); the smaller is used;
* Σ_j (P̂_ij − p̃_ij) x_j, the smoothing's shift, is at most b_i = ½‖P̂_i − p̃_i‖₁
  (both rows sum to 1 and x ∈ [0, 1]); it is known exactly.

With a union bound over the states (δ' = δ/|S|, as the paper), with probability ≥ 1 − δ
every |e_i| ≤ r_i = min(1, sampling + b_i), hence, per state,

    |x̂_i − x_i| ≤ ε̂_i = min(1, ((I − Q̂)⁻¹ r)_i).

σ² is unknown, but on the same event x ∈ x̂ ± ε̂: starting from σ² ≤ 1/4, each round
uses the largest x(1 − x) the previous bound allows (every round's bound is valid).

The risk of a run from its first state — the paper's Definition 4, P(φ) of the chain —
is bounded by Σ_i μ̂_i ε̂_i plus the sampling error of the learned initial distribution μ̂
over the runs (one more Hoeffding/Bernstein radius: ``end`` counts in |S| but has no
estimated row, so δ' covers it). Like the paper, the departure counts are taken as
given. A bound is met when it is ≤ ε. Otherwise :attr:`TightPAC.runs_factor` says how
many times the runs learned from would meet it if every state's visits grew in
proportion (sampling radii fall as 1/√m or 1/m, the shift as 1/m), and ``limiting``
names the states that carry most of the bound: more runs through them is what helps.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .learning import LearnedDTMC
from .results import PACReport, StatePAC, TightPAC, TightStatePAC

__all__ = ["EMPIRICAL_SHARE", "StatePAC", "PACReport", "TightStatePAC", "TightPAC", "amplification_factor",
           "empirical_bound", "pac_report", "solve_nonnegative", "tight_bound"]


def amplification_factor(dtmc: LearnedDTMC) -> float:
    """B = max expected steps to absorption over transient states (∞ if some never absorb).

    Solves (I − Q) t = 1 by BiCGSTAB (milliseconds where a sparse LU of an agent-shaped
    chain takes minutes at 10⁴ states), accepts it only if the residual is small, and
    falls back to a direct solve otherwise.
    """
    transient = np.flatnonzero(~dtmc.absorbing)
    if transient.size == 0:
        return 1.0
    steps = solve_nonnegative(_system(dtmc, transient), np.ones(transient.size))
    if steps is None:
        return math.inf
    return float(max(1.0, steps.max()))


def _smoothing_shift(dtmc: LearnedDTMC) -> np.ndarray:
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


def _system(dtmc: LearnedDTMC, transient: np.ndarray) -> sp.csr_matrix:
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


def pac_report(dtmc: LearnedDTMC, *, epsilon: float, delta: float) -> PACReport:
    """Visits per state against the visits an (ε, δ) guarantee needs."""
    n_states = dtmc.size
    delta_prime = delta / n_states
    amplification = amplification_factor(dtmc)
    base = 2.0 / epsilon**2 * math.log(2.0 / delta_prime)
    factor = (1.1 * amplification) ** 2
    counts = dtmc.counts
    absorbing = dtmc.absorbing
    out = []
    for i in range(n_states):
        if absorbing[i]:
            continue  # absorbing rows are fixed by construction, not estimated
        row = counts.data[counts.indptr[i]:counts.indptr[i + 1]]
        visits = int(row.sum())
        if visits == 0:
            bracket = 0.25
        else:
            gaps = np.abs(0.5 - row / visits) - 2.0 * epsilon / 3.0
            bracket = float(np.max(np.clip(0.25 - gaps**2, 0.0, None)))
        needed = factor * base * bracket
        required = math.ceil(needed) if math.isfinite(needed) else None
        satisfied = math.isfinite(needed) and visits >= needed and visits > 0
        out.append(StatePAC(state=i, visits=visits, required=required, satisfied=satisfied))
    return PACReport(epsilon=epsilon, delta=delta, delta_per_state=delta_prime,
                     amplification=amplification, states=out,
                     tight=tight_bound(dtmc, epsilon=epsilon, delta_per_state=delta_prime),
                     empirical=empirical_bound(dtmc, epsilon=epsilon, delta=delta))


def tight_bound(dtmc: LearnedDTMC, *, epsilon: float, delta_per_state: float, limiting: int = 5,
                rounds: int = 8) -> TightPAC:
    """The per-state bound ε̂ = (I − Q̂)⁻¹ r on |learned − true| P(F unsafe), and the bound on
    the risk of a run from its first state (module docstring).

    ``rounds`` caps the Bernstein refinement: each round is one sparse solve, and every
    round's bound is valid on its own (the intervals only shrink).
    """
    transient = np.flatnonzero(~dtmc.absorbing)
    if transient.size == 0:
        return TightPAC(True, 0.0, 1.0, [], [], 0.0, True, 1.0, [])
    departures = np.asarray(dtmc.counts.sum(axis=1)).ravel()[transient]  # visits, for the report
    dtmc = _jump_chain(dtmc)
    matrix = dtmc.matrix
    n = np.asarray(dtmc.counts.sum(axis=1)).ravel()[transient]  # departures to another state
    seen = n > 0
    n1 = np.maximum(n, 1)
    log_term = math.log(2.0 / delta_per_state)
    hoeffding = np.where(seen, np.sqrt(log_term / (2.0 * n1)), np.inf)
    shift = _smoothing_shift(dtmc)[transient]  # b: half the L1 distance of the smoothed row to the empirical one
    system = _system(dtmc, transient)
    learned = solve_nonnegative(system, np.asarray(matrix[transient][:, np.flatnonzero(dtmc.unsafe)].sum(axis=1)).ravel())
    if learned is None:  # some state never absorbs: no finite bound
        states = [TightStatePAC(int(i), math.inf, None, False) for i in transient.tolist()]
        return TightPAC(False, math.inf, None, [], states)

    variance = np.full(transient.size, 0.25)

    def radius_of(bound: np.ndarray) -> np.ndarray:
        nonlocal variance  # the last round's, for the projection
        variance = _variance_bound(learned - bound, learned + bound)
        radius: np.ndarray = np.minimum(1.0, np.minimum(hoeffding, _bernstein(n1, log_term, variance)) + shift)
        radius[~seen] = 1.0
        return radius

    bound, radius = _narrow(system, radius_of, transient.size, rounds)
    projection = _projection(system, seen, n1, hoeffding, variance, shift,
                             np.diff(matrix.indptr)[transient] * dtmc.alpha, log_term)
    return _tight_report(dtmc, transient, departures, system, learned, bound, radius, projection, epsilon=epsilon,
                         log_term=log_term, limiting=limiting, rounds=rounds)


def _tight_report(dtmc: LearnedDTMC, transient: np.ndarray, departures: np.ndarray, system: sp.csr_matrix,
                  learned: np.ndarray, bound: np.ndarray, radius: np.ndarray,
                  projection: tuple[np.ndarray, np.ndarray] | None, *, epsilon: float, log_term: float,
                  limiting: int, rounds: int,
                  factors: tuple[float | None, float | None] | None = None) -> TightPAC:
    """From per-state bounds ε̂ (and their radii r, and the (A, C) forecast): the runs factor, the limiting
    states, and the bound from the first state (shared by the tighter and the empirical-Bernstein bounds)."""
    worst = float(bound.max(initial=0.0))
    factor = 1.0 if worst <= epsilon else None if projection is None else \
        _finite(max(1.0, float(np.max(_growth(projection[0], projection[1], epsilon)))))
    if factors is not None:  # forecast by the caller
        factor = 1.0 if worst <= epsilon else factors[0]
    states = [TightStatePAC(int(i), float(bound[k]),
                            None if factor is None else math.ceil(factor * departures[k] - 1e-9),
                            bool(bound[k] <= epsilon)) for k, i in enumerate(transient.tolist())]
    pick = np.zeros(transient.size)
    pick[int(np.argmax(bound))] = 1.0

    # the risk of a run from its first state (the paper's Definition 4): the learned initial
    # distribution μ̂ weighs the states' bounds, and its own sampling error over the runs is
    # one more Hoeffding/Bernstein radius (a spare δ': `end` is in |S| but has no estimated row)
    position = {int(i): k for k, i in enumerate(transient.tolist())}
    runs = sum(dtmc.initial.values())
    mu = np.zeros(transient.size)
    risk = 0.0
    for i, count in dtmc.initial.items():
        if int(i) in position:
            mu[position[int(i)]] += count / runs
            risk += count / runs * learned[position[int(i)]]
        elif dtmc.unsafe[int(i)]:
            risk += count / runs
    carried = float(mu @ bound)
    start_hoeffding = math.sqrt(log_term / (2.0 * runs)) if runs else math.inf
    start_radius, start_variance = start_hoeffding, 0.25
    for _ in range(rounds):
        start_radius = min(start_hoeffding, float(_bernstein(np.array([max(runs, 1)]), log_term,
                                                             np.array([start_variance]))[0]))
        start_variance = float(_variance_bound(np.array([risk - carried - start_radius]),
                                               np.array([risk + carried + start_radius]))[0])
    initial = min(1.0, carried + start_radius)
    initial_factor: float | None = 1.0
    if initial > epsilon and factors is not None:
        initial_factor = factors[1]
    elif initial > epsilon:
        initial_factor = None if projection is None or not runs else _finite(max(1.0, float(_growth(
            np.array([mu @ projection[0] + start_hoeffding]), np.array([mu @ projection[1]]), epsilon)[0])))
    return TightPAC(worst <= epsilon, worst, factor, _limiting(system, pick, radius, transient, limiting), states,
                    initial, initial <= epsilon, initial_factor, _limiting(system, mu, radius, transient, limiting))


EMPIRICAL_SHARE = 0.8
"""The share of δ the empirical-Bernstein bound gives its mean deviations; the rest bounds the variances."""


def empirical_bound(dtmc: LearnedDTMC, *, epsilon: float, delta: float, limiting: int = 5,
                    rounds: int = 12) -> TightPAC:
    """The empirical-Bernstein bound ε̂ = (I − Q̂)⁻¹ r on |learned − true| P(F unsafe), per state and from
    the first state (docs/method.md, "The empirical-Bernstein bound").

    As :func:`tight_bound`, with each radius r_i from the spread of the true risks over state i's
    *successors* rather than from x_i(1 − x_i): Bernstein with a variance bounded by Maurer and Pontil's
    empirical-variance inequality. δ is split once: ``EMPIRICAL_SHARE``·δ over
    the m transient states' mean deviations and the start's, the rest over their variances.
    """
    transient = np.flatnonzero(~dtmc.absorbing)
    m = transient.size
    if m == 0:
        return TightPAC(True, 0.0, 1.0, [], [], 0.0, True, 1.0, [])
    departures = np.asarray(dtmc.counts.sum(axis=1)).ravel()[transient]
    jump = _jump_chain(dtmc)
    rows = jump.counts.tocsr()[transient]
    n = np.asarray(rows.sum(axis=1)).ravel()  # departures to another state
    seen = n > 0
    n1 = np.maximum(n, 1)
    shift = _smoothing_shift(jump)[transient]
    system = _system(jump, transient)
    unsafe = np.flatnonzero(jump.unsafe)
    learned = solve_nonnegative(system, np.asarray(jump.matrix[transient][:, unsafe].sum(axis=1)).ravel())
    if learned is None:
        return TightPAC(False, math.inf, None, [], [TightStatePAC(int(i), math.inf, None, False)
                                                    for i in transient.tolist()])
    log_mean = math.log(2.0 * (m + 1) / (EMPIRICAL_SHARE * delta))  # m states and the start, two-sided
    log_var = math.log(m / ((1.0 - EMPIRICAL_SHARE) * delta))  # m upper bounds on a standard deviation
    values = np.zeros(jump.size)
    values[transient], values[unsafe] = learned, 1.0  # the learned risk of every state (end: 0)
    row = np.repeat(np.arange(m), np.diff(rows.indptr))
    share = rows.data / n1[row]  # the empirical jump row p̃_i
    successor = rows.indices
    mean = np.bincount(row, share * values[successor], minlength=m)
    spread = np.sqrt(np.maximum(np.bincount(row, share * (values[successor] - mean[row]) ** 2, minlength=m), 0.0))
    k_alpha = np.diff(jump.matrix.indptr)[transient] * jump.alpha

    def widths(scale: float, rounds: int) -> tuple[np.ndarray, np.ndarray]:
        """ε̂ and r with every state's departures ``scale`` times as many (1: as learned; more: the
        forecast, the successors' spread kept, the smoothing shift shrunk as 1/scale)."""
        count = n1 * scale
        known = seen | (scale > 1)  # a state not seen leaving counts as one departure in a forecast
        moved = shift if scale == 1 else shift * (n1 + k_alpha) / count
        unbiased = np.sqrt(count / np.maximum(count - 1, 1))

        def radius_of(bound: np.ndarray) -> np.ndarray:
            width = np.zeros(jump.size)
            width[transient] = bound
            # the sample deviation of the true risks over the successors: that of the learned ones, plus at
            # most the successors' bounds (a standard deviation is a seminorm); Maurer–Pontil on top
            box = np.sqrt(np.bincount(row, share * width[successor] ** 2, minlength=m))
            upper = unbiased * (spread + box) + np.sqrt(2.0 * log_var / np.maximum(count - 1, 1))
            sigma = np.minimum(np.where(seen & (count >= 2), upper, 0.5), 0.5)
            sigma = np.minimum(sigma, np.sqrt(_variance_bound(learned - bound, learned + bound)))
            bernstein = (log_mean / 3.0 + np.sqrt(log_mean**2 / 9.0 + 2.0 * count * log_mean * sigma**2)) / count
            hoeffding = np.sqrt(log_mean / (2.0 * count))  # both bound one moment generating function
            radius: np.ndarray = np.where(known, np.minimum(1.0, np.minimum(bernstein, hoeffding) + moved), 1.0)
            return radius

        return _narrow(system, radius_of, m, rounds)

    bound, radius = widths(1.0, rounds)
    runs = sum(jump.initial.values())
    position = {int(i): k for k, i in enumerate(transient.tolist())}
    mu = np.zeros(m)
    for i, count in jump.initial.items():
        if int(i) in position:
            mu[position[int(i)]] += count / max(runs, 1)

    seen_widths: dict[float, np.ndarray] = {}

    def forecast(scale: float) -> np.ndarray:  # a few rounds: a forecast, not a guarantee
        if scale not in seen_widths:
            seen_widths[scale] = widths(scale, 4)[0]
        return seen_widths[scale]

    def start(scale: float) -> float:  # the start bound at a forecast, its own radius by Hoeffding
        return float(mu @ forecast(scale)) + math.sqrt(log_mean / (2.0 * max(runs, 1) * scale))

    factors = (_smallest_scale(lambda k: float(forecast(k).max(initial=0.0)) <= epsilon),
               _smallest_scale(lambda k: start(k) <= epsilon) if runs else None)
    return _tight_report(jump, transient, departures, system, learned, bound, radius, None, epsilon=epsilon,
                         log_term=log_mean, limiting=limiting, rounds=rounds, factors=factors)


def _narrow(system: sp.csr_matrix, radius_of: Callable[[np.ndarray], np.ndarray], m: int,
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


def _smallest_scale(met: Callable[[float], bool], top: float = 1e8) -> float | None:
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


def _jump_chain(dtmc: LearnedDTMC) -> LearnedDTMC:
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


def _bernstein(n: np.ndarray, log_term: float, variance: np.ndarray) -> np.ndarray:
    """Bernstein's radius for a mean of n terms in [0, 1] of variance at most ``variance``, at δ'."""
    radius: np.ndarray = (log_term / 3 + np.sqrt(log_term**2 / 9 + 2 * n * log_term * variance)) / n
    return radius


def _variance_bound(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max v(1 − v) over v in [lo, hi] ∩ [0, 1]: a bound on the variance of terms in [0, 1] of mean v."""
    lo, hi = np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)
    return np.where((lo <= 0.5) & (hi >= 0.5), 0.25, np.maximum(lo * (1 - lo), hi * (1 - hi)))


def _limiting(system: sp.csr_matrix, weights: np.ndarray, radius: np.ndarray, transient: np.ndarray,
              count: int) -> list[int]:
    """The states carrying most of weights·(I − Q̂)⁻¹·r (one transposed solve), largest first."""
    if not weights.any():
        return []
    row = solve_nonnegative(system.T.tocsr(), weights)
    if row is None:
        return []
    share = row * radius
    return [int(transient[k]) for k in np.argsort(-share, kind="stable")[:count] if share[k] > 0]


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _growth(big_a: np.ndarray, big_c: np.ndarray, epsilon: float) -> np.ndarray:
    """The m with A/√m + C/m = ε, per entry: C·u² + A·u = ε for u = 1/√m, in the form free of
    cancellation, u = 2ε / (A + √(A² + 4Cε)) (C = 0 included)."""
    with np.errstate(divide="ignore"):
        u = 2 * epsilon / (big_a + np.sqrt(big_a**2 + 4 * big_c * epsilon))
        return 1.0 / u**2


def _projection(system: sp.csr_matrix, seen: np.ndarray, n: np.ndarray, hoeffding: np.ndarray,
                variance: np.ndarray, shift: np.ndarray, k_alpha: np.ndarray, log_term: float
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """(A, C) with ε̂(m) ≤ A/√m + C/m per state, if every state's visits grew m-fold (chain and
    variances as now): each radius is at most a/√m + c/m (Hoeffding: a = h, c = 0; Bernstein:
    a = √(2Lσ²/n), c = 2L/(3n); the smoothing shift b(m) ≤ b·(n + kα)/(n·m)), and
    A = (I − Q̂)⁻¹a, C = (I − Q̂)⁻¹c. A state not yet seen leaving counts as one departure here (a
    forecast: more runs will show it leave); ``None`` only if a solve fails."""
    hoeffding = np.where(seen, hoeffding, np.sqrt(log_term / 2.0))  # n = 1 where unseen (n is already ≥ 1)
    a_b, c_b = np.sqrt(2 * log_term * variance / n), 2 * log_term / (3 * n)
    use_b = a_b + c_b < hoeffding  # either form bounds the radius; take the one smaller now
    a = np.where(use_b, a_b, hoeffding)
    c = np.where(use_b, c_b, 0.0) + shift * (n + k_alpha) / n
    big_a, big_c = solve_nonnegative(system, a), solve_nonnegative(system, c)
    return None if big_a is None or big_c is None else (big_a, big_c)
