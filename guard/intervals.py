"""Confidence intervals for a learned chain's transition probabilities (an interval Markov chain).

From the counts ``n_ij`` out of ``n_i`` observed departures of state ``i``, each estimated
entry ``P(i, j)`` gets an interval that holds the true probability with probability at
least ``1 − δ'``; with ``δ' = δ / M`` over the ``M`` estimated entries of the model (a union,
or Bonferroni, bound over every state's valid successors and over states), every true
entry lies inside its interval *simultaneously* with probability at least ``1 − δ``. Storm
then gives, per state, the lowest and highest reach probability over all chains inside
the intervals (guard/storm.py), which therefore contain the true one with the same
confidence — under the Markov assumption over the abstraction (docs/method.md).

* ``clopper_pearson`` (default): the exact binomial interval, two-sided at ``δ'``:
  ``[B(δ'/2; x, n−x+1), B(1−δ'/2; x+1, n−x)]`` with ``B`` the Beta quantile (0 at x = 0,
  1 at x = n).
* ``hoeffding``: ``x/n ± sqrt(ln(2/δ') / 2n)``, clipped to [0, 1]; simpler, wider.

Every interval is then widened to contain the smoothed point estimate of eq. 1: a set
that contains the true value still does after it grows, so the guarantee is unchanged,
and the point chain is one of the chains inside the intervals (so ``ci_low ≤ p ≤ ci_high``
holds for every reach probability too). A row's lower ends sum to at most 1 and its upper
ends to at least 1 for the same reason: the point estimates, which sum to 1, lie inside.
A state with no departures gets [0, 1] per valid successor, a state with one valid
successor [1, 1], an absorbing state [1, 1]; entries outside the model's valid
transitions are exact zeros and stay so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import betaincinv

from ..errors import ConfigError
from .chain import LearnedDTMC, visits
from .results import IntervalMethod, IntervalReport

__all__ = ["IntervalMethod", "IntervalReport", "visits"]  # names other modules import through this one


@dataclass(frozen=True)
class TransitionIntervals:
    """Per CSR entry of ``dtmc.matrix`` (same order as ``matrix.data``), its interval."""

    method: IntervalMethod
    delta: float  # for the whole model
    delta_per_entry: float  # δ / entries
    entries: int  # M: the estimated entries the union bound runs over
    lower: np.ndarray
    upper: np.ndarray


def estimated_entries(dtmc: LearnedDTMC) -> int:
    """M: entries whose probability is estimated (rows of transient states with ≥ 2 valid successors)."""
    lengths = np.diff(dtmc.matrix.indptr)
    return int(lengths[(~dtmc.absorbing) & (lengths >= 2)].sum())


def clopper_pearson(x: np.ndarray, n: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided Clopper–Pearson interval at confidence 1 − delta (n ≥ 1 everywhere)."""
    x = np.asarray(x, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(x > 0, betaincinv(np.maximum(x, 1e-300), n - x + 1, delta / 2), 0.0)
        high = np.where(x < n, betaincinv(x + 1, np.maximum(n - x, 1e-300), 1 - delta / 2), 1.0)
    return np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)


def hoeffding(x: np.ndarray, n: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Hoeffding's two-sided interval x/n ± sqrt(ln(2/delta) / 2n) at confidence 1 − delta (n ≥ 1)."""
    x = np.asarray(x, dtype=float)
    n = np.asarray(n, dtype=float)
    radius = np.sqrt(math.log(2.0 / delta) / (2.0 * n))
    mean = x / n
    return np.clip(mean - radius, 0.0, 1.0), np.clip(mean + radius, 0.0, 1.0)


def transition_intervals(dtmc: LearnedDTMC, *, delta: float,
                         method: IntervalMethod | str = IntervalMethod.CLOPPER_PEARSON,
                         entries: int | None = None) -> TransitionIntervals:
    """An interval for every entry of ``dtmc.matrix``, jointly valid with probability ≥ 1 − delta.

    Args:
        delta: the model-wide error probability, in (0, 1).
        entries: the union bound's size; default the chain's own estimated entries. A
            product with monitors passes its chain's: each product transition inherits
            its chain transition's counts, hence its interval (conservative, docs/method.md).
    """
    method = IntervalMethod(method)
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"delta must lie in (0, 1), got {delta}")
    if method is IntervalMethod.NONE:
        raise ConfigError("interval method 'none' computes no intervals")
    matrix, counts = dtmc.matrix, dtmc.counts
    # a bug if it fails, not bad input: learn_dtmc builds both matrices on one pattern
    if not (np.array_equal(matrix.indptr, counts.indptr) and np.array_equal(matrix.indices, counts.indices)):
        raise ValueError("counts and probabilities must share one sparsity pattern")
    m = estimated_entries(dtmc) if entries is None else int(entries)
    per_entry = delta / max(m, 1)
    lengths = np.diff(matrix.indptr)
    rows = np.repeat(np.arange(dtmc.size), lengths)
    n = visits(dtmc)[rows]
    x = counts.data
    point = matrix.data
    lower = np.zeros(len(point))
    upper = np.ones(len(point))
    estimated = (~dtmc.absorbing[rows]) & (lengths[rows] >= 2) & (n > 0)
    bound = clopper_pearson if method is IntervalMethod.CLOPPER_PEARSON else hoeffding
    if estimated.any():
        # Beta quantiles are costly and (count, visits) pairs repeat a lot: solve each pair once
        xe, ne = np.rint(x[estimated]).astype(np.int64), n[estimated]
        codes, inverse = np.unique(xe * (int(ne.max()) + 1) + ne, return_inverse=True)
        low, high = bound(codes // (int(ne.max()) + 1), codes % (int(ne.max()) + 1), per_entry)
        inverse = inverse.reshape(-1)
        lower[estimated], upper[estimated] = low[inverse], high[inverse]
    fixed = (dtmc.absorbing[rows]) | (lengths[rows] == 1)  # probability exactly 1
    lower[fixed] = upper[fixed] = 1.0
    # contain the smoothed estimate (see the module's docstring: still valid)
    lower = np.minimum(lower, point)
    upper = np.maximum(upper, point)
    return TransitionIntervals(method, float(delta), per_entry, m, lower, upper)
