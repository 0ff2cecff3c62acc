"""``alpha: auto``: the smoothing constant chosen by leave-one-run-out cross-validation.

The criterion is the held-out log-likelihood of transitions: each distinct training
run's transitions are scored under the chain learned from the other runs. For Laplace
smoothing this has a closed form, so no chain is relearned: a run with ``c_ij``
transitions ``i → j`` (``c_i`` out of ``i``) is scored with
``(n_ij − c_ij + α) / (n_i − c_i + k_i·α)``. The grid is fixed and ties go to the
larger α, so the choice is a deterministic function of the traces.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

import numpy as np

from .learning import END, LearnedDTMC, TransitionCounts, ValidTransitionRule, learn_dtmc
from .predicates import PredicateSet

__all__ = ["ALPHA_GRID", "path_transitions", "held_out_transitions", "choose_alpha"]

ALPHA_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)


def path_transitions(path: tuple[int, ...], predicates: PredicateSet) -> Counter[tuple[int, int]]:
    """The transitions learning counts for one abstract run (as :meth:`TransitionCounts.add`)."""
    out: Counter[tuple[int, int]] = Counter()
    if not path or predicates.is_unsafe(path[0]):
        return out
    previous = path[0]
    for current in path[1:]:
        out[previous, current] += 1
        if predicates.is_unsafe(current):
            return out
        previous = current
    out[previous, END] += 1
    return out


def held_out_transitions(paths: Mapping[tuple[int, ...], int], predicates: PredicateSet, index: dict[int, int],
                         end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """Each distinct path's transitions as ``(source, target, count, source's departures in the path,
    path weight)`` in chain indices: what leaving one run out subtracts from the counts."""
    for path, weight in paths.items():
        transitions = path_transitions(path, predicates)
        out_of: Counter[int] = Counter()
        for (a, _), c in transitions.items():
            out_of[index[a]] += c
        for (a, b), c in transitions.items():
            i = index[a]
            yield i, end if b == END else index[b], c, out_of[i], weight


def choose_alpha(counts: TransitionCounts, paths: Mapping[tuple[int, ...], int], predicates: PredicateSet, *,
                 rule: ValidTransitionRule | None = None, structure: str = "valid",
                 grid: tuple[float, ...] = ALPHA_GRID) -> tuple[float, list[float]]:
    """The α of ``grid`` with the highest held-out log-likelihood per transition, and every score."""
    chain: LearnedDTMC = learn_dtmc(counts, predicates, alpha=1.0, rule=rule, structure=structure)
    index = chain.index()
    end = chain.end_index
    counts_csr = chain.counts
    k = np.diff(chain.matrix.indptr).astype(float)
    total = np.asarray(counts_csr.sum(axis=1)).ravel()
    lookup = {(i, int(j)): float(n) for i in range(chain.size)
              for j, n in zip(counts_csr.indices[counts_csr.indptr[i]:counts_csr.indptr[i + 1]],
                              counts_csr.data[counts_csr.indptr[i]:counts_csr.indptr[i + 1]])}
    n_ij, c_ij, n_i, c_i, k_i, weight = [], [], [], [], [], []
    for i, j, c, out_of, w in held_out_transitions(paths, predicates, index, end):
        n_ij.append(lookup[i, j])
        c_ij.append(c)
        n_i.append(total[i])
        c_i.append(out_of)
        k_i.append(k[i])
        weight.append(w)
    arrays = [np.asarray(x, dtype=float) for x in (n_ij, c_ij, n_i, c_i, k_i, weight)]
    nij, cij, ni, ci, ki, wt = arrays
    steps = float((wt * cij).sum()) or 1.0
    scores = []
    for alpha in grid:
        # floored: under structure 'observed' a transition seen in one run alone has no support without it
        p = np.maximum((nij - cij + alpha) / (ni - ci + ki * alpha), 1e-9)
        scores.append(float((wt * cij * np.log(p)).sum()) / steps)
    best = max(range(len(grid)), key=lambda i: (round(scores[i], 12), grid[i]))
    return float(grid[best]), scores
