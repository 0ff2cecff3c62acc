"""``learning.kinds``: the runs' kinds drawn from their posterior with the fit's own doubt in it (MCMC).

EM gives one fit, and each run's responsibilities ``γ_rk`` under it. Where the likelihood is flat — a
kind whose true probability of a transition is 0, so that a few of the other kind's runs can be handed
to it at almost no cost — the fitted ``γ`` is confidently wrong, and an interval that treats it as the
true posterior misses (docs/method/kinds.md). This samples the runs' labels from their posterior *with
the parameters integrated out*: under a ``Dir(α)`` prior on every row of every kind, on its start
distribution (the prior whose posterior mean is eq. 1's smoothing) and ``Dir(1)`` on the weights, the
labels' marginal likelihood is a product of Dirichlet–multinomial terms,

    log π(m) = Σ_k Σ_rows [ln Γ(k_i·α) − ln Γ(k_i·α + n^k_i) + Σ_j (ln Γ(α + n^k_ij) − ln Γ(α))] + starts + weights

with ``n^k`` the counts of the runs labelled ``k``. A Metropolis–Hastings step proposes new labels for all
copies of one distinct run, or of a group of runs EM is equally unsure of, at once — half the time drawn
from EM's responsibilities, half the time all of them to one kind — so a block of runs the fit handed to
the wrong kind can move back in one step (a sampler that moves one run at a time, or that alternates
parameters and labels, stays where EM left it: moving such runs one by one costs ~25 nats each, all
together under 1 on two_types). The proposal only decides how fast the chain mixes; the target is the
posterior whatever it is.
Each sample's kinds are matched to EM's (the permutation agreeing best with the responsibilities).
"""
from __future__ import annotations

import itertools
import math

import numpy as np
from scipy.special import gammaln

from .mixture import Mixture, PathTable, _Pattern

BURN_IN = 50  # sweeps (one proposal per distinct run, and per group, each)
SAMPLES = 200
PRIOR_FLOOR = 0.05  # the Dirichlet prior when α is smaller (α = 0 has no proper posterior)


def log_marginal(labels: np.ndarray, table: PathTable, pattern: _Pattern, prior: float) -> float:
    """``log π(m)`` of the labels (runs × K: copies of each distinct run per kind), parameters integrated out."""
    return _from_counts(*_totals(labels, table), pattern, prior)


def _totals(labels: np.ndarray, table: PathTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The labelled runs' transition counts (K × entries), start counts (K × S₀) and runs per kind."""
    mass = labels.astype(float)
    return np.asarray(table.transposed @ mass).T, np.asarray(mass.T @ table.starting), mass.sum(axis=0)


def _masks(pattern: _Pattern) -> tuple[np.ndarray, np.ndarray]:
    """The estimated entries, and the estimated rows (by one entry each)."""
    estimated = (~pattern.absorbing) & (pattern.successors >= 2)
    return estimated, pattern.rows[np.r_[True, pattern.rows[1:] != pattern.rows[:-1]] & estimated]


def _from_counts(counts: np.ndarray, starts: np.ndarray, n: np.ndarray, pattern: _Pattern, prior: float,
                 masks: tuple[np.ndarray, np.ndarray] | None = None) -> float:
    estimated, row_of = _masks(pattern) if masks is None else masks
    rows = np.asarray(counts @ pattern.summing)  # K × states
    size = np.bincount(pattern.rows[estimated], minlength=pattern.states)[row_of] * prior
    total = float((gammaln(size) - gammaln(size + rows[:, row_of])).sum())
    total += float((gammaln(prior + counts[:, estimated]) - gammaln(prior)).sum())
    s0 = starts.shape[1] * prior
    total += float((gammaln(s0) - gammaln(s0 + starts.sum(axis=1))).sum() + (gammaln(prior + starts) - gammaln(prior)).sum())
    kinds = len(n)
    total += float(gammaln(kinds) - gammaln(kinds + n.sum()) + gammaln(1.0 + n).sum())
    return total


def _log_proposal(m: np.ndarray, copies: np.ndarray, gamma: np.ndarray) -> float:
    """log q(m) of the proposal for a group of runs (rows of ``m``): ½ each run's copies Multinomial(copies, γ),
    independently; ½ every copy of the group to one kind, chosen uniformly."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(m > 0, m * np.log(gamma), 0.0)
    multinomial = float(gammaln(copies + 1.0).sum() - gammaln(m + 1.0).sum() + terms.sum())
    whole = np.flatnonzero(m.sum(axis=0) == copies.sum())
    block = -math.log(m.shape[1]) if len(whole) else -math.inf
    top = max(multinomial, block)
    return top + math.log(0.5 * math.exp(multinomial - top) + 0.5 * math.exp(block - top))


def _groups(gamma: np.ndarray) -> list[np.ndarray]:
    """Every run alone, and the runs EM is equally unsure of (responsibilities within 0.05): a block of runs the
    fit handed to one kind moves back together or not at all (apart, each move costs the likelihood dearly)."""
    out = [np.array([r]) for r in range(len(gamma))]
    keys: dict[tuple[int, ...], list[int]] = {}
    for r, row in enumerate(np.rint(gamma * 20).astype(np.int64).tolist()):
        keys.setdefault(tuple(row), []).append(r)
    return out + [np.array(v) for v in keys.values() if len(v) > 1]


def sample_labels(table: PathTable, pattern: _Pattern, mixture: Mixture, alpha: float, *, seed: int = 0,
                  samples: int = SAMPLES, burn_in: int = BURN_IN) -> np.ndarray:
    """``samples`` draws of the copies of each distinct run that are of each kind (samples × runs × K)."""
    rng = np.random.default_rng(seed)
    kinds = mixture.kinds
    prior = max(alpha, PRIOR_FLOOR)
    copies = np.rint(table.weight).astype(np.int64)
    gamma = np.clip(mixture.responsibilities, 1e-12, 1.0)
    gamma = gamma / gamma.sum(axis=1, keepdims=True)
    labels = rng.multinomial(copies, gamma)  # runs × K
    counts, starts, n = _totals(labels, table)
    masks = _masks(pattern)
    current = _from_counts(counts, starts, n, pattern, prior, masks)
    dense = np.asarray(table.counts.todense()) if not isinstance(table.scoring, np.ndarray) else table.scoring
    starting = np.asarray(table.starting.todense()) if not isinstance(table.starting, np.ndarray) else table.starting
    perms = [np.array(p) for p in itertools.permutations(range(kinds))]
    groups = _groups(gamma)
    out = np.zeros((samples, len(copies), kinds))
    for sweep in range(burn_in + samples):
        for g in rng.permutation(len(groups)):
            runs = groups[g]
            if rng.random() < 0.5:
                proposal = rng.multinomial(copies[runs], gamma[runs])
            else:
                proposal = np.zeros((len(runs), kinds), dtype=np.int64)
                proposal[:, rng.integers(kinds)] = copies[runs]
            old = labels[runs].copy()
            if np.array_equal(proposal, old):
                continue
            change = (proposal - old).astype(float)  # |group| × K: only these runs' counts move
            moved = (counts + (dense[runs].T @ change).T, starts + (starting[runs].T @ change).T, n + change.sum(axis=0))
            candidate = _from_counts(*moved, pattern, prior, masks)
            ratio = (candidate - current + _log_proposal(old, copies[runs], gamma[runs])
                     - _log_proposal(proposal, copies[runs], gamma[runs]))
            if math.log(rng.random() + 1e-300) < ratio:
                current = candidate
                labels[runs] = proposal
                counts, starts, n = moved
        if sweep >= burn_in:
            agree = [float((labels[:, q] * mixture.responsibilities).sum()) for q in perms]
            out[sweep - burn_in] = labels[:, perms[int(np.argmax(agree))]]
    return out
