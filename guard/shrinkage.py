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

from ..errors import UsageError
from ..monitors.base import VIOL, Monitor
from .learning import LearnedDTMC
from .model import CheckedProperty
from .predicates import PredicateSet

__all__ = ["KAPPA_GRID", "FOLDS", "CV_PATHS", "Fit", "PathVisits", "summarize_paths", "choose_kappa",
           "reach_label", "label_test", "reach_targets", "shrink_properties"]

# Candidate strengths for ``shrink: auto`` (∞: the chain alone), ascending.
KAPPA_GRID = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, math.inf)
FOLDS = 5
CV_PATHS = 1000  # at most this many distinct runs (every m-th in sorted order) take part in choosing κ
_REACH = re.compile(r'^P=\?\s*\[\s*F\s*(?:<=\s*(\d+)\s*)?"([^"]+)"\s*\]$')

Paths = Mapping[tuple[int, ...], int]


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


Key = tuple[int, tuple[int, ...]]  # a product state by its content: (chain state bits, monitor states)


@dataclass(frozen=True)
class PathVisits:
    """One distinct run: how often each product state was visited before its violation, and how
    many of those visits each target label followed (within its horizon); ``weight`` copies.

    ``first``: per target, the states whose *first* visit in the run the target followed
    (within its horizon). Every-visit counts of one run depend on each other; first visits
    give one independent outcome per run and state (guard/outcomes.py).
    """

    weight: int
    visits: dict[Key, int]
    hits: list[dict[Key, int]]  # per target
    first: list[frozenset[Key]]  # per target


def summarize_paths(paths: Paths, predicates: PredicateSet, monitors: Sequence[Monitor],
                    targets: Sequence[tuple[Callable[[int, tuple[int, ...]], bool], int | None]]) -> dict[
                        tuple[int, ...], PathVisits]:
    """Per distinct path, its visits and hits by product state: one pass over the steps."""
    out = {}
    for path, weight in paths.items():
        q: tuple[int, ...] | None = None
        keys: list[Key] = []
        for bits in path:
            q = tuple(m.step(m.initial if q is None else q[k], bits) for k, m in enumerate(monitors))
            keys.append((bits, q))
            if predicates.is_unsafe(bits) or VIOL in q:
                break
        last = len(keys) - 1
        scored = last if predicates.is_unsafe(keys[last][0]) or VIOL in keys[last][1] else last + 1
        visits: Counter[Key] = Counter(keys[:scored])
        hits, first = [], []
        for holds, horizon in targets:
            hit: Counter[Key] = Counter()
            outcome: dict[Key, bool] = {}  # walking backwards, the last write is the first visit's
            next_hit = math.inf
            for i in range(last, -1, -1):
                if holds(*keys[i]):
                    next_hit = i
                if i < scored:
                    followed = next_hit < math.inf and (horizon is None or next_hit - i <= horizon)
                    outcome[keys[i]] = followed
                    if followed:
                        hit[keys[i]] += 1
            hits.append(dict(hit))
            first.append(frozenset(key for key, followed in outcome.items() if followed))
        out[path] = PathVisits(weight, dict(visits), hits, first)
    return out


def _totals(summaries: Sequence[PathVisits], targets: int) -> tuple[Counter[Key], list[Counter[Key]]]:
    n: Counter[Key] = Counter()
    k: list[Counter[Key]] = [Counter() for _ in range(targets)]
    for pv in summaries:
        for key, v in pv.visits.items():
            n[key] += v * pv.weight
        for t, hit in enumerate(pv.hits):
            for key, h in hit.items():
                k[t][key] += h * pv.weight
    return n, k


def _blend(k: np.ndarray, n: np.ndarray, p: np.ndarray, kappa: float) -> np.ndarray:
    if math.isinf(kappa):
        return p
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (k + kappa * p) / (n + kappa)
    return np.where(n > 0, out, p)


def choose_kappa(summaries: Mapping[tuple[int, ...], PathVisits], fit: Callable[[Paths], Fit],
                 properties: Sequence[int], grid: Sequence[float] = KAPPA_GRID) -> list[tuple[float, list[float]]]:
    """Per target (property index ``properties[t]`` of a fit): the κ with the lowest cross-validated
    Brier score, and every score.

    Folds: the distinct paths in sorted order (every m-th of them beyond :data:`CV_PATHS`),
    dealt round-robin (deterministic). For each fold, ``fit`` learns and checks the chain
    from every other run, whose counts also give the frequencies; the fold's ``v`` visits
    with ``h`` hits to a state score ``v·pred² − 2·pred·h + h``. Ties go to the larger κ.
    """
    items = sorted(summaries)
    if len(items) > CV_PATHS:  # κ needs no more held-out runs: bound the refits' cost on large inputs
        items = items[::math.ceil(len(items) / CV_PATHS)]
    targets = len(properties)
    n_all, k_all = _totals(list(summaries.values()), targets)
    sums = [np.zeros(len(grid)) for _ in range(targets)]
    scored = 0.0
    for fold in range(FOLDS):
        test = [p for i, p in enumerate(items) if i % FOLDS == fold]
        if not test or len(test) == len(summaries):
            continue
        fitted = fit({p: summaries[p].weight for p in test})  # learned without the fold
        index = fitted.dtmc.product_index()
        n_test, k_test = _totals([summaries[p] for p in test], targets)
        for t in range(targets):
            rows = []  # (state index, training visits, training hits, v, h, weight)
            for p in test:
                pv = summaries[p]
                for key, v in pv.visits.items():
                    s = index.get(key)
                    if s is not None:
                        rows.append((s, n_all[key] - n_test[key], k_all[t][key] - k_test[t][key], v,
                                     pv.hits[t].get(key, 0), pv.weight))
            if not rows:
                continue
            s_, n_, k_, v_, h, w = (np.asarray(c, dtype=float) for c in zip(*rows))
            p_ = fitted.values[properties[t]][s_.astype(np.int64)]
            for g, kappa in enumerate(grid):
                pred = _blend(k_, n_, p_, kappa)
                sums[t][g] += float((w * (v_ * pred * pred - 2 * pred * h + h)).sum())
            if t == 0:
                scored += float((w * v_).sum())
    out = []
    for total in sums:
        scores = (total / max(scored, 1.0)).tolist()
        best = min(range(len(grid)), key=lambda g: (round(scores[g], 12), -grid[g]))
        out.append((float(grid[best]), scores))
    return out


def reach_targets(properties: Sequence[CheckedProperty], predicates: PredicateSet, monitors: Sequence[Monitor]
                  ) -> tuple[list[int], list[tuple[Callable[[int, tuple[int, ...]], bool], int | None]]]:
    """The reach properties' indices, and for each its label test and horizon (for :func:`summarize_paths`)."""
    chosen: list[int] = []
    targets = []
    for i, prop in enumerate(properties):
        target = reach_label(prop.outcome.formula)
        holds = None if target is None else label_test(target[0], predicates, monitors)
        if target is not None and holds is not None:
            chosen.append(i)
            targets.append((holds, target[1]))
    return chosen, targets


def shrink_properties(properties: list[CheckedProperty], paths: Paths, dtmc: LearnedDTMC,
                      predicates: PredicateSet, monitors: Sequence[Monitor], setting: float | str,
                      fit: Callable[[Paths], Fit] | None = None,
                      summaries: Mapping[tuple[int, ...], PathVisits] | None = None
                      ) -> tuple[list[CheckedProperty], dict[str, Any]]:
    """Each reach property's values (and Storm's bounds) blended; what was chosen, per property.

    Args:
        setting: κ, or ``"auto"`` (then ``fit`` learns and checks a chain from every run but
            the given ones).
        summaries: :func:`summarize_paths` of ``paths`` over :func:`reach_targets`, when the
            caller made them already (the pipeline shares them with the outcome intervals).
    """
    report: dict[str, Any] = {}
    chosen, targets = reach_targets(properties, predicates, monitors)
    for i, prop in enumerate(properties):
        if i not in chosen:
            report[prop.name] = {"kappa": None, "reason": "not a reach property (F or F<=h of a label)"}
    if not chosen:
        return properties, report
    if summaries is None:  # else the caller's, made over the same reach properties in order
        summaries = summarize_paths(paths, predicates, monitors, targets)
    if setting == "auto":
        if fit is None:
            raise UsageError("shrink 'auto' needs a fit function")
        kappas = choose_kappa(summaries, fit, chosen)
    else:
        kappas = [(float(setting), [])] * len(chosen)
    n_all, k_all = _totals(list(summaries.values()), len(chosen))
    index = dtmc.product_index()
    n = np.zeros(dtmc.size)
    for key, v in n_all.items():
        n[index[key]] = v
    out = list(properties)
    for t, i in enumerate(chosen):
        k = np.zeros(dtmc.size)
        for key, h in k_all[t].items():
            k[index[key]] = h
        kappa, scores = kappas[t]
        prop = properties[i]
        report[prop.name] = {"kappa": kappa} if setting != "auto" else {
            "kappa": kappa, "grid": list(KAPPA_GRID), "cv_brier": scores, "folds": FOLDS}
        o = prop.outcome
        outcome = replace(o, values=_blend(k, n, o.values, kappa),
                          lower=None if o.lower is None else _blend(k, n, o.lower, kappa),
                          upper=None if o.upper is None else _blend(k, n, o.upper, kappa))
        out[i] = CheckedProperty(prop.definition, outcome)
    for entry in report.values():  # JSON has no infinity: ∞ means "the chain alone"
        if entry["kappa"] is not None and math.isinf(entry["kappa"]):
            entry["kappa"] = "inf"
        if "grid" in entry:
            entry["grid"] = ["inf" if math.isinf(g) else g for g in entry["grid"]]
    return out, report
