"""A direct confidence interval for a reach probability from the runs' outcomes, which needs no Markov assumption.

The interval chain (guard/intervals.py) compounds every transition's uncertainty along
every path, so a start state left a thousand times can still read [0, 1] when the
states after it were seen rarely. The runs also answer the question directly. A state's
*first-visit risk* ``q_x`` is the probability that a run, after its first visit to ``x``,
reaches the target (within ``h`` steps for ``F<=h``). Runs are independent draws: each
visits ``x`` or not, and one that does reaches the target after its first visit with
probability ``q_x`` whatever happens in other runs. So given the ``n_x`` runs that visit
``x``, the number ``k_x`` of them whose suffix reaches the target is Binomial(``n_x``,
``q_x``), and the Clopper–Pearson interval on ``(k_x, n_x)`` holds ``q_x`` with probability
≥ 1 − δ' — with no assumption on how the runs move between states. (Every-visit counts,
which shrinkage uses, are not independent within a run: a run that revisits ``x`` counts
once.) Under the Markov assumption ``q_x`` is also the chain's reach probability ``p_x``
(strong Markov property), so the direct interval is an interval for what the model claims.

δ is split: δ/2 for the interval chain, δ/2 by a union bound over the ``D`` direct
intervals of the model (every state with ``n_x ≥ 1`` of every reach property), each at
δ/(2D). A state some run visited takes the direct interval (:func:`assumption_free`); a
state no run visited, the chain's. Intersecting the two (the construction before) holds
only under the Markov assumption: when the runs are mildly non-Markov the chain's interval
sits around ``p_x ≠ q_x`` and the intersection excludes ``q_x`` while the two still overlap
(docs/intervals.md). The result is widened to contain the stored point value (and Storm's
bounds): a set that contains the truth still does after it grows.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .intervals import IntervalMethod, clopper_pearson, hoeffding
from .learning import LearnedDTMC
from .model import CheckedProperty
from .predicates import PredicateSet
from .shrinkage import Paths, PathVisits, reach_label, summarize_paths

Key = tuple[int, tuple[int, ...]]


@dataclass(frozen=True)
class OutcomeCounts:
    """Per product state of one reach property: runs that visited it, and those whose suffix reached the target."""

    runs: np.ndarray  # n_x
    reached: np.ndarray  # k_x ≤ n_x


def first_visit_counts(summaries: Iterable[PathVisits], targets: int, index: Mapping[Key, int], size: int
                       ) -> list[OutcomeCounts]:
    """``(n_x, k_x)`` per target from :class:`guard.shrinkage.PathVisits` summaries (``weight`` copies each).

    A state a run visits several times counts once, with the outcome after its first visit.
    States of the summaries outside ``index`` (none, for the product the runs were counted into) are skipped.
    """
    n = np.zeros(size, dtype=np.int64)
    k = [np.zeros(size, dtype=np.int64) for _ in range(targets)]
    for pv in summaries:
        weight = pv.weight
        for key in pv.visits:
            s = index.get(key)
            if s is not None:
                n[s] += weight
        for t, first in enumerate(pv.first):
            for key in first:
                s = index.get(key)
                if s is not None:
                    k[t][s] += weight
    return [OutcomeCounts(n, kt) for kt in k]


def chain_first_visits(chain: LearnedDTMC, predicates: PredicateSet, monitors: Sequence[Any], paths: Paths | None,
                       properties: Sequence[CheckedProperty], reach: Sequence[int],
                       outcomes: Mapping[int, OutcomeCounts] | None) -> tuple[np.ndarray, np.ndarray] | None:
    """Per state of the learned ``chain``, the runs that visited it and those that then reached ``unsafe``: the
    PAC outcome bound's data (guard/pac/outcome.py). The ``F "unsafe"`` property's first visits when the chain
    is the product (no monitors), else one more pass over the runs; ``None`` without the runs."""
    if paths is None:
        return None
    if not monitors and outcomes is not None:
        for i in reach:
            if reach_label(properties[i].outcome.formula) == ("unsafe", None) and i in outcomes:
                return outcomes[i].runs, outcomes[i].reached
    summaries = summarize_paths(paths, predicates, [], [(lambda bits, _q: predicates.is_unsafe(bits), None)])
    counts = first_visit_counts(summaries.values(), 1, chain.product_index(), chain.size)[0]
    return counts.runs, counts.reached


def direct_intervals(counts: OutcomeCounts, delta_each: float, method: IntervalMethod = IntervalMethod.CLOPPER_PEARSON
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Per state, the interval for ``p_x`` at confidence 1 − ``delta_each``; [0, 1] where no run visited."""
    n, k = counts.runs, counts.reached
    low, high = np.zeros(len(n)), np.ones(len(n))
    seen = n > 0
    if seen.any():
        bound = hoeffding if method is IntervalMethod.HOEFFDING else clopper_pearson
        low[seen], high[seen] = bound(k[seen], n[seen], delta_each)
    return low, high


def assumption_free(chain: tuple[np.ndarray, np.ndarray], direct: tuple[np.ndarray, np.ndarray],
                    visited: np.ndarray, contain: Iterable[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per state, the direct interval where a run ``visited`` it, else the chain's; widened to contain every
    array in ``contain``. The direct interval holds the first-visit risk whether or not the runs are Markov
    over the states (module docstring); the chain's speaks only where the runs say nothing."""
    low = np.where(visited, direct[0], chain[0])
    high = np.where(visited, direct[1], chain[1])
    for values in contain:
        low = np.minimum(low, values)
        high = np.maximum(high, values)
    return np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)


def with_direct(properties: Sequence[CheckedProperty], outcomes: Mapping[int, OutcomeCounts], delta: float,
                method: IntervalMethod = IntervalMethod.CLOPPER_PEARSON) -> list[CheckedProperty]:
    """Each reach property's stored interval replaced, at every state some run visited, by the runs' direct
    interval (a union bound at ``delta`` over every visited state of every property in ``outcomes``), widened
    to hold the stored value. ``learning.kinds`` stores the kinds weighed by their share among the runs
    through a state: an estimate of the first-visit risk, which the direct interval holds with no model of
    the kinds at all (guard/mixture_check.py; its own intervals stay each kind's, for sessions)."""
    visited = sum(int((c.runs > 0).sum()) for i, c in outcomes.items() if i < len(properties))
    if visited == 0:
        return list(properties)
    out = []
    for i, prop in enumerate(properties):
        counts = outcomes.get(i)
        if counts is None or prop.ci_low is None or prop.ci_high is None:
            out.append(prop)
            continue
        o = prop.outcome
        contain = [o.values] + [b for b in (o.lower, o.upper) if b is not None]
        low, high = assumption_free((prop.ci_low, prop.ci_high), direct_intervals(counts, delta / visited, method),
                                    counts.runs > 0, contain)
        out.append(CheckedProperty(prop.definition, o, low, high, prop.mismatch))
    return out
