"""Shrinking the chain's risk towards the observed outcome frequency where data is plentiful.

The chain's value ``p_s`` of a property in product state ``s`` rests on the Markov
assumption; the training runs also say directly how often a visit to ``s`` was followed
by the property failing: ``k_s`` of ``n_s`` visits. The stored value is the posterior
mean of a Beta prior centred on the chain with strength ``κ``::

    v_s = (k_s + κ·p_s) / (n_s + κ)          (n_s = 0: v_s = p_s)

so a rarely visited state keeps the chain's value (which generalises over the whole
chain) and a much visited one moves to its own frequency (which needs no Markov
assumption). ``κ`` is chosen per property by 5-fold cross-validation over the distinct
training runs of the per-step Brier score (the figure ``forewarn evaluate`` reports):
for each fold the chain is learned and checked again without it, and the fold's visits
are predicted from the other folds' chain and counts. Refitting matters: a chain that
saw the run it predicts looks better than it is, and picks too large a κ.

Only properties of the form ``F "label"`` and ``F<=h "label"`` have an outcome that a
finite run decides at every step; other formulas keep the chain's values.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from guard.learning import LearnedDTMC
from guard.model import CheckedProperty
from guard.predicates import PredicateSet
from monitors.base import VIOL, Monitor

__all__ = ["KAPPA_GRID", "FOLDS", "Fit", "OutcomeCounts", "walk", "outcome_counts", "choose_kappa", "shrink",
           "reach_label", "shrink_properties"]

# Candidate strengths for ``shrink: auto`` (∞: the chain alone), ascending.
KAPPA_GRID = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, math.inf)
FOLDS = 5
CV_PATHS = 1000  # at most this many distinct runs (every m-th in sorted order) take part in choosing κ
_REACH = re.compile(r'^P=\?\s*\[\s*F\s*(?:<=\s*(\d+)\s*)?"([^"]+)"\s*\]$')

Paths = Mapping[tuple[int, ...], int]
Walked = list[tuple[list[int], list[tuple[int, tuple[int, ...]]], int]]  # (state indices, (bits, q) per step, weight)


@dataclass(frozen=True)
class Fit:
    """A chain learned and checked from some runs: its product, and each property's values."""

    dtmc: LearnedDTMC
    values: list[np.ndarray]


def reach_label(query: str) -> tuple[str, int | None] | None:
    """``(label, h)`` for ``P=? [F<=h "label"]`` (``h`` None for ``F``), else None."""
    match = _REACH.match(query.strip())
    if match is None:
        return None
    return match.group(2), None if match.group(1) is None else int(match.group(1))


def label_test(label: str, predicates: PredicateSet, monitors: Sequence[Monitor]) -> Callable[
        [int, tuple[int, ...]], bool] | None:
    """Whether a label holds in a product state (bits, monitor states), as guard/storm.py labels it."""
    names = [m.name for m in monitors]
    if label == "unsafe":
        return lambda bits, q: predicates.is_unsafe(bits) or VIOL in q
    if label in predicates.names:
        bit = predicates.names.index(label)
        return lambda bits, q: bool(bits >> bit & 1)
    if label.startswith("viol_") and label[5:] in names:
        k = names.index(label[5:])
        return lambda bits, q: q[k] == VIOL
    return None  # end, init: nothing a visit can be followed by


class OutcomeCounts:
    """Per (distinct run, product state): visits and visits followed by the outcome.

    ``run``, ``state``, ``visits``, ``hits`` and ``weight`` are parallel arrays over
    (run, state) pairs; ``weight`` is how many training runs had that abstract path
    (identical runs are counted once, weighted). ``n`` and ``k`` total them per state.
    """

    def __init__(self, run: np.ndarray, state: np.ndarray, visits: np.ndarray, hits: np.ndarray,
                 weight: np.ndarray, size: int) -> None:
        self.run, self.state, self.visits, self.hits, self.weight = run, state, visits, hits, weight
        self.n = np.bincount(state, weights=visits * weight, minlength=size)
        self.k = np.bincount(state, weights=hits * weight, minlength=size)


def walk(paths: Paths, dtmc: LearnedDTMC, predicates: PredicateSet, monitors: Sequence[Monitor]) -> Walked:
    """Each distinct abstract path as product states (-1 where ``dtmc`` lacks one), up to its first violation."""
    index = dtmc.product_index()
    out = []
    for path, weight in paths.items():
        q: tuple[int, ...] | None = None
        states, steps = [], []
        for bits in path:
            q = tuple(m.step(m.initial if q is None else q[k], bits) for k, m in enumerate(monitors))
            states.append(index.get((bits, q), -1))
            steps.append((bits, q))
            if predicates.is_unsafe(bits) or VIOL in q:
                break
        out.append((states, steps, weight))
    return out


def outcome_counts(walked: Walked, holds: Callable[[int, tuple[int, ...]], bool], horizon: int | None,
                   predicates: PredicateSet, size: int) -> OutcomeCounts:
    """Visits before a run's violation, and those followed by a state where the label ``holds``
    (within ``horizon`` steps); visits to states the chain lacks (-1) are left out."""
    runs, states, visits, hits, weights = [], [], [], [], []
    for r, (path, steps, weight) in enumerate(walked):
        seen: Counter[int] = Counter()
        hit: Counter[int] = Counter()
        next_hit = math.inf
        last = len(path) - 1
        violates = predicates.is_unsafe(steps[last][0]) or VIOL in steps[last][1]
        for i in range(last, -1, -1):
            if holds(*steps[i]):
                next_hit = i
            if (i == last and violates) or path[i] < 0:
                continue
            seen[path[i]] += 1
            if next_hit < math.inf and (horizon is None or next_hit - i <= horizon):
                hit[path[i]] += 1
        for s, n in seen.items():
            runs.append(r), states.append(s), visits.append(n), hits.append(hit[s]), weights.append(weight)
    return OutcomeCounts(np.asarray(runs, dtype=np.int64), np.asarray(states, dtype=np.int64),
                         np.asarray(visits, dtype=float), np.asarray(hits, dtype=float),
                         np.asarray(weights, dtype=float), size)


def _blend(k: np.ndarray, n: np.ndarray, p: np.ndarray, kappa: float) -> np.ndarray:
    if math.isinf(kappa):
        return p
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (k + kappa * p) / (n + kappa)
    return np.where(n > 0, out, p)


def choose_kappa(paths: Paths, fit: Callable[[Paths], Fit], targets: Mapping[int, tuple[Callable[..., bool],
                 int | None]], predicates: PredicateSet, monitors: Sequence[Monitor],
                 grid: Sequence[float] = KAPPA_GRID) -> dict[int, tuple[float, list[float]]]:
    """Per property index in ``targets``: the κ with the lowest cross-validated Brier score, and every score.

    Folds: the distinct paths in sorted order (every m-th of them beyond :data:`CV_PATHS`),
    dealt round-robin (deterministic). A fold's
    ``v`` visits with ``h`` hits to state ``s`` score ``v·pred² − 2·pred·h + h`` with
    ``pred`` the blend of the other folds' chain value and counts. Ties go to the larger κ.
    """
    items = sorted(paths.items())
    if len(items) > CV_PATHS:  # κ needs no more: bound the refits' cost on large inputs
        items = items[::math.ceil(len(items) / CV_PATHS)]
    sums = {i: np.zeros(len(grid)) for i in targets}
    scored = 0.0
    for fold in range(FOLDS):
        train = {p: w for n, (p, w) in enumerate(items) if n % FOLDS != fold}
        test = {p: w for n, (p, w) in enumerate(items) if n % FOLDS == fold}
        if not train or not test:
            continue
        fitted = fit(train)
        size = fitted.dtmc.size
        seen_train, seen_test = (walk(x, fitted.dtmc, predicates, monitors) for x in (train, test))
        for i, (holds, horizon) in targets.items():
            known = outcome_counts(seen_train, holds, horizon, predicates, size)
            held = outcome_counts(seen_test, holds, horizon, predicates, size)
            s, v, h, w = held.state, held.visits, held.hits, held.weight
            for g, kappa in enumerate(grid):
                pred = _blend(known.k[s], known.n[s], fitted.values[i][s], kappa)
                sums[i][g] += float((w * (v * pred * pred - 2 * pred * h + h)).sum())
            if i == min(targets):
                scored += float((w * v).sum())
    out = {}
    for i, total in sums.items():
        scores = (total / max(scored, 1.0)).tolist()
        best = min(range(len(grid)), key=lambda g: (round(scores[g], 12), -grid[g]))
        out[i] = (float(grid[best]), scores)
    return out


def shrink(values: np.ndarray, counts: OutcomeCounts, kappa: float) -> np.ndarray:
    """The blended values ``(k + κ·p)/(n + κ)`` where a state was visited, ``p`` elsewhere.

    Being affine in ``p`` with a non-negative slope, the same map carries Storm's
    numerical bounds on ``p`` to bounds on the blended value.
    """
    return _blend(counts.k, counts.n, np.asarray(values, dtype=float), kappa)


def shrink_properties(properties: list[CheckedProperty], paths: Paths, dtmc: LearnedDTMC,
                      predicates: PredicateSet, monitors: Sequence[Monitor], setting: float | str,
                      fit: Callable[[Paths], Fit] | None = None) -> tuple[list[CheckedProperty], dict[str, Any]]:
    """Each reach property's values (and Storm's bounds) blended; what was chosen, per property.

    Args:
        setting: κ, or ``"auto"`` (then ``fit`` learns and checks a chain from some runs).
    """
    walked = walk(paths, dtmc, predicates, monitors)
    targets: dict[int, tuple[Callable[..., bool], int | None]] = {}
    report: dict[str, Any] = {}
    for i, prop in enumerate(properties):
        target = reach_label(prop.outcome.formula)
        holds = None if target is None else label_test(target[0], predicates, monitors)
        if target is None or holds is None:
            report[prop.name] = {"kappa": None, "reason": "not a reach property (F or F<=h of a label)"}
        else:
            targets[i] = (holds, target[1])
    chosen: dict[int, tuple[float, list[float]]] = {}
    if setting == "auto" and targets:
        if fit is None:
            raise ValueError("shrink 'auto' needs a fit function")
        chosen = choose_kappa(paths, fit, targets, predicates, monitors)
    out: list[CheckedProperty] = []
    for i, prop in enumerate(properties):
        if i not in targets:
            out.append(prop)
            continue
        if setting == "auto":
            kappa, scores = chosen[i]
            report[prop.name] = {"kappa": kappa, "grid": list(KAPPA_GRID), "cv_brier": scores, "folds": FOLDS}
        else:
            kappa = float(setting)
            report[prop.name] = {"kappa": kappa}
        counts = outcome_counts(walked, targets[i][0], targets[i][1], predicates, dtmc.size)
        o = prop.outcome
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
