"""Shrinking the chain's risk towards the observed outcome frequency where data is plentiful.

The chain's value ``p_s`` of a property in product state ``s`` rests on the Markov
assumption; the training runs also say directly how often a visit to ``s`` was followed
by the property failing: ``k_s`` of ``n_s`` visits. The stored value is the posterior
mean of a Beta prior centred on the chain with strength ``κ``::

    v_s = (k_s + κ·p_s) / (n_s + κ)          (n_s = 0: v_s = p_s)

so a rarely visited state keeps the chain's value (which generalises over the whole
chain) and a much visited one moves to its own frequency (which needs no Markov
assumption). ``κ`` is chosen per property by leave-one-run-out cross-validation of the
per-step Brier score (the figure ``forewarn evaluate`` reports): each run's visits are
predicted from the other runs' counts. The chain's ``p_s`` in that criterion is the one
learned from all runs (refitting it per run would need a Storm check per run), which
favours the chain a little; docs/method.md says so.

Only properties of the form ``F "label"`` and ``F<=h "label"`` have an outcome that a
finite run decides at every step; other formulas keep the chain's values.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from guard.learning import LearnedDTMC
from guard.model import CheckedProperty
from guard.predicates import PredicateSet
from monitors.base import VIOL, Monitor

__all__ = ["KAPPA_GRID", "OutcomeCounts", "outcome_counts", "choose_kappa", "shrink", "reach_label", "shrink_properties"]

# Candidate strengths for ``shrink: auto`` (∞: the chain alone).
KAPPA_GRID = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, math.inf)
_REACH = re.compile(r'^P=\?\s*\[\s*F\s*(?:<=\s*(\d+)\s*)?"([^"]+)"\s*\]$')


def reach_label(query: str) -> tuple[str, int | None] | None:
    """``(label, h)`` for ``P=? [F<=h "label"]`` (``h`` None for ``F``), else None."""
    match = _REACH.match(query.strip())
    if match is None:
        return None
    return match.group(2), None if match.group(1) is None else int(match.group(1))


class OutcomeCounts:
    """Per (distinct run, product state): visits and visits followed by the outcome.

    ``pairs_*`` are parallel arrays over (run, state) pairs; ``weight`` is how many
    training runs had that abstract path (identical runs are counted once, weighted).
    """

    def __init__(self, run: np.ndarray, state: np.ndarray, visits: np.ndarray, hits: np.ndarray,
                 weight: np.ndarray, size: int) -> None:
        self.run, self.state, self.visits, self.hits, self.weight = run, state, visits, hits, weight
        self.n = np.bincount(state, weights=visits * weight, minlength=size)
        self.k = np.bincount(state, weights=hits * weight, minlength=size)


def product_paths(paths: Mapping[tuple[int, ...], int], dtmc: LearnedDTMC, predicates: PredicateSet,
                  monitors: Sequence[Monitor]) -> list[tuple[list[int], int]]:
    """Each distinct abstract path as product state indices, up to and including its first unsafe state."""
    index = dtmc.product_index()
    out = []
    for path, weight in paths.items():
        q: tuple[int, ...] | None = None
        states = []
        for bits in path:
            q = tuple(m.step(m.initial if q is None else q[k], bits) for k, m in enumerate(monitors))
            states.append(index[(bits, q)])
            if predicates.is_unsafe(bits) or VIOL in q:
                break
        out.append((states, weight))
    return out


def outcome_counts(paths: list[tuple[list[int], int]], dtmc: LearnedDTMC, labelled: np.ndarray,
                   horizon: int | None) -> OutcomeCounts:
    """Visits to non-absorbing states, and those followed by a ``labelled`` state (within ``horizon`` steps)."""
    absorbing = dtmc.absorbing
    runs, states, visits, hits, weights = [], [], [], [], []
    for r, (path, weight) in enumerate(paths):
        seen: Counter[int] = Counter()
        hit: Counter[int] = Counter()
        next_hit = math.inf
        for i in range(len(path) - 1, -1, -1):
            s = path[i]
            if labelled[s]:
                next_hit = i
            if absorbing[s]:
                continue
            seen[s] += 1
            if next_hit < math.inf and (horizon is None or next_hit - i <= horizon):
                hit[s] += 1
        for s, n in seen.items():
            runs.append(r), states.append(s), visits.append(n), hits.append(hit[s]), weights.append(weight)
    return OutcomeCounts(np.asarray(runs, dtype=np.int64), np.asarray(states, dtype=np.int64),
                         np.asarray(visits, dtype=float), np.asarray(hits, dtype=float),
                         np.asarray(weights, dtype=float), dtmc.size)


def _blend(k: np.ndarray, n: np.ndarray, p: np.ndarray, kappa: float) -> np.ndarray:
    if math.isinf(kappa):
        return p
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (k + kappa * p) / (n + kappa)
    return np.where(n > 0, out, p)


def choose_kappa(counts: OutcomeCounts, p: np.ndarray, grid: Sequence[float] = KAPPA_GRID) -> tuple[float, list[float]]:
    """The strength with the lowest leave-one-run-out Brier score (ties: the larger κ), and every score.

    Leaving out one copy of a run removes its visits and hits from its states' counts;
    its ``v`` visits with ``h`` hits then score ``v·pred² − 2·pred·h + h``.
    """
    s, v, h, w = counts.state, counts.visits, counts.hits, counts.weight
    n_out, k_out, prior = counts.n[s] - v, counts.k[s] - h, p[s]
    total = float((v * w).sum()) or 1.0
    scores = []
    for kappa in grid:
        pred = _blend(k_out, n_out, prior, kappa)
        scores.append(float((w * (v * pred * pred - 2 * pred * h + h)).sum()) / total)
    best = min(range(len(grid)), key=lambda i: (round(scores[i], 12), -grid[i]))
    return float(grid[best]), scores


def shrink(values: np.ndarray, counts: OutcomeCounts, kappa: float) -> np.ndarray:
    """The blended values ``(k + κ·p)/(n + κ)`` where a state was visited, ``p`` elsewhere.

    Being affine in ``p`` with a non-negative slope, the same map carries Storm's
    numerical bounds on ``p`` to bounds on the blended value.
    """
    return _blend(counts.k, counts.n, np.asarray(values, dtype=float), kappa)


def shrink_properties(properties: list[CheckedProperty], paths: Mapping[tuple[int, ...], int], dtmc: LearnedDTMC,
                      predicates: PredicateSet, monitors: Sequence[Monitor], labels: Mapping[str, Sequence[int]],
                      setting: float | str) -> tuple[list[CheckedProperty], dict[str, Any]]:
    """Each reach property's values (and Storm's bounds) blended; what was chosen, per property."""
    walked = product_paths(paths, dtmc, predicates, monitors)
    out: list[CheckedProperty] = []
    report: dict[str, Any] = {}
    for prop in properties:
        target = reach_label(prop.outcome.formula)
        if target is None or target[0] not in labels:
            out.append(prop)
            report[prop.name] = {"kappa": None, "reason": "not a reach property (F or F<=h of a label)"}
            continue
        labelled = np.zeros(dtmc.size, dtype=bool)
        labelled[list(labels[target[0]])] = True
        counts = outcome_counts(walked, dtmc, labelled, target[1])
        o = prop.outcome
        if setting == "auto":
            kappa, scores = choose_kappa(counts, o.values)
            report[prop.name] = {"kappa": kappa, "grid": list(KAPPA_GRID), "loo_brier": scores}
        else:
            kappa = float(setting)
            report[prop.name] = {"kappa": kappa}
        outcome = replace(o, values=shrink(o.values, counts, kappa),
                          lower=None if o.lower is None else shrink(o.lower, counts, kappa),
                          upper=None if o.upper is None else shrink(o.upper, counts, kappa))
        out.append(CheckedProperty(prop.definition, outcome))
    for entry in report.values():  # JSON has no infinity: ∞ means "the chain alone"
        if entry["kappa"] is not None and math.isinf(entry["kappa"]):
            entry["kappa"] = "inf"
        if "grid" in entry:
            entry["grid"] = ["inf" if math.isinf(g) else g for g in entry["grid"]]
    return out, report
