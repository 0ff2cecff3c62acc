"""The empirical-Bernstein bound: the tighter bound with each state's radius from the spread of the true
risks over its successors (docs/method.md, "The empirical-Bernstein bound")."""
from __future__ import annotations

import math

import numpy as np

from ..learning import LearnedDTMC
from ..results import TightPAC, TightStatePAC
from ._solve import (
    jump_chain,
    narrow,
    smallest_scale,
    smoothing_shift,
    solve_nonnegative,
    start_weights,
    system_of,
    variance_bound,
)
from .registry import BoundInputs, PACBound
from .tight import bound_report

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
    jump = jump_chain(dtmc)
    rows = jump.counts.tocsr()[transient]
    n = np.asarray(rows.sum(axis=1)).ravel()  # departures to another state
    seen = n > 0
    n1 = np.maximum(n, 1)
    shift = smoothing_shift(jump)[transient]
    system = system_of(jump, transient)
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
            sigma = np.minimum(sigma, np.sqrt(variance_bound(learned - bound, learned + bound)))
            bernstein = (log_mean / 3.0 + np.sqrt(log_mean**2 / 9.0 + 2.0 * count * log_mean * sigma**2)) / count
            hoeffding = np.sqrt(log_mean / (2.0 * count))  # both bound one moment generating function
            radius: np.ndarray = np.where(known, np.minimum(1.0, np.minimum(bernstein, hoeffding) + moved), 1.0)
            return radius

        return narrow(system, radius_of, m, rounds)

    bound, radius = widths(1.0, rounds)
    runs, mu = start_weights(jump, transient)

    seen_widths: dict[float, np.ndarray] = {}

    def forecast(scale: float) -> np.ndarray:  # a few rounds: a forecast, not a guarantee
        if scale not in seen_widths:
            seen_widths[scale] = widths(scale, 4)[0]
        return seen_widths[scale]

    def start(scale: float) -> float:  # the start bound at a forecast, its own radius by Hoeffding
        return float(mu @ forecast(scale)) + math.sqrt(log_mean / (2.0 * max(runs, 1) * scale))

    factors = (smallest_scale(lambda k: float(forecast(k).max(initial=0.0)) <= epsilon),
               smallest_scale(lambda k: start(k) <= epsilon) if runs else None)
    return bound_report(jump, transient, departures, system, learned, bound, radius, None, epsilon=epsilon,
                         log_term=log_mean, limiting=limiting, rounds=rounds, factors=factors)


def _compute(inputs: BoundInputs) -> TightPAC:
    return empirical_bound(inputs.dtmc, epsilon=inputs.epsilon, delta=inputs.delta)


BOUND = PACBound("empirical", "empirical-bernstein", "empirical-Bernstein", _compute)
