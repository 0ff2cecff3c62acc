"""Runs of different kinds: a mixture of chains over one abstract state space, fitted by EM over whole runs.

Each run is drawn from one of ``K`` latent kinds (an agent that intends the hazard, one that does
not) and then moves as that kind's chain. Kind ``k`` has a weight ``w_k``, a start distribution
``π_k`` and a transition matrix ``P_k`` on the pooled chain's sparsity (so every component has the
same states, valid transitions and absorbing states as today's chain). A run ``r`` with start
``s_r`` and transition counts ``c_r`` has the likelihood under kind ``k``

    L_rk = w_k · π_k(s_r) · Π_ij P_k(i, j)^{c_rij}

* **E-step**: responsibilities ``γ_rk = L_rk / Σ_l L_rl``, in log space.
* **M-step**: weighted counts ``n^k_ij = Σ_r γ_rk·c_rij``, smoothed as the chain is (eq. 1,
  guard/learning.py): ``P_k(i, j) = (n^k_ij + α) / (n^k_i + k_i·α)`` over the pattern's ``k_i``
  successors (a row with no weight is uniform when α = 0); ``π_k(s) = (a^k_s + α) / (A^k + |S₀|·α)``
  over the start states ``S₀`` the runs showed; ``w_k = Σ_r γ_rk / R``.

With ``K = 1`` every responsibility is 1, the weighted counts are the counts and ``P_1`` is the
chain itself, bit for bit (the same floating-point operations as :func:`learn_dtmc`). EM is run
from :data:`RESTARTS` random starts (a seeded generator: the same runs give the same mixture) and
the fit of highest likelihood is kept, its kinds ordered by weight.

``kinds: auto`` chooses ``K`` among 1..:data:`MAX_KINDS` (stopping at the first that does not improve on
the one before) by the Bayesian information criterion on the whole runs, ``BIC_K = −2·log L_K + d_K·ln R``
with ``L_K`` the fitted mixture's likelihood of the ``R`` runs (each an independent draw, so the runs are
the sample size) and ``d_K`` its free parameters (:func:`free_parameters`). BIC is consistent for the
number of components of a finite mixture: its penalty grows as ``ln R`` while a real second kind's
gain in log-likelihood grows as ``R``. (Held-out likelihood over folds of *distinct* runs, used before,
scored every held-out path with a fit that never saw it, which a mixture fits worse than one chain.)
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from .chain import LearnedDTMC
from .crossval import path_transitions
from .learning import END
from .predicates import PredicateSet

MAX_KINDS = 4
RESTARTS = 5
ITERATIONS = 3000
DENSE_CELLS = 4_000_000
TOLERANCE = 1e-10  # relative change of the log-likelihood at which EM stops (EM crawls along flat ridges)


@dataclass(frozen=True)
class PathTable:
    """Distinct runs as rows: transition counts per entry of the chain's CSR matrix, start state, copies."""

    counts: sp.csr_matrix  # runs × entries
    start: np.ndarray  # chain state index of each run's first state
    weight: np.ndarray  # copies of each run (float)
    starts: np.ndarray  # S₀: the distinct start states, ascending
    # for the EM steps: dense arrays when small (numpy's products are then far cheaper than sparse ones)
    scoring: np.ndarray | sp.csr_matrix = field(init=False, repr=False, compare=False)  # runs × entries
    transposed: np.ndarray | sp.csr_matrix = field(init=False, repr=False, compare=False)  # entries × runs
    starting: np.ndarray | sp.csr_matrix = field(init=False, repr=False, compare=False)  # runs × S₀: where each run started

    def __post_init__(self) -> None:
        small = self.counts.shape[0] * self.counts.shape[1] <= DENSE_CELLS
        object.__setattr__(self, "scoring", self.counts.toarray() if small else self.counts)
        object.__setattr__(self, "transposed", self.counts.T.toarray() if small else self.counts.T.tocsr())
        column = np.searchsorted(self.starts, self.start)
        starting = sp.csr_matrix((np.ones(len(self.start)), (np.arange(len(self.start)), column)),
                                 shape=(len(self.start), len(self.starts)))
        object.__setattr__(self, "starting", starting.toarray() if small else starting)

    def rows(self, keep: np.ndarray) -> PathTable:
        """The runs at ``keep`` (a bool mask or indices); S₀ is kept whole."""
        return PathTable(self.counts[keep], self.start[keep], self.weight[keep], self.starts)


@dataclass(frozen=True)
class _Pattern:
    """The pooled chain's sparsity, as the M-step reads it."""

    rows: np.ndarray  # per entry, its row
    successors: np.ndarray  # per entry, k_i of its row (float)
    absorbing: np.ndarray  # per entry, whether its row is absorbing
    summing: np.ndarray | sp.csr_matrix  # entries × states: sums each row's entries
    states: int

    @classmethod
    def of(cls, chain: LearnedDTMC) -> _Pattern:
        indptr = np.asarray(chain.arrays("matrix").indptr)
        lengths = np.diff(indptr)
        rows = np.repeat(np.arange(len(lengths)), lengths)
        sparse = sp.csr_matrix((np.ones(len(rows)), (np.arange(len(rows)), rows)), shape=(len(rows), len(lengths)))
        summing = sparse.toarray() if len(rows) * len(lengths) <= DENSE_CELLS else sparse
        return cls(rows, lengths[rows].astype(np.float64), chain.absorbing[rows], summing, len(lengths))


@dataclass(frozen=True)
class Mixture:
    """A fitted mixture: per kind its weight, transition probabilities and weighted counts (per CSR
    entry of the chain), start probabilities (per state); the runs' responsibilities."""

    weights: np.ndarray  # K
    probabilities: np.ndarray  # K × entries
    counts: np.ndarray  # K × entries
    initial: np.ndarray  # K × states (0 off S₀)
    responsibilities: np.ndarray  # runs × K
    log_likelihood: float

    @property
    def kinds(self) -> int:
        return len(self.weights)


def path_table(paths: Mapping[tuple[int, ...], int], predicates: PredicateSet, chain: LearnedDTMC) -> PathTable:
    """The distinct runs (chain states, as counted) in sorted order, over ``chain``'s entries."""
    index = chain.index()
    end = chain.end_index
    matrix = chain.arrays("matrix")
    indptr, indices = np.asarray(matrix.indptr), np.asarray(matrix.indices)
    rows: list[int] = []
    cols: list[int] = []
    data: list[float] = []
    items = sorted(paths)
    for r, path in enumerate(items):
        for (a, b), c in path_transitions(path, predicates).items():
            i, j = index[a], end if b == END else index[b]
            start, stop = int(indptr[i]), int(indptr[i + 1])
            position = start + int(np.searchsorted(indices[start:stop], j))
            rows.append(r)
            cols.append(position)
            data.append(float(c))
    counts = sp.csr_matrix((data, (rows, cols)), shape=(len(items), len(indices)))
    first = np.array([index[p[0]] for p in items], dtype=np.int64)
    weight = np.array([float(paths[p]) for p in items])
    return PathTable(counts, first, weight, np.unique(first))


def _m_step(table: PathTable, gamma: np.ndarray, pattern: _Pattern, alpha: float
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Weights, transition probabilities, weighted counts and start probabilities from responsibilities."""
    mass = gamma * table.weight[:, None]  # runs × K
    counts = np.asarray(table.transposed @ mass).T  # K × entries
    total = np.asarray(counts @ pattern.summing)  # K × states: each row's departures
    rows = pattern.rows
    with np.errstate(divide="ignore", invalid="ignore"):  # eq. 1, as learn_dtmc computes it
        probabilities = (counts + alpha) / (total[:, rows] + pattern.successors * alpha)
    if alpha == 0:
        empty = total[:, rows] == 0
        probabilities[empty] = np.broadcast_to(1.0 / pattern.successors, empty.shape)[empty]
    probabilities[:, pattern.absorbing] = 1.0
    starts = table.starts
    a = mass.T @ table.starting  # K × S₀
    whole = a.sum(axis=1, keepdims=True) + len(starts) * alpha
    initial = np.zeros((gamma.shape[1], pattern.states))
    with np.errstate(divide="ignore", invalid="ignore"):
        initial[:, starts] = np.where(whole > 0, (a + alpha) / whole, 1.0 / len(starts))
    weights = mass.sum(axis=0) / max(float(table.weight.sum()), 1e-300)
    return weights, probabilities, counts, initial


def score_runs(table: PathTable, weights: np.ndarray, probabilities: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """``log L_rk`` per run and kind (runs × K); −∞ where a kind cannot produce the run."""
    with np.errstate(divide="ignore"):
        log_p = np.log(probabilities)  # K × entries
        log_start = np.log(initial[:, table.start]).T  # runs × K
        log_w = np.log(weights)
    with np.errstate(invalid="ignore"):
        # a count of 0 times log 0 is 0: −∞ only where a kind gives a run's transition no probability
        transitions = np.asarray(table.scoring @ np.where(np.isfinite(log_p), log_p, 0.0).T)
        if not np.isfinite(log_p).all():
            impossible = np.asarray(table.scoring @ (~np.isfinite(log_p)).T.astype(float)) > 0
            transitions[impossible] = -math.inf
    out: np.ndarray = transitions + log_start + log_w[None, :]
    return out


def _normalise(log_l: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Responsibilities and per-run log-likelihood (log Σ_k L_rk); a run no kind can produce is shared evenly."""
    top = log_l.max(axis=1)
    finite = np.isfinite(top)
    shifted = np.where(finite[:, None], log_l - np.where(finite, top, 0.0)[:, None], 0.0)
    e = np.exp(shifted)
    total = e.sum(axis=1)
    gamma = e / total[:, None]
    return gamma, np.where(finite, top + np.log(total), -math.inf)


def fit_mixture(table: PathTable, chain: LearnedDTMC | _Pattern, kinds: int, alpha: float, *, seed: int = 0,
                restarts: int = RESTARTS) -> Mixture:
    """EM over whole runs (module docstring); ``chain`` is the pooled chain whose sparsity the kinds share."""
    pattern = chain if isinstance(chain, _Pattern) else _Pattern.of(chain)
    runs = table.counts.shape[0]
    if kinds == 1 or runs == 0:
        gamma = np.ones((runs, 1))
        w, p, n, pi = _m_step(table, gamma, pattern, alpha)
        _, ll = _normalise(score_runs(table, w, p, pi))
        return Mixture(w, p, n, pi, gamma, float(ll @ table.weight))
    rng = np.random.default_rng(seed)
    best: Mixture | None = None
    for _ in range(restarts):
        gamma = np.eye(kinds)[rng.integers(kinds, size=runs)]  # a hard random split breaks the symmetry at once
        previous = -math.inf
        for _ in range(ITERATIONS):
            w, p, n, pi = _m_step(table, gamma, pattern, alpha)
            gamma, ll = _normalise(score_runs(table, w, p, pi))
            total = float(ll @ table.weight)
            if abs(total - previous) <= TOLERANCE * max(1.0, abs(total)):
                break
            previous = total
        w, p, n, pi = _m_step(table, gamma, pattern, alpha)
        gamma, ll = _normalise(score_runs(table, w, p, pi))
        fitted = Mixture(w, p, n, pi, gamma, float(ll @ table.weight))
        if best is None or fitted.log_likelihood > best.log_likelihood:
            best = fitted
    assert best is not None
    order = np.argsort(-best.weights, kind="stable")  # kinds by weight: label switching made deterministic
    return Mixture(best.weights[order], best.probabilities[order], best.counts[order], best.initial[order],
                   best.responsibilities[:, order], best.log_likelihood)


def free_parameters(pattern: _Pattern, table: PathTable, kinds: int) -> int:
    """The mixture's free parameters: per kind, each estimated row's successors but one and the start states but
    one; and the weights but one."""
    first = np.r_[True, pattern.rows[1:] != pattern.rows[:-1]]  # one entry per row
    estimated = (~pattern.absorbing) & (pattern.successors >= 2) & first
    per_kind = int((pattern.successors[estimated] - 1).sum()) + len(table.starts) - 1
    return kinds * per_kind + kinds - 1


def bic(table: PathTable, chain: LearnedDTMC | _Pattern, fitted: Mixture) -> float:
    """``−2·log L + d·ln R`` of a fitted mixture of the runs (module docstring)."""
    pattern = chain if isinstance(chain, _Pattern) else _Pattern.of(chain)
    runs = max(float(table.weight.sum()), 1.0)
    return -2.0 * fitted.log_likelihood + free_parameters(pattern, table, fitted.kinds) * math.log(runs)


def choose_kinds(table: PathTable, chain: LearnedDTMC, alpha: float, *, max_kinds: int = MAX_KINDS,
                 seed: int = 0) -> tuple[int, dict[int, float]]:
    """``K`` for ``kinds: auto`` by BIC, and each candidate's BIC (module docstring; lower is better).

    Candidates are tried in increasing order, and the search stops at the first that does not improve on the
    one before (a mixture that cannot use a third kind will not use a fourth).
    """
    runs = float(table.weight.sum())
    if runs < 2:
        return 1, {}
    pattern = _Pattern.of(chain)
    scores: dict[int, float] = {}
    for kinds in range(1, max_kinds + 1):
        scores[kinds] = bic(table, pattern, fit_mixture(table, pattern, kinds, alpha, seed=seed))
        if kinds > 1 and scores[kinds] >= scores[kinds - 1]:
            break
    return min(scores, key=lambda k: (scores[k], k)), scores
