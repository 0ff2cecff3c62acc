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
from .mixture import Mixture, PathTable, choose_kinds, fit_mixture, path_table
from .mixture_posterior import KindColumns, KindMixture
from .model import CheckedProperty
from .monitoring import build_product
from .predicates import PredicateSet
from .results import CheckOutcome
from .shrinkage import summarize_paths
from .storm import Method, build_interval_dtmc, build_sparse_dtmc, check_sparse_model, interval_bounds, labels_of


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


def visit_shares(table: PathTable, mixture: Mixture, paths: Mapping[tuple[int, ...], int],
                 predicates: PredicateSet, monitors: Sequence[Any], product: LearnedDTMC
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per product state: the runs that visited it (each once), and per kind the responsibility mass among them
    (states × K)."""
    index = product.product_index()
    summaries = summarize_paths(paths, predicates, monitors, [])
    runs = np.zeros(product.size)
    mass = np.zeros((product.size, mixture.kinds))
    for r, path in enumerate(sorted(paths)):  # the table's row order
        weight = float(table.weight[r])
        states = [index[key] for key in summaries[path].visits if key in index]
        runs[states] += weight
        mass[states] += weight * mixture.responsibilities[r]
    return runs, mass


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
        lever["cv_log_likelihood"] = {str(k): round(v, 6) for k, v in scores.items()}
    if kinds == 1:
        lever["seconds"] = round(time.perf_counter() - started, 6)
        return lever
    mixture = fit_mixture(table, chain, kinds, alpha)
    ambiguity = doubtful_counts(table, mixture)
    labels = labels_of(product)
    kind_method = Method.SOUND if method is Method.EXACT else method  # weighted counts are not integers
    each = delta / (2 * kinds)
    columns: list[list[KindColumns]] = []
    probabilities, counts, transition_low, transition_high = [], [], [], []
    report = None
    start_counts = _start_counts(table, mixture, ambiguity_starts(table, mixture), product, chain)
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
            ambiguous = build_product(_kind_chain(chain, mixture, k, counts=ambiguity[k]), monitors).counts.data
            # the union bound runs over the kind's estimated transitions and its start shares
            lower, upper, per_entry, entries = kind_intervals(kind_product, ambiguous, each, intervals,
                                                              estimated_entries(part) + len(table.starts))
            transition_low.append(lower)
            transition_high.append(upper)
            interval_model = build_interval_dtmc(kind_product.matrix, lower, upper, labels)
            bounds = [_contain(interval_bounds(interval_model, o.formula, precision=precision), o) for o in outcomes]
            report = IntervalReport(intervals, float(delta), per_entry, entries)
        columns.append([KindColumns(o.values, o.lower, o.upper, *(b if b is not None else (None, None)))
                        for o, b in zip(outcomes, bounds)])
        probabilities.append(kind_product.matrix.data)
        counts.append(kind_product.counts.data)
    runs, mass = visit_shares(table, mixture, paths, predicates, monitors, product)
    stored = _per_state(properties, columns, mixture, runs, mass, delta)
    initial = _product_initial(mixture, product, chain)
    transition_bounds = start_bounds = None
    if transition_low:
        transition_bounds = (np.array(transition_low), np.array(transition_high))
        start_bounds = _start_bounds(start_counts, table, initial, each, intervals, report)
    kept = KindMixture(mixture.weights, initial, np.array(probabilities), np.array(counts), columns,
                       product.matrix.indptr, product.matrix.indices, str(setting), scores, transition_bounds,
                       start_bounds)
    seconds = round(time.perf_counter() - started, 6)
    lever.update(weights=[round(float(w), 6) for w in mixture.weights], seconds=seconds,
                 log_likelihood=round(mixture.log_likelihood, 6))
    if report is not None:
        report = IntervalReport(report.method, report.delta, report.delta_per_entry, report.entries, seconds)
    return KindsFit(kept, stored, report, lever)


def ambiguity_starts(table: PathTable, mixture: Mixture) -> np.ndarray:
    """Per kind and start state of S₀ (K × S₀): the runs starting there, weighted by ``min(γ, 1 − γ)``."""
    doubt = np.minimum(mixture.responsibilities, 1.0 - mixture.responsibilities) * table.weight[:, None]
    out: np.ndarray = np.asarray(doubt.T @ table.starting)
    return out


def _start_counts(table: PathTable, mixture: Mixture, doubt: np.ndarray, product: LearnedDTMC, chain: LearnedDTMC
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per kind and product state (K × states): the runs of the kind that started there (responsibilities),
    and their doubtful part; 0 off the start states."""
    mass = np.asarray((mixture.responsibilities * table.weight[:, None]).T @ table.starting)  # K × S₀
    column = {int(s): c for c, s in enumerate(table.starts.tolist())}
    index = chain.index()
    runs, doubtful = np.zeros((mixture.kinds, product.size)), np.zeros((mixture.kinds, product.size))
    for i, bits in enumerate(product.states[:-1]):
        c = column.get(index[bits])
        if c is not None and (i in product.initial or not product.monitors):
            runs[:, i], doubtful[:, i] = mass[:, c], doubt[:, c]
    return runs, doubtful


def _start_bounds(start_counts: tuple[np.ndarray, np.ndarray], table: PathTable, initial: np.ndarray, each: float,
                  method: IntervalMethod, report: IntervalReport | None) -> tuple[np.ndarray, np.ndarray]:
    """Intervals of ``w_k·π_k(x)`` (K × states): the share of all runs that are of kind ``k`` and start in
    ``x``, from the responsibilities, widened by the doubtful runs as :func:`kind_intervals` does."""
    runs, doubtful = start_counts
    total = float(table.weight.sum())
    per = report.delta_per_entry if report is not None else each
    bound = clopper_pearson if method is IntervalMethod.CLOPPER_PEARSON else hoeffding
    where = runs > 0
    low, high = np.zeros_like(runs), np.zeros_like(runs)
    n = np.full(int(where.sum()), total)
    low[where] = bound(np.floor(np.maximum(runs[where] - doubtful[where], 0.0)), n, per)[0]
    high[where] = bound(np.minimum(np.ceil(runs[where] + doubtful[where]), total), n, per)[1]
    point = initial * (runs.sum(axis=1, keepdims=True) / total)  # w_k·π_k(x), as the model's own estimate holds it
    return np.minimum(low, point), np.maximum(high, point)


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


def doubtful_counts(table: PathTable, mixture: Mixture) -> np.ndarray:
    """Per kind and CSR entry of the chain (K × entries), the counts of runs whose kind is in doubt, each
    weighted by ``min(γ_rk, 1 − γ_rk)``: how much of the kind's weighted count could be another's, or missing."""
    doubt = np.minimum(mixture.responsibilities, 1.0 - mixture.responsibilities) * table.weight[:, None]
    out: np.ndarray = np.asarray(table.counts.T @ doubt).T
    return out


def kind_intervals(product: LearnedDTMC, ambiguous: np.ndarray, delta: float, method: IntervalMethod, entries: int
                   ) -> tuple[np.ndarray, np.ndarray, float, int]:
    """Per CSR entry of a kind's chain, an interval for its transition probability (as guard/intervals.py, at
    ``δ/entries`` each), from the kind's weighted counts ``x`` out of ``n`` departures, widened for the runs
    whose kind is in doubt (a run the posterior splits could belong wholly to the kind, or not at all): with
    ``a`` the entry's counts weighted by ``min(γ, 1 − γ)`` and ``A`` its row's, the lower end is that of
    ``x − a`` out of ``n − a + (A − a)`` (this entry's doubtful counts gone, the row's others kept), the upper
    that of ``x + a`` out of ``n + a − (A − a)``. Then widened to hold the point estimate.
    Returns (lower, upper, δ per entry, entries)."""
    matrix, counts = product.matrix, product.counts
    lengths = np.diff(matrix.indptr)
    rows = np.repeat(np.arange(product.size), lengths)
    n = visits(product)[rows].astype(float)
    x = counts.data
    per_entry = delta / max(entries, 1)
    lower, upper = np.zeros(len(x)), np.ones(len(x))
    estimated = (~product.absorbing[rows]) & (lengths[rows] >= 2) & (n > 0)
    bound = clopper_pearson if method is IntervalMethod.CLOPPER_PEARSON else hoeffding
    if estimated.any():
        row_doubt = np.bincount(rows, weights=ambiguous, minlength=product.size)[rows]
        xe, ae, ne, re = x[estimated], ambiguous[estimated], n[estimated], row_doubt[estimated]
        rest = np.maximum(ne - xe, 0.0)  # the row's other entries, whose doubtful counts may move too
        low_x = np.floor(np.maximum(xe - ae, 0.0))
        low_n = np.maximum(np.ceil(low_x + rest + np.maximum(re - ae, 0.0)), 1.0)
        high_x = np.ceil(xe + ae)
        high_n = np.maximum(np.floor(high_x + np.maximum(rest - np.maximum(re - ae, 0.0), 0.0)), high_x)
        lower[estimated] = bound(low_x, low_n, per_entry)[0]
        upper[estimated] = np.where(high_n > 0, bound(high_x, np.maximum(high_n, 1.0), per_entry)[1], 1.0)
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
