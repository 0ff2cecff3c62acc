"""``learning.kinds``: fit the mixture of kinds (guard/mixture.py), check each kind with Storm, and store it.

Each kind is a chain on the pooled chain's states and sparsity, so its product with the monitors
has the same states as the pooled product; Storm checks every kind's product for every guarded
property, and, with intervals on, its interval chain (guard/intervals.py, built from the kind's
weighted counts ``Σ_r γ_rk·c_r``) gives each kind's confidence interval, at ``δ/2K`` each.

A session weighs the kinds by its posterior (guard/mixture_posterior.py). A model's per-state values —
what ``forewarn states`` and ``check`` show, and a decision without a session — weigh them by
``ω_k(x)``, the share of kind ``k`` among the training runs that visited ``x`` (their
responsibilities), which estimates ``P(kind k | a run visits x)``: so the stored value estimates the
risk after a first visit to ``x``, whatever prefix led there. Its interval also allows for ``ω``
being estimated: each ``ω_k(x)`` gets a Clopper–Pearson interval (union bound over kinds and
visited states, ``δ/2`` in all), and the interval is the lowest (highest) ``Σ_k ω_k·v_k`` over the
weights inside those intervals that sum to 1, each ``v_k`` at its kind's lower (upper) end: a
linear programme over a box cut by the simplex, solved greedily (:func:`simplex_extreme`).
A state no training run visited takes the kinds' weights as ``ω`` and the widest such interval.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import InputError
from .chain import LearnedDTMC, visits
from .intervals import IntervalMethod, IntervalReport, clopper_pearson, estimated_entries, hoeffding
from .mixture import Mixture, PathTable, _Pattern, bic, choose_kinds, fit_mixture, path_table
from .mixture_bounds import (
    CP_SHARE,
    LABEL_SHARE,
    count_moments,
    first_visit_bounds,
    label_range,
    proportion_bounds,
    transition_moments,
)
from .mixture_gibbs import sample_labels
from .mixture_posterior import KindColumns, KindMixture
from .model import CheckedProperty
from .monitoring import build_product
from .predicates import PredicateSet
from .results import CheckOutcome
from .shrinkage import PathVisits, reach_targets, summarize_paths
from .storm import Method, build_interval_dtmc, build_sparse_dtmc, check_sparse_model, interval_bounds, labels_of

SAMPLED_RUNS = 1000  # above this many distinct runs the labels are not sampled (EM's responsibilities alone)


@dataclass(frozen=True)
class KindsFit:
    """A mixture as a model keeps it, the per-state properties it stores, and how it was made."""

    mixture: KindMixture
    properties: list[CheckedProperty]
    intervals: IntervalReport | None
    lever: dict[str, Any]


def simplex_extreme(values: np.ndarray, low: np.ndarray, high: np.ndarray, *, largest: bool = False) -> np.ndarray:
    """Per row, min (max) of ``Σ_k ω_k·values_k`` over ``low ≤ ω ≤ high`` with ``Σ_k ω_k = 1`` (rows × K).

    Greedy, which is optimal for a linear objective on a box cut by the simplex: every ω starts at its
    lower end, and the remaining mass goes to the smallest (largest) values first, each up to its upper end.
    """
    sign = -1.0 if largest else 1.0
    order = np.argsort(sign * values, axis=1, kind="stable")
    v, lo, hi = (np.take_along_axis(a, order, axis=1) for a in (values, low, high))
    room = np.clip(1.0 - lo.sum(axis=1), 0.0, None)
    capacity = np.clip(hi - lo, 0.0, None)
    before = np.cumsum(capacity, axis=1) - capacity
    extra = np.clip(room[:, None] - before, 0.0, capacity)
    out: np.ndarray = (v * (lo + extra)).sum(axis=1)
    return out


def visit_shares(table: PathTable, mixture: Mixture, summaries: Mapping[tuple[int, ...], PathVisits],
                 product: LearnedDTMC) -> tuple[np.ndarray, np.ndarray]:
    """Per product state: the runs that visited it (each once), and per kind the responsibility mass among them
    (states × K)."""
    visited = _indicators(summaries, product)[0]
    runs = np.asarray(visited.T @ table.weight).ravel()
    mass = np.asarray(visited.T @ (mixture.responsibilities * table.weight[:, None]))
    return runs, mass


def _indicators(summaries: Mapping[tuple[int, ...], PathVisits], product: LearnedDTMC
                ) -> tuple[sp.csr_matrix, list[sp.csr_matrix]]:
    """Runs (in the table's order) × product states: which states each run visited, and per reach target the
    states whose first visit the target followed."""
    index = product.product_index()
    items = sorted(summaries)
    targets = len(summaries[items[0]].first) if items else 0
    cells: list[list[tuple[int, int]]] = [[] for _ in range(targets + 1)]
    for r, path in enumerate(items):
        pv = summaries[path]
        cells[0] += [(r, index[key]) for key in pv.visits if key in index]
        for t, first in enumerate(pv.first):
            cells[t + 1] += [(r, index[key]) for key in first if key in index]

    def matrix(pairs: list[tuple[int, int]]) -> sp.csr_matrix:
        r, c = (np.array([p[i] for p in pairs], dtype=np.int64) for i in (0, 1))
        return sp.csr_matrix((np.ones(len(pairs)), (r, c)), shape=(len(items), product.size))

    return matrix(cells[0]), [matrix(c) for c in cells[1:]]


def learn_kinds(setting: int | str, *, paths: Mapping[tuple[int, ...], int], chain: LearnedDTMC,
                product: LearnedDTMC, predicates: PredicateSet, monitors: Sequence[Any],
                properties: Sequence[CheckedProperty], alpha: float, method: Method, precision: float,
                delta: float, intervals: IntervalMethod) -> KindsFit | dict[str, Any]:
    """Fit ``setting`` kinds (a number, or ``"auto"``) and check them; one kind: the lever's report alone."""
    started = time.perf_counter()
    for p in properties:
        if p.outcome.verdicts is not None or np.isnan(p.outcome.values).any():
            raise InputError(f"learning.kinds weighs probabilities, but property {p.name!r} ({p.outcome.formula}) "
                                "is a state formula with a bound: guard it as P=? [...] to learn kinds")
    table = path_table(paths, predicates, chain)
    scores = None
    if setting == "auto":
        kinds, scores = choose_kinds(table, chain, alpha)
    else:
        kinds = int(setting)
    lever: dict[str, Any] = {"setting": setting, "chosen": kinds}
    if scores:
        lever["bic"] = {str(k): round(v, 6) for k, v in scores.items()}
    if kinds == 1:
        lever["seconds"] = round(time.perf_counter() - started, 6)
        return lever
    mixture = fit_mixture(table, chain, kinds, alpha)
    supported = True
    if setting != "auto" and intervals is not IntervalMethod.NONE:  # auto chose K by BIC already
        supported = bic(table, chain, mixture) < bic(table, chain, fit_mixture(table, chain, 1, alpha))
        if not supported:
            lever["supported"] = "no: BIC prefers one kind, so each kind's interval where runs visited is [0, 1]"
    labels = labels_of(product)
    kind_method = Method.SOUND if method is Method.EXACT else method  # weighted counts are not integers
    each = delta / (2 * kinds)  # per kind: half to its transitions and starts, half to its first visits
    reach, targets = reach_targets(properties, predicates, monitors)
    summaries = summarize_paths(paths, predicates, monitors, targets)
    visited, followed = _indicators(summaries, product)
    seen = np.asarray(visited.sum(axis=0)).ravel() > 0
    items = int(seen.sum()) * len(reach)
    columns: list[list[KindColumns]] = []
    probabilities, counts, transition_low, transition_high, start_low, start_high = [], [], [], [], [], []
    report = None
    rows = np.repeat(np.arange(chain.size), np.diff(chain.matrix.indptr))
    drawn = None
    for k in range(kinds):
        part = _kind_chain(chain, mixture, k)
        kind_product = build_product(part, monitors)
        if kind_product.states != product.states or not _same(kind_product.monitor_states, product.monitor_states):
            raise AssertionError("a kind's product differs from the pooled one: the kinds share one sparsity")
        model = build_sparse_dtmc(kind_product.matrix, labels)
        outcomes = [check_sparse_model(model, p.outcome.formula, method=kind_method, precision=precision)
                    for p in properties]
        bounds: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(outcomes)
        if intervals is not IntervalMethod.NONE:
            gamma = mixture.responsibilities[:, k]
            moments = transition_moments(table.counts, table.weight, gamma, rows, chain.size)
            carried = [build_product(_kind_chain(chain, mixture, k, counts=m), monitors).counts.data
                       for m in moments[1:]]  # each product transition inherits its chain transition's
            # the union bound runs over the kind's estimated transitions and its start shares
            lower, upper, per_entry, entries = kind_intervals(kind_product, carried, each / 2, intervals,
                                                              estimated_entries(part) + len(table.starts))
            transition_low.append(lower)
            transition_high.append(upper)
            interval_model = build_interval_dtmc(kind_product.matrix, lower, upper, labels)
            bounds = [_contain(interval_bounds(interval_model, o.formula, precision=precision), o) for o in outcomes]
            if items and not supported:  # the runs do not tell the kinds apart: a kind's risk is not identified
                for i in reach:
                    b = bounds[i]
                    assert b is not None
                    bounds[i] = (np.where(seen, 0.0, b[0]), np.where(seen, 1.0, b[1]))
            elif items:  # where runs visited, the kind's first-visit interval (mixture_bounds.py): the hull of the
                # one from EM's responsibilities and the one from labels sampled with the fit's doubt in them
                sampling = len(table.weight) <= SAMPLED_RUNS  # its cost grows with the distinct runs
                if drawn is None and sampling:
                    drawn = sample_labels(table, _Pattern.of(chain), mixture, alpha)
                elif not sampling:
                    lever["sampled_labels"] = f"skipped: {len(table.weight)} distinct runs > {SAMPLED_RUNS}"
                gamma_n = count_moments(visited, table.weight, gamma)
                for t, i in enumerate(reach):
                    x = count_moments(followed[t], table.weight, gamma)
                    low, high = proportion_bounds((x[0], x[1], np.ones(len(seen))),
                                                  (gamma_n[0] - x[0], np.maximum(gamma_n[1] - x[1], 0.0),
                                                   np.ones(len(seen))), each / 2 / items, intervals)
                    if drawn is not None:
                        low_d, high_d = first_visit_bounds(drawn[:, :, k], visited, followed[t], each / 2 / items,
                                                           intervals)
                        low, high = np.minimum(low, low_d), np.maximum(high, high_d)
                    b = bounds[i]
                    assert b is not None
                    bounds[i] = _contain((np.where(seen, low, b[0]), np.where(seen, high, b[1]), 0.0), outcomes[i])
            low_s, high_s = _start_bounds(table, gamma, product, chain, per_entry, intervals)
            start_low.append(low_s)
            start_high.append(high_s)
            report = IntervalReport(intervals, float(delta), per_entry, entries)
        columns.append([KindColumns(o.values, o.lower, o.upper, *(b if b is not None else (None, None)))
                        for o, b in zip(outcomes, bounds)])
        probabilities.append(kind_product.matrix.data)
        counts.append(kind_product.counts.data)
    runs, mass = visit_shares(table, mixture, summaries, product)
    stored = _per_state(properties, columns, mixture, runs, mass, delta)
    initial = _product_initial(mixture, product, chain)
    transition_bounds = start_bounds = None
    if transition_low:
        transition_bounds = (np.array(transition_low), np.array(transition_high))
        point = initial * mixture.weights[:, None]  # w_k·π_k(x), as the model's own estimate holds it
        start_bounds = (np.minimum(np.array(start_low), point), np.maximum(np.array(start_high), point))
    kept = KindMixture(mixture.weights, initial, np.array(probabilities), np.array(counts), columns,
                       product.matrix.indptr, product.matrix.indices, str(setting), scores, transition_bounds,
                       start_bounds)
    seconds = round(time.perf_counter() - started, 6)
    lever.update(weights=[round(float(w), 6) for w in mixture.weights], seconds=seconds,
                 log_likelihood=round(mixture.log_likelihood, 6))
    if report is not None:
        report = IntervalReport(report.method, report.delta, report.delta_per_entry, report.entries, seconds)
    return KindsFit(kept, stored, report, lever)


def _start_bounds(table: PathTable, gamma: np.ndarray, product: LearnedDTMC, chain: LearnedDTMC, per: float,
                  method: IntervalMethod) -> tuple[np.ndarray, np.ndarray]:
    """Per product state, an interval of ``w_k·π_k(x)``, the share of all runs that are of kind ``k`` and start
    in ``x``: the kind's latent count of runs starting there (mixture_bounds.py) out of all runs."""
    mean, var = count_moments(sp.csr_matrix(table.starting), table.weight, gamma)
    low_n, high_n = label_range(mean, var, np.ones(len(mean)), per * LABEL_SHARE)
    total = np.full(len(mean), float(table.weight.sum()))
    bound = clopper_pearson if method is IntervalMethod.CLOPPER_PEARSON else hoeffding
    low_s, high_s = bound(low_n, total, per * CP_SHARE)[0], bound(high_n, total, per * CP_SHARE)[1]
    column = {int(s): c for c, s in enumerate(table.starts.tolist())}
    index = chain.index()
    low, high = np.zeros(product.size), np.zeros(product.size)
    for i, bits in enumerate(product.states[:-1]):
        c = column.get(index[bits])
        if c is not None and (i in product.initial or not product.monitors):
            low[i], high[i] = low_s[c], high_s[c]
    return low, high


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


def kind_intervals(product: LearnedDTMC, moments: Sequence[np.ndarray], delta: float, method: IntervalMethod,
                   entries: int) -> tuple[np.ndarray, np.ndarray, float, int]:
    """Per CSR entry of a kind's chain, an interval for its transition probability at ``δ/entries`` each: the
    proportion of the kind's latent count of the entry (mean: the kind's weighted count) out of its row's
    departures (mixture_bounds.py); ``moments``: the entry's count variance, and the rest of the row's mean and
    variance, and the summands' scale, per entry. Then widened to hold the point estimate.
    Returns (lower, upper, δ per entry, entries)."""
    matrix, counts = product.matrix, product.counts
    lengths = np.diff(matrix.indptr)
    rows = np.repeat(np.arange(product.size), lengths)
    x_var, o_mean, o_var, scale = moments
    per_entry = delta / max(entries, 1)
    lower, upper = np.zeros(len(matrix.data)), np.ones(len(matrix.data))
    estimated = (~product.absorbing[rows]) & (lengths[rows] >= 2) & (visits(product)[rows] > 0)
    if estimated.any():
        e = estimated
        lower[e], upper[e] = proportion_bounds((counts.data[e], x_var[e], scale[e]),
                                               (np.maximum(o_mean[e], 0.0), o_var[e], scale[e]), per_entry, method)
    fixed = product.absorbing[rows] | (lengths[rows] == 1)
    lower[fixed] = upper[fixed] = 1.0
    return np.minimum(lower, matrix.data), np.maximum(upper, matrix.data), per_entry, int(entries)


def _kind_chain(chain: LearnedDTMC, mixture: Mixture, k: int, counts: np.ndarray | None = None) -> LearnedDTMC:
    """Kind ``k`` as a chain on the pooled chain's states and sparsity (``counts``: others than its weighted
    counts, carried through a product the same way)."""
    pattern = chain.matrix
    shape = pattern.shape

    def csr(data: np.ndarray) -> sp.csr_matrix:
        return sp.csr_matrix((data, pattern.indices.copy(), pattern.indptr.copy()), shape=shape)

    return LearnedDTMC(predicates=list(chain.predicates), states=list(chain.states), unsafe=chain.unsafe.copy(),
                       initial=dict(chain.initial), counts=csr(mixture.counts[k] if counts is None else counts),
                       matrix=csr(mixture.probabilities[k]),
                       alpha=chain.alpha, invalid_observed=chain.invalid_observed, actions=chain.actions)


def _contain(bounds: tuple[np.ndarray, np.ndarray, float] | None, o: CheckOutcome
             ) -> tuple[np.ndarray, np.ndarray] | None:
    """An interval widened to hold the point value and Storm's bounds (as guard/pipeline.py does)."""
    if bounds is None:
        return None
    low, high = bounds[0].copy(), bounds[1].copy()
    for v in (o.values, o.lower, o.upper):
        if v is not None:
            low, high = np.minimum(low, v), np.maximum(high, v)
    return low, high


def _product_initial(mixture: Mixture, product: LearnedDTMC, chain: LearnedDTMC) -> np.ndarray:
    """Each kind's start probability per product state: that of its chain state, where the monitors start.

    A product state's chain state is found by its bits (the product keeps the chain's bits per state)."""
    index = chain.index()
    out = np.zeros((mixture.kinds, product.size))
    for i, bits in enumerate(product.states[:-1]):
        if i in product.initial or not product.monitors:
            out[:, i] = mixture.initial[:, index[bits]]
    return out


def _per_state(properties: Sequence[CheckedProperty], columns: list[list[KindColumns]], mixture: Mixture,
               runs: np.ndarray, mass: np.ndarray, delta: float) -> list[CheckedProperty]:
    """Each property's stored values: the kinds weighed by their share among the runs that visited the state."""
    kinds = mixture.kinds
    visited = runs > 0
    share = np.where(visited[:, None], mass / np.maximum(runs, 1.0)[:, None], mixture.weights[None, :])
    share_low = np.zeros_like(share)
    share_high = np.ones_like(share)
    tests = int(visited.sum()) * kinds
    if tests:
        low, high = clopper_pearson(np.rint(mass[visited]).ravel(), np.repeat(runs[visited], kinds),
                                    delta / 2 / tests)
        share_low[visited], share_high[visited] = low.reshape(-1, kinds), high.reshape(-1, kinds)
    share_low, share_high = np.minimum(share_low, share), np.maximum(share_high, share)
    out = []
    for t, prop in enumerate(properties):
        kind = [columns[k][t] for k in range(kinds)]

        def weigh(name: str, kind: list[KindColumns] = kind) -> np.ndarray | None:
            arrays = [getattr(c, name) for c in kind]
            return None if any(a is None for a in arrays) else (share * np.column_stack(arrays)).sum(axis=1)

        values = weigh("values")
        assert values is not None
        outcome = CheckOutcome(prop.outcome.formula, values, weigh("lower"), weigh("upper"), prop.outcome.method,
                               prop.outcome.precision, prop.outcome.seconds)
        ci_low = ci_high = None
        if all(c.ci_low is not None and c.ci_high is not None for c in kind):
            lows = np.column_stack([c.ci_low for c in kind if c.ci_low is not None])
            highs = np.column_stack([c.ci_high for c in kind if c.ci_high is not None])
            ci_low = np.minimum(simplex_extreme(lows, share_low, share_high), values)
            ci_high = np.maximum(simplex_extreme(highs, share_low, share_high, largest=True), values)
            for bound in (outcome.lower, outcome.upper):
                if bound is not None:
                    ci_low, ci_high = np.minimum(ci_low, bound), np.maximum(ci_high, bound)
        out.append(CheckedProperty(prop.definition, outcome, ci_low, ci_high, None))
    return out
