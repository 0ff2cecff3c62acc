"""Leave-one-run-out cross-validation without relearning: what leaving one run out subtracts.

The criterion of ``backoff: auto`` (:mod:`guard.backoff`) is the held-out log-likelihood of
transitions: each distinct training run's transitions are scored under the chain learned
from the other runs. For a Dirichlet-smoothed row this has a closed form, so no chain is
relearned: a run with ``c_ij`` transitions ``i → j`` (``c_i`` out of ``i``) is scored with
the counts ``n_ij − c_ij`` and ``n_i − c_i``.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

from .learning import END
from .predicates import PredicateSet


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
