"""``learning.kinds``: intervals on a kind's numbers when each run's kind is only known in probability.

Were every run's kind known, a kind's transitions and first-visit outcomes would be counts, and
Clopper–Pearson intervals on them would hold as they do for one chain (guard/intervals.py,
guard/outcomes.py). The runs' kinds are latent; given the runs, under the fitted mixture, run ``r``
is of kind ``k`` with probability ``γ_rk`` (its responsibility), independently of the other runs.
A kind's count is then ``S = Σ_r Z_r·a_r`` with ``Z_r ~ Bernoulli(γ_rk)`` independent and ``a_r``
what run ``r`` adds (1 for a run that visited a state, its transitions for a transition count):
its mean is the weighted count ``μ = Σ_r γ_rk·a_r`` and its variance ``v = Σ_r γ_rk(1 − γ_rk)·a_r²``.
Bennett's inequality (each summand within ``b = max a_r`` of its mean) bounds it one-sidedly,

    P(S − μ ≥ t) ≤ exp(−(v/b²)·h(b·t/v)),   h(u) = (1 + u)·ln(1 + u) − u,

and the same for ``μ − S``; ``S`` is a whole number, so ``S ≤ ⌊μ + t⌋`` and ``S ≥ ⌈μ − t⌉``.
A kind's interval on a proportion ``x`` out of ``x + o`` (``o``: the rest of the row, or the runs
that visited and did not go on to the target) is the Clopper–Pearson lower end of ``⌈x⌉_low`` out of
``⌈x⌉_low + ⌊o⌋_high`` and the upper end of ``⌊x⌋_high`` out of ``⌊x⌋_high + ⌈o⌉_low``: Clopper–Pearson's
lower end grows with the successes and falls with the trials, so the extreme counts the labels
allow give the extreme ends. Union bound per interval: ``δ_i/2`` for Clopper–Pearson on the true
labels' counts and ``δ_i/8`` for each of the four one-sided label events. The interval then holds
with probability ``≥ 1 − δ_i`` *if the fitted responsibilities are the true posterior*; the fit's
own error is not in the bound (docs/method/kinds.md says where that fails: kinds the runs cannot
tell apart). Runs the fit is sure of (``γ`` 0 or 1) add nothing to ``v``: the interval is then the
labelled-runs one at ``δ_i/2``.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from .intervals import IntervalMethod, clopper_pearson, hoeffding

CP_SHARE = 0.5  # of an interval's δ, for the binomial interval on the true labels' counts
LABEL_SHARE = 0.125  # for each of its four one-sided label events
_BISECTIONS = 80


def _h(u: np.ndarray) -> np.ndarray:
    out: np.ndarray = (1.0 + u) * np.log1p(u) - u
    return out


def bennett_radius(variance: np.ndarray, scale: np.ndarray, delta: float) -> np.ndarray:
    """Per element, the ``t`` with ``exp(−(v/b²)·h(b·t/v)) = delta``: ``P(S − μ ≥ t) ≤ delta`` (0 where ``v`` = 0)."""
    v = np.asarray(variance, dtype=float)
    b = np.maximum(np.asarray(scale, dtype=float), 1e-300)
    target = math.log(1.0 / delta)
    out = np.zeros(np.broadcast(v, b).shape)
    live = np.broadcast_to(v > 1e-300, out.shape)
    if not live.any():
        return out
    vv, bb = np.broadcast_to(v, out.shape)[live], np.broadcast_to(b, out.shape)[live]
    need = target * bb**2 / vv  # h(u) = need, h increasing from 0: bisect u on [0, hi]
    low, high = np.zeros_like(need), np.maximum(need, 1.0)
    while True:  # h(u) ≥ u·ln(u) − u grows without bound: widen until it brackets
        short = _h(high) < need
        if not short.any():
            break
        high = np.where(short, high * 2.0, high)
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2.0
        above = _h(mid) >= need
        high, low = np.where(above, mid, high), np.where(above, low, mid)
    out[live] = high * vv / bb
    return out


def label_range(mean: np.ndarray, variance: np.ndarray, scale: np.ndarray, delta: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """The whole counts ``[⌈μ − t⌉⁺, ⌊μ + t⌋]`` a latent-label count lies in, each side failing with ≤ ``delta``."""
    t = bennett_radius(variance, scale, delta)
    mu = np.asarray(mean, dtype=float)
    # a hair of slack: μ is a float sum, and a count the fit is sure of must not round away from itself
    low = np.maximum(np.ceil(mu - t - 1e-9), 0.0)
    high = np.maximum(np.floor(mu + t + 1e-9), low)
    return low, high


def proportion_bounds(x: tuple[np.ndarray, np.ndarray, np.ndarray], o: tuple[np.ndarray, np.ndarray, np.ndarray],
                      delta: float, method: IntervalMethod = IntervalMethod.CLOPPER_PEARSON
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Per element, an interval on the proportion ``x / (x + o)`` of a kind, each holding with ``≥ 1 − delta``.

    ``x`` and ``o`` are (mean, variance, scale) of the two latent-label counts (module docstring); where
    both means are 0 the interval is [0, 1].
    """
    x_low, x_high = label_range(*x, delta * LABEL_SHARE)
    o_low, o_high = label_range(*o, delta * LABEL_SHARE)
    bound = clopper_pearson if method is IntervalMethod.CLOPPER_PEARSON else hoeffding
    share = delta * CP_SHARE
    n_low, n_high = x_low + o_high, x_high + o_low
    lower = np.where(n_low > 0, bound(x_low, np.maximum(n_low, 1.0), share)[0], 0.0)
    upper = np.where(n_high > 0, bound(x_high, np.maximum(n_high, 1.0), share)[1], 1.0)
    return np.clip(lower, 0.0, 1.0), np.clip(upper, 0.0, 1.0)


def _weights(gamma: np.ndarray, copies: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct run, the weights of a kind's mean (``γ``) and variance (``γ(1 − γ)``), times its copies:
    each copy of a run is a run of its own, of kind ``k`` independently of the others."""
    return gamma * copies, gamma * (1.0 - gamma) * copies


def transition_moments(counts: sp.csr_matrix, copies: np.ndarray, gamma: np.ndarray, rows: np.ndarray, states: int
                       ) -> tuple[np.ndarray, ...]:
    """Per CSR entry of the chain (``counts``: runs × entries; ``rows``: each entry's row), the kind's latent
    count of the entry and of the rest of its row: (x mean, x variance, o mean, o variance, scale), the scale
    being the most departures one run makes from the row (a bound on each summand)."""
    g, q = _weights(gamma, copies)
    entries = counts.shape[1]
    summing = sp.csr_matrix((np.ones(entries), (np.arange(entries), rows)), shape=(entries, states))
    departures = (counts @ summing).tocsr()  # runs × states: each run's departures from each row
    x_mean = np.asarray(counts.T @ g).ravel()
    x_var = np.asarray(counts.multiply(counts).T @ q).ravel()
    n_mean = np.asarray(departures.T @ g).ravel()[rows]
    n_var = np.asarray(departures.multiply(departures).T @ q).ravel()[rows]
    coo = counts.tocoo()
    along = np.asarray(departures[coo.row, rows[coo.col]]).ravel()  # a run's row departures, at its entries
    cross = np.bincount(coo.col, weights=q[coo.row] * along * coo.data, minlength=entries)
    scale = departures.max(axis=0).toarray().ravel()[rows]
    # Σ q (n − c)² = Σ q n² − 2 Σ q n c + Σ q c²
    return x_mean, x_var, n_mean - x_mean, np.maximum(n_var - 2.0 * cross + x_var, 0.0), scale


def count_moments(indicator: sp.csr_matrix, copies: np.ndarray, gamma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column of a runs × columns 0/1 ``indicator``, the kind's latent count's mean and variance."""
    g, q = _weights(gamma, copies)
    return np.asarray(indicator.T @ g).ravel(), np.asarray(indicator.T @ q).ravel()


def first_visit_bounds(labels: np.ndarray, visited: sp.csr_matrix, followed: sp.csr_matrix, delta: float,
                       method: IntervalMethod = IntervalMethod.CLOPPER_PEARSON) -> tuple[np.ndarray, np.ndarray]:
    """Per state, an interval on a kind's first-visit risk from sampled labels (samples × runs: the copies of each
    distinct run of the kind, guard/mixture_gibbs.py): per sample, Clopper–Pearson at ``δ/2`` on the kind's runs
    that visited the state and those whose first visit the target followed; the interval's lower (upper) end is the
    ``δ/4`` lower (upper) quantile of those ends over the samples. If the true labels are distributed as the
    samples, the true labels' lower end is below the quantile with probability ≤ ``δ/4``, and Clopper–Pearson on
    the true labels misses with ≤ ``δ/2``: a union bound gives ``δ``."""
    n = np.asarray(visited.T @ labels.T).T  # samples × states
    x = np.asarray(followed.T @ labels.T).T
    bound = clopper_pearson if method is IntervalMethod.CLOPPER_PEARSON else hoeffding
    low, high = bound(x, np.maximum(n, 1.0), delta * CP_SHARE)
    low, high = np.where(n > 0, low, 0.0), np.where(n > 0, high, 1.0)
    tail = delta * (1.0 - CP_SHARE) / 2.0
    return np.quantile(low, tail, axis=0, method="inverted_cdf"), np.quantile(high, 1.0 - tail, axis=0,
                                                                                method="inverted_cdf")
