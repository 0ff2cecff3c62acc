"""The tighter per-state bound on the learned chain's risks.

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

import numpy as np
import scipy.sparse as sp

from ..learning import LearnedDTMC
from ..results import TightPAC, TightStatePAC
from ._solve import (
    bernstein,
    finite,
    growth,
    jump_chain,
    limiting_states,
    narrow,
    smoothing_shift,
    solve_nonnegative,
    system_of,
    variance_bound,
)
from .registry import BoundInputs, PACBound


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
    dtmc = jump_chain(dtmc)
    matrix = dtmc.matrix
    n = np.asarray(dtmc.counts.sum(axis=1)).ravel()[transient]  # departures to another state
    seen = n > 0
    n1 = np.maximum(n, 1)
    log_term = math.log(2.0 / delta_per_state)
    hoeffding = np.where(seen, np.sqrt(log_term / (2.0 * n1)), np.inf)
    shift = smoothing_shift(dtmc)[transient]  # b: half the L1 distance of the smoothed row to the empirical one
    system = system_of(dtmc, transient)
    learned = solve_nonnegative(system, np.asarray(matrix[transient][:, np.flatnonzero(dtmc.unsafe)].sum(axis=1)).ravel())
    if learned is None:  # some state never absorbs: no finite bound
        states = [TightStatePAC(int(i), math.inf, None, False) for i in transient.tolist()]
        return TightPAC(False, math.inf, None, [], states)

    variance = np.full(transient.size, 0.25)

    def radius_of(bound: np.ndarray) -> np.ndarray:
        nonlocal variance  # the last round's, for the projection
        variance = variance_bound(learned - bound, learned + bound)
        radius: np.ndarray = np.minimum(1.0, np.minimum(hoeffding, bernstein(n1, log_term, variance)) + shift)
        radius[~seen] = 1.0
        return radius

    bound, radius = narrow(system, radius_of, transient.size, rounds)
    projection = _projection(system, seen, n1, hoeffding, variance, shift,
                             np.diff(matrix.indptr)[transient] * dtmc.alpha, log_term)
    return bound_report(dtmc, transient, departures, system, learned, bound, radius, projection, epsilon=epsilon,
                         log_term=log_term, limiting=limiting, rounds=rounds)


def bound_report(dtmc: LearnedDTMC, transient: np.ndarray, departures: np.ndarray, system: sp.csr_matrix,
                  learned: np.ndarray, bound: np.ndarray, radius: np.ndarray,
                  projection: tuple[np.ndarray, np.ndarray] | None, *, epsilon: float, log_term: float,
                  limiting: int, rounds: int,
                  factors: tuple[float | None, float | None] | None = None) -> TightPAC:
    """From per-state bounds ε̂ (and their radii r, and the (A, C) forecast): the runs factor, the limiting
    states, and the bound from the first state (shared by the tighter and the empirical-Bernstein bounds)."""
    worst = float(bound.max(initial=0.0))
    factor = 1.0 if worst <= epsilon else None if projection is None else \
        finite(max(1.0, float(np.max(growth(projection[0], projection[1], epsilon)))))
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
        start_radius = min(start_hoeffding, float(bernstein(np.array([max(runs, 1)]), log_term,
                                                             np.array([start_variance]))[0]))
        start_variance = float(variance_bound(np.array([risk - carried - start_radius]),
                                               np.array([risk + carried + start_radius]))[0])
    initial = min(1.0, carried + start_radius)
    initial_factor: float | None = 1.0
    if initial > epsilon and factors is not None:
        initial_factor = factors[1]
    elif initial > epsilon:
        initial_factor = None if projection is None or not runs else finite(max(1.0, float(growth(
            np.array([mu @ projection[0] + start_hoeffding]), np.array([mu @ projection[1]]), epsilon)[0])))
    return TightPAC(worst <= epsilon, worst, factor, limiting_states(system, pick, radius, transient, limiting), states,
                    initial, initial <= epsilon, initial_factor, limiting_states(system, mu, radius, transient, limiting))



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


def _compute(inputs: BoundInputs) -> TightPAC:
    return tight_bound(inputs.dtmc, epsilon=inputs.epsilon, delta_per_state=inputs.delta_per_state)


BOUND = PACBound("tight", "hoeffding-bernstein", "tighter", _compute)
