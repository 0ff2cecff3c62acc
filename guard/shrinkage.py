"""Shrinking the chain's risk towards the observed outcome frequency where data is plentiful.

The chain's value ``p_s`` of a property in product state ``s`` rests on the Markov
assumption; the training runs also say directly how often a run that reached ``s`` went on
to fail the property: ``k_s`` of the ``n_s`` runs that visited ``s``, each run counted once,
with the outcome after its *first* visit (guard/outcomes.py). The stored value is the
posterior mean of a Beta prior centred on the chain with strength ``κ``::

    v_s = (k_s + κ·p_s) / (n_s + κ)          (n_s = 0: v_s = p_s)

so a rarely visited state keeps the chain's value (which generalises over the whole
chain) and a much visited one moves to its own frequency (which needs no Markov
assumption). Counting every visit instead would weigh a run by how long it lingers: where
safe runs stay longer in a state, the frequency, and the blend, would understate the risk of
a run that gets there. ``κ`` is chosen per property by 5-fold cross-validation over the
distinct training runs of the per-step Brier score (the figure ``forewarn evaluate``
reports): for each fold the chain is learned and checked again without it, and the fold's
visits are predicted from the other folds' chain and counts. Refitting matters: a chain that
saw the run it predicts looks better than it is, and picks too large a κ. The chain alone
(κ = ∞) is the default, and another κ is taken only when its improvement over held-out runs
is significant (:func:`choose_kappa`).

**Never worse than counting.** ``forewarn evaluate`` scores every model beside counting: the
share of a state's *visits* followed by a violation (``guard/evaluation/baselines.py``). That
per-visit frequency ``K_s / V_s`` is what the per-step Brier score rewards where runs linger
(a state held ten steps is scored ten times), and no first-visit blend reaches it. So
``shrink: auto`` also weighs the blends towards the visit frequency,
``(K_s + κ·p_s) / (V_s + κ)``, κ ∈ {1} ∪ the grid, whose κ = 1 is counting with one visit's
worth of the chain added: counting where the runs visited ``s`` much, never exactly 0 where the
chain is not (a risk of 0 is what the chain refuses on purpose; the chain's value where the runs
never visited ``s``, where counting has none), and the
stacks ``w·p_s + (1 − w)·K_s/V_s`` between the chain and counting. **Counting is the default**,
the baseline every model is scored against: any other estimate replaces it only if it beats it
significantly on the held-out folds (taking the lower scoring of two close estimates is a coin
toss on new runs). With ``learning.memory`` the chain's states are finer than counting's (a
state's histories apart), counting over them is not the baseline and is noisier: the chain
alone is the default there, as before, and counting must earn its place like any blend.
Without a violation in the training runs counting says 0 everywhere, which the chain refuses
on purpose (docs/method.md, "Learning"): the chain alone is the default then, and only the
first-visit blends are weighed. The choice is made inside the training runs only (their own
folds), so a held-out figure never informs it.

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

# Candidate strengths for ``shrink: auto`` (∞: the chain alone), ascending.
KAPPA_GRID = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, math.inf)
# Strengths of the blends towards the visit frequency (1: counting, with one visit's worth of the chain).
VISIT_GRID = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
# The chain's weight in the stacks of the chain and counting, w·p_s + (1 − w)·K_s/V_s (0 and 1: the two alone).
STACK_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
FOLDS = 5
Z_IMPROVE = 1.645  # a κ must beat the chain alone by this many standard errors (one-sided 5 %)
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


def _first_totals(summaries: Sequence[PathVisits], targets: int) -> tuple[Counter[Key], list[Counter[Key]]]:
    """Per state, the runs that visited it and, per target, those whose first visit the target followed:
    each run counts once (every-visit counts weigh a run that lingers by its length)."""
    n: Counter[Key] = Counter()
    k: list[Counter[Key]] = [Counter() for _ in range(targets)]
    for pv in summaries:
        for key in pv.visits:
            n[key] += pv.weight
        for t, first in enumerate(pv.first):
            for key in first:
                k[t][key] += pv.weight
    return n, k


def _visit_totals(summaries: Sequence[PathVisits], targets: int) -> tuple[Counter[Key], list[Counter[Key]]]:
    """Per state, every visit of every run and, per target, the visits it followed (counting's figures)."""
    n: Counter[Key] = Counter()
    k: list[Counter[Key]] = [Counter() for _ in range(targets)]
    for pv in summaries:
        for key, v in pv.visits.items():
            n[key] += v * pv.weight
        for t, hits in enumerate(pv.hits):
            for key, h in hits.items():
                k[t][key] += h * pv.weight
    return n, k


def _blend(k: np.ndarray, n: np.ndarray, p: np.ndarray, kappa: float) -> np.ndarray:
    if math.isinf(kappa):
        return p
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (k + kappa * p) / (n + kappa)
    return np.where(n > 0, out, p)


Choice = tuple[str, float]  # (what κ blends towards: "runs" first visits, "visits" every visit; κ)


def candidates() -> list[Choice]:
    """Every estimate ``shrink: auto`` weighs, in the order of its scores: the blends towards first visits
    (κ), towards every visit (κ), then the stacks of the chain and counting (the chain's weight)."""
    return ([("runs", kappa) for kappa in KAPPA_GRID] + [("visits", kappa) for kappa in VISIT_GRID]
            + [("stack", w) for w in STACK_GRID])


def estimate(choice: Choice, runs: tuple[np.ndarray, np.ndarray], visits: tuple[np.ndarray, np.ndarray],
             p: np.ndarray) -> np.ndarray:
    """The stored value for a choice, from the (hits, runs) of first visits, the (hits, visits) of every
    visit, and the chain's values ``p``; a state the runs never visited keeps ``p``."""
    towards, kappa = choice
    if towards == "runs":
        return _blend(*runs, p, kappa)
    if towards == "visits":
        return _blend(*visits, p, kappa)
    return kappa * p + (1.0 - kappa) * _blend(*visits, p, 0.0)


CHAIN_ALONE: Choice = ("runs", math.inf)
COUNTING: Choice = ("visits", 1.0)


def choose_kappa(summaries: Mapping[tuple[int, ...], PathVisits], fit: Callable[[Paths], Fit],
                 properties: Sequence[int], baseline: Choice = COUNTING) -> list[tuple[Choice, list[float]]]:
    """Per target (property index ``properties[t]`` of a fit): the blend chosen, and every candidate's
    held-out Brier score (in the order of :func:`candidates`).

    Folds: the distinct paths in sorted order (every m-th of them beyond :data:`CV_PATHS`),
    dealt round-robin (deterministic; copies of one run stay in one fold). For each fold, ``fit``
    learns and checks the chain from every other run, whose first-visit and every-visit counts give
    the frequencies; the fold's ``v`` visits with ``h`` hits to a state score ``v·pred² − 2·pred·h + h``
    (the per-step Brier score ``forewarn evaluate`` reports).

    ``baseline`` is the default (:data:`COUNTING`; the pipeline gives :data:`CHAIN_ALONE` for a chain
    with memory), and the chain alone where the runs hold no violation; the candidate with the lowest
    score replaces it only if it improves the held-out score by more than :data:`Z_IMPROVE` standard
    errors of the per-run improvements (a one-sided paired test over held-out runs), so noise cannot
    pick an estimate that does worse than the baseline.
    """
    grid = candidates()
    items = sorted(summaries)
    if len(items) > CV_PATHS:  # κ needs no more held-out runs: bound the refits' cost on large inputs
        items = items[::math.ceil(len(items) / CV_PATHS)]
    targets = len(properties)
    (fn, fk), (vn, vk) = _first_totals(list(summaries.values()), targets), _visit_totals(list(summaries.values()), targets)
    per_run: list[list[np.ndarray]] = [[] for _ in range(targets)]  # per fold: runs × grid, each run's sum
    weights: list[list[np.ndarray]] = [[] for _ in range(targets)]
    scored = 0.0
    for fold in range(FOLDS):
        test = [p for i, p in enumerate(items) if i % FOLDS == fold]
        if not test or len(test) == len(summaries):
            continue
        fitted = fit({p: summaries[p].weight for p in test})  # learned without the fold
        index = fitted.dtmc.product_index()
        (hfn, hfk), (hvn, hvk) = (_first_totals([summaries[p] for p in test], targets),
                                  _visit_totals([summaries[p] for p in test], targets))
        for t in range(targets):
            rows = []  # (run, state index, training runs, their hits, training visits, their hits, v, h)
            for r, p in enumerate(test):
                pv = summaries[p]
                for key, v in pv.visits.items():
                    s = index.get(key)
                    if s is not None:
                        rows.append((r, s, fn[key] - hfn[key], vn[key] - hvn[key], fk[t][key] - hfk[t][key],
                                     vk[t][key] - hvk[t][key], v, pv.hits[t].get(key, 0)))
            if not rows:
                continue
            r_, s_, n_runs, n_visits, k_runs, k_visits, v_, h = (np.asarray(c, dtype=float) for c in zip(*rows))
            p_ = fitted.values[properties[t]][s_.astype(np.int64)]
            runs = r_.astype(np.int64)
            sums = np.zeros((len(test), len(grid)))
            for g, choice in enumerate(grid):
                pred = estimate(choice, (k_runs, n_runs), (k_visits, n_visits), p_)
                sums[:, g] = np.bincount(runs, weights=v_ * pred * pred - 2 * pred * h + h, minlength=len(test))
            per_run[t].append(sums)
            weights[t].append(np.array([summaries[p].weight for p in test], dtype=float))
            if t == 0:
                scored += float((np.array([summaries[p].weight for p in test])[runs] * v_).sum())
    out = []
    chain_alone = grid.index(CHAIN_ALONE)
    for t in range(targets):
        if not per_run[t]:
            out.append((CHAIN_ALONE, [math.nan] * len(grid)))
            continue
        sums, w = np.concatenate(per_run[t]), np.concatenate(weights[t])
        total = (w[:, None] * sums).sum(axis=0)
        scores = (total / max(scored, 1.0)).tolist()
        # without a single violation counting says 0 everywhere, which the chain refuses on purpose (an
        # unsafe state the spec allows is in the model, seen or not): only the first-visit blends then
        allowed = range(len(grid)) if sum(vk[t].values()) else range(len(KAPPA_GRID))
        default = grid.index(baseline) if grid.index(baseline) in allowed else chain_alone  # others must beat it
        best = min(allowed, key=lambda g: (round(scores[g], 12), g != default))
        gain = sums[:, default] - sums[:, best]  # per run: how much the best improved on the default
        mean = float((w * gain).sum() / w.sum())
        spread = math.sqrt(float((w * (gain - mean) ** 2).sum()))  # the standard error of the total gain
        chosen = best if float((w * gain).sum()) > Z_IMPROVE * spread else default
        out.append((grid[chosen], scores))
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
                      summaries: Mapping[tuple[int, ...], PathVisits] | None = None,
                      baseline: Choice = COUNTING) -> tuple[list[CheckedProperty], dict[str, Any]]:
    """Each reach property's values (and Storm's bounds) blended; what was chosen, per property.

    Args:
        setting: κ, or ``"auto"`` (then ``fit`` learns and checks a chain from every run but
            the given ones).
        summaries: :func:`summarize_paths` of ``paths`` over :func:`reach_targets`, when the
            caller made them already (the pipeline shares them with the outcome intervals).
        baseline: what ``auto`` keeps unless another estimate beats it significantly.
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
        choices = choose_kappa(summaries, fit, chosen, baseline)
    else:
        choices = [(("runs", float(setting)), [])] * len(chosen)
    totals = {"runs": _first_totals(list(summaries.values()), len(chosen)),
              "visits": _visit_totals(list(summaries.values()), len(chosen))}
    index = dtmc.product_index()
    out = list(properties)
    for t, i in enumerate(chosen):
        choice, scores = choices[t]
        arrays = {}
        for kind, (n_all, k_all) in totals.items():
            n, k = np.zeros(dtmc.size), np.zeros(dtmc.size)
            for key, v in n_all.items():
                n[index[key]] = v
            for key, h in k_all[t].items():
                k[index[key]] = h
            arrays[kind] = (k, n)
        prop = properties[i]
        first, stacked = len(KAPPA_GRID), len(KAPPA_GRID) + len(VISIT_GRID)
        towards, kappa = choice
        report[prop.name] = {"kappa": kappa} if setting != "auto" else {
            "kappa": None if towards == "stack" else kappa, "towards": towards,
            "chain_weight": kappa if towards == "stack" else None,
            "grid": list(KAPPA_GRID), "cv_brier": scores[:first], "visit_grid": list(VISIT_GRID),
            "cv_brier_visits": scores[first:stacked], "stack_grid": list(STACK_GRID), "cv_brier_stacks": scores[stacked:],
            "folds": FOLDS}
        o = prop.outcome

        def value(p: np.ndarray) -> np.ndarray:
            return estimate(choice, arrays["runs"], arrays["visits"], p)  # noqa: B023  (used in this iteration)

        outcome = replace(o, values=value(o.values), lower=None if o.lower is None else value(o.lower),
                          upper=None if o.upper is None else value(o.upper))
        out[i] = CheckedProperty(prop.definition, outcome)
    for entry in report.values():  # JSON has no infinity: ∞ means "the chain alone"
        if entry["kappa"] is not None and math.isinf(entry["kappa"]):
            entry["kappa"] = "inf"
        if "grid" in entry:
            entry["grid"] = ["inf" if math.isinf(g) else g for g in entry["grid"]]
    return out, report
