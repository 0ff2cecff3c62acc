"""The joint bound: one concentration inequality per state over the samples of *every* row at once.

The tighter and the empirical-Bernstein bounds are rectangular: ε̂ = (I − Q̂)⁻¹ r puts every row's
error at its worst at the same time. Rows are sampled independently, so their errors partly cancel;
this bound keeps that (docs/method.md, "The joint bound", derives it). On the jump chain, with x the
true and x̂ the learned risks, N = (I − Q)⁻¹ the true and N̂ = (I − Q̂)⁻¹ the learned fundamental
matrix, exactly

    x̂ − x = N̂ e_b + g + N̂ (Q̂ − Q) g,   g = N e_s,

where e_s,i = (p̃_i − P_i)·x is row i's sampling error (p̃_i its empirical row) and e_b,i = (P̂_i − p̃_i)·x
the smoothing's shift (|e_b,i| ≤ b_i, known). A state never left is kept out (its unknown row could make N
anything): the others see it as a value anywhere in [0, 1], moving into it a known error. For a state s,
g_s = Σ_i N_si/n_i Σ_k (x(J_ik) − x_i) is a sum of independent, centred terms over all departures k of
all rows i, with fixed weights. Bernstein's inequality bounds it by G_s = c·L/3 + √(c²L²/9 + 2·V_s·L),
V_s = Σ_i N_si² σ_i² / n_i, c = max_i N_si/n_i, σ_i² = Var_{J∼P_i} x(J), L = log(2m/δ_J); and so does the
sub-Gaussian bound √(2L Σ_i N_si² κ(x_i)/n_i), κ the Bernoulli's variance proxy (:func:`_subgaussian`);
the smaller is used. N, σ and x_i are unknown; on the same event they are bounded from the data:
Clopper–Pearson intervals on every transition of the jump chain bound |Q̂ − Q| by C, E, U (seen
transitions, never-seen ones one by one and together), hence N ≤ N̄ (:func:`upper_fundamental`) and,
with the box x ∈ x̂ ± ε̂, σ_i² ≤ max_P E_P (x(J) − x̂_i)² over the row's intervals. The last term is
second order: |(Q̂ − Q) g| ≤ C·G + min(E·G, U·max G). So, per state,

    |x̂_s − x_s| ≤ ε̂_s = min(1, (N̂ b)_s + G_s + (N̂ (C G + min(E G, U max G)))_s),

and each round's ε̂ gives a smaller box, hence smaller σ̄, κ and G (every round valid on the one event).
δ is split once: ``JOINT_SHARE``·δ over the m states' two-sided inequalities, the rest over the
intervals of the m·(|S| − 1) possible jump transitions and the start's radius. As the other bounds, the
departure counts are taken as given. The fundamental matrix is dense here: past ``JOINT_STATES``
transient states the bound is not computed (``None``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
from scipy.special import betaincinv

from ..learning import LearnedDTMC
from ..results import JOINT_STATES, PACReport, TightPAC, TightStatePAC
from ._solve import jump_chain, smallest_scale, smoothing_shift, start_weights, system_of, variance_bound
from .registry import BoundInputs, PACBound, older_file
from .tight import bound_report

__all__ = ["JOINT_STATES"]  # names other modules import through this one

JOINT_SHARE = 0.9
"""The share of δ the joint bound gives the states' Bernstein bounds; the rest bounds the transitions."""



@dataclass(frozen=True)
class _Rows:
    """The jump chain's rows as sampled at some number of departures, with their intervals."""

    n: np.ndarray  # departures per transient row (0: never left)
    share: sp.csr_matrix  # the empirical row p̃_i over all states
    lo: np.ndarray  # Clopper–Pearson bounds of P_ij, aligned with share.data
    hi: np.ndarray
    unseen_mass: np.ndarray  # bound on Σ P_ij over successors j never seen from i
    unseen_hi: np.ndarray  # bound on each such P_ij
    shift: np.ndarray  # b_i, the smoothing's shift (1 for a row never left: its error is unbounded there)
    pull: np.ndarray  # how much of the learned |P̂_i − p̃_i| is left at this scale (1 as learned)
    seen: np.ndarray  # m × |S|: successors seen from each row, and the row's own state


def _rows(jump: LearnedDTMC, transient: np.ndarray, level: float, forecast: bool = False) -> _Rows:
    """The rows as learned, with Clopper–Pearson intervals at ``level``; for a ``forecast``, a row never left
    counts as one departure spread as its smoothed row."""
    counts = jump.counts.tocsr()[transient].astype(float)
    n_learned = np.asarray(counts.sum(axis=1)).ravel()
    if forecast and np.any(n_learned == 0):
        pseudo = jump.matrix.tocsr()[transient].multiply((n_learned == 0)[:, None]).tocsr()
        counts = (counts + pseudo).tocsr()
    counts.sum_duplicates()
    counts.eliminate_zeros()
    n = np.asarray(counts.sum(axis=1)).ravel()
    row = np.repeat(np.arange(transient.size), np.diff(counts.indptr))
    k = counts.data
    total = n[row]
    share = sp.csr_matrix((k / total, counts.indices, counts.indptr), shape=counts.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.where(k > 0, betaincinv(np.maximum(k, 1e-12), total - k + 1, level / 2), 0.0)
        hi = np.where(k < total, betaincinv(k + 1, np.maximum(total - k, 1e-12), 1 - level / 2), 1.0)
        unseen_hi = np.where(n > 0, -np.expm1(math.log(level / 2) / np.maximum(n, 1e-300)), 1.0)
    lo, hi = np.nan_to_num(lo, nan=0.0), np.nan_to_num(hi, nan=1.0)
    shift = np.where(n_learned > 0, smoothing_shift(jump)[transient], 0.0 if forecast else 1.0)
    seen = share.toarray() > 0
    seen[np.arange(n.size), transient] = True
    return _unseen(_Rows(n, share, lo, hi, np.ones(n.size), unseen_hi, shift, np.ones(n.size), seen), jump.size)


def _unseen(rows: _Rows, size: int) -> _Rows:
    """The rows with their bound on the mass of successors never seen: 1 − Σ lo, and each at most ``unseen_hi``."""
    row = np.repeat(np.arange(rows.n.size), np.diff(rows.share.indptr))
    others = size - 1 - np.diff(rows.share.indptr)  # successors never seen (a jump never stays)
    mass = np.clip(np.minimum(1.0 - np.bincount(row, rows.lo, minlength=rows.n.size), others * rows.unseen_hi),
                   0.0, 1.0)
    return replace(rows, unseen_mass=mass)


def _scaled(rows: _Rows, jump: LearnedDTMC, transient: np.ndarray, scale: float) -> _Rows:
    """A forecast of the rows at ``scale`` times the departures: the empirical rows kept, the intervals'
    reach shrunk as 1/√scale (a never-seen successor's bound as 1/scale), the smoothing as 1/departures."""
    if scale == 1:
        return rows
    n_learned = np.asarray(jump.counts.tocsr()[transient].sum(axis=1)).ravel()
    k_alpha = np.diff(jump.matrix.tocsr().indptr)[transient] * jump.alpha
    pull = np.where(n_learned > 0, (n_learned + k_alpha) / np.maximum(n_learned * scale, 1e-300), 0.0)
    p = rows.share.data
    shrink = 1.0 / math.sqrt(scale)
    return _unseen(replace(rows, n=rows.n * scale, lo=p - (p - rows.lo) * shrink, hi=p + (rows.hi - p) * shrink,
                           unseen_hi=rows.unseen_hi / scale, shift=rows.shift * pull, pull=pull), jump.size)


def _operator(jump: LearnedDTMC, transient: np.ndarray, rows: _Rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(C, E, U) with |(Q̂ − Q) z| ≤ C|z| + min(E|z|, U·max|z|) on the event (z on the transient states):
    C_ij is |P̂_ij − p̃_ij| plus the interval's reach around p̃_ij where j was seen from i; a transient j
    never seen from i is at most ``unseen_hi`` (E) and all of them together at most U."""
    m = transient.size
    position = np.full(jump.size, -1)
    position[transient] = np.arange(m)
    learned = jump.matrix.tocsr()[transient][:, transient].toarray()
    seen = np.zeros((m, m))
    reach = np.zeros((m, m))
    row = np.repeat(np.arange(m), np.diff(rows.share.indptr))
    column = position[rows.share.indices]
    inside = column >= 0
    seen[row[inside], column[inside]] = rows.share.data[inside]
    reach[row[inside], column[inside]] = np.maximum(rows.share.data - rows.lo, rows.hi - rows.share.data)[inside]
    unseen = np.ones((m, m), dtype=bool)
    unseen[row[inside], column[inside]] = False
    np.fill_diagonal(unseen, False)  # a jump never stays
    each = np.where(unseen, rows.unseen_hi[:, None], 0.0)
    mass = np.minimum(rows.unseen_mass, unseen.sum(axis=1) * rows.unseen_hi)
    return rows.pull[:, None] * np.abs(learned - seen) + reach, each, mass


def _at_least_one(left: np.ndarray, right: np.ndarray, steps: int = 10) -> bool:
    """Whether the spectral radius of left·right (both ≥ 0) is certainly ≥ 1, by power iteration with
    Collatz–Wielandt's bound (min_i (Av)_i / v_i ≤ ρ(A) for v > 0): saves an inversion doomed to fail."""
    v = np.ones(left.shape[0])
    for _ in range(steps):
        w = left @ (right @ v)
        if np.all(w >= v):
            return True
        if not np.all(w > 0):
            return False
        v = w / w.max()
    return False


def _inverse_nonnegative(left: np.ndarray, right: np.ndarray) -> np.ndarray | None:
    """(I − left·right)⁻¹ for non-negative factors of spectral radius < 1 (then the inverse is ≥ 0); None otherwise."""
    if _at_least_one(left, right):
        return None
    matrix = left @ right
    try:
        inverse = np.linalg.inv(np.eye(matrix.shape[0]) - matrix)
    except np.linalg.LinAlgError:
        return None
    if not np.all(np.isfinite(inverse)) or inverse.min(initial=0.0) < -1e-9:
        return None
    out: np.ndarray = np.maximum(inverse, 0.0)
    return out


def upper_fundamental(fundamental: np.ndarray, c: np.ndarray, e: np.ndarray, u: np.ndarray) -> np.ndarray | None:
    """N̄ ≥ N entrywise, given N̂ and |(Q̂ − Q) z| ≤ C|z| + min(E|z|, U·max|z|): N = N̂ + N̂(Q̂ − Q)N, so N is
    a sub-solution of Z ≤ N̂ + N̂(C + E)Z and of Z ≤ N̂ + N̂(C Z + U·colmax Z). The first has the
    super-solution (I − N̂(C + E))⁻¹N̂; the second A + a·M̄ᵀ with K = (I − N̂C)⁻¹, A = K N̂, a = K N̂ U,
    M̄_j = max_s A_sj / (1 − max a) — each bounds every sub-solution when it exists (K ≥ 0, max a < 1);
    the smaller of the two is kept. ``None`` when neither exists (intervals too wide to bound N)."""
    bounds = []
    linear = _inverse_nonnegative(fundamental, c + e)
    if linear is not None:
        bounds.append(linear @ fundamental)
    k = _inverse_nonnegative(fundamental, c)
    if k is not None:
        a_matrix = k @ fundamental
        a = k @ (fundamental @ u)
        top = float(a.max(initial=0.0))
        if top < 1.0:
            bounds.append(a_matrix + np.outer(a, a_matrix.max(axis=0) / (1.0 - top)))
    if not bounds:
        return None
    upper: np.ndarray = np.minimum.reduce(bounds)
    return upper


def _first_unseen(rows: _Rows, order: np.ndarray, values: np.ndarray, transient: np.ndarray) -> np.ndarray:
    """Per transient row, the first of ``values`` in ``order`` at a state never seen from the row (nor the
    row's own state); the last value in order if every candidate was seen."""
    m = transient.size
    width = min(order.size, int(np.diff(rows.share.indptr).max(initial=0)) + 2)
    top = order[:width]
    seen = rows.seen[:, top]
    first = np.argmax(~seen, axis=1)
    none = seen.all(axis=1)
    out: np.ndarray = np.where(none, values[order[-1]], values[top[first]])
    return out if m else np.zeros(0)


def _variance(jump: LearnedDTMC, transient: np.ndarray, rows: _Rows, learned: np.ndarray,
              width: np.ndarray, free: np.ndarray) -> np.ndarray:
    """σ̄_i² ≥ Var_{J∼P_i} x(J) on the event: the largest E_P (x(J) − x̂_i)² over the P allowed by the row's
    intervals (seen successors within [lo, hi], unseen ones within their mass), x in the box; and
    Bhatia–Davis's x_i(1 − x_i) on the box, and 1/4."""
    m = transient.size
    low, high = np.where(jump.unsafe, 1.0, 0.0), np.where(jump.unsafe, 1.0, 0.0)
    low[transient] = np.clip(learned - width, 0.0, 1.0)
    high[transient] = np.clip(learned + width, 0.0, 1.0)
    low[free], high[free] = 0.0, 1.0  # states never left: their risk is anywhere in [0, 1]
    row = np.repeat(np.arange(m), np.diff(rows.share.indptr))
    centre = learned[row]
    value = np.maximum((low[rows.share.indices] - centre) ** 2, (high[rows.share.indices] - centre) ** 2)
    unseen_low = _first_unseen(rows, np.argsort(low, kind="stable"), low, transient)
    unseen_high = _first_unseen(rows, np.argsort(-high, kind="stable"), high, transient)
    unseen_value = np.maximum((unseen_low - learned) ** 2, (unseen_high - learned) ** 2)
    # greedy per row: every seen successor at its lower bound, the mass left to the largest values first
    items_row = np.concatenate([row, np.arange(m)])
    items_value = np.concatenate([value, unseen_value])
    items_cap = np.concatenate([rows.hi - rows.lo, rows.unseen_mass])
    left = 1.0 - np.bincount(row, rows.lo, minlength=m)
    base = np.bincount(row, rows.lo * value, minlength=m)
    order = np.lexsort((-items_value, items_row))
    capped = items_cap[order]
    within = np.cumsum(capped) - capped
    start = np.concatenate([[0], np.cumsum(np.bincount(items_row, minlength=m))[:-1]])
    within -= within[start][items_row[order]]  # capacity taken before this item, in its row
    take = np.clip(left[items_row[order]] - within, 0.0, capped)
    spread = base + np.bincount(items_row[order], take * items_value[order], minlength=m)
    bhatia_davis = variance_bound(learned - width, learned + width)
    out: np.ndarray = np.minimum(np.minimum(spread, bhatia_davis), 0.25)
    return out


def _subgaussian(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The largest sub-Gaussian variance proxy of a variable in [0, 1] with mean in [lo, hi]: that of a
    Bernoulli (the extreme case in convex order), (1 − 2p) / (2 log((1 − p)/p)) (Kearns and Saul 1998;
    Berend and Kontorovich 2013), at the p of the interval nearest 1/2 (1/4 there, Hoeffding's)."""
    p = np.clip(np.where(hi < 0.5, hi, np.where(lo > 0.5, lo, 0.5)), 0.0, 1.0)
    p = np.minimum(p, 1.0 - p)  # symmetric
    with np.errstate(divide="ignore", invalid="ignore"):
        proxy = (1.0 - 2.0 * p) / (2.0 * np.log((1.0 - p) / p))
    out: np.ndarray = np.where(p <= 0.0, 0.0, np.where(p >= 0.5 - 1e-9, 0.25, proxy))
    return out


def _widths(jump: LearnedDTMC, transient: np.ndarray, fundamental: np.ndarray, upper: np.ndarray,
            learned: np.ndarray, rows: _Rows, log_joint: float, rounds: int, free: np.ndarray | None = None,
            extra: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """ε̂ from the box [0, 1] down (module docstring), and each row's own radius (for ``limiting``), over
    ``transient``; ``free`` states (never left) are outside it with a risk anywhere in [0, 1], and ``extra``
    is each row's known error from moving into them."""
    free = np.zeros(0, dtype=int) if free is None else free
    c, e, u = _operator(jump, transient, rows)
    sampled = rows.n > 0
    n1 = np.maximum(rows.n, 1e-300)
    step = np.where(sampled[None, :], upper / n1[None, :], 0.0).max(axis=1)  # c_s = max_i N̄_si / n_i
    squares = np.where(sampled[None, :], upper, 0.0) ** 2
    smoothing = fundamental @ (rows.shift if extra is None else rows.shift + extra)
    bound = np.ones(transient.size)
    radius = np.ones(transient.size)
    for _ in range(rounds):
        variance = np.where(sampled, _variance(jump, transient, rows, learned, bound, free), 0.0)
        spread = squares @ (variance / n1)
        bernstein = step * log_joint / 3 + np.sqrt((step * log_joint) ** 2 / 9 + 2 * spread * log_joint)
        proxy = np.where(sampled, _subgaussian(learned - bound, learned + bound), 0.0)
        joint = np.minimum(bernstein, np.sqrt(2 * log_joint * (squares @ (proxy / n1))))
        everywhere = np.zeros(jump.size)
        everywhere[transient] = joint  # the largest G_j over the successors j never seen from each row
        unseen_top = _first_unseen(rows, np.argsort(-everywhere, kind="stable"), everywhere, transient)
        second = fundamental @ (c @ joint + np.minimum(e @ joint, u * unseen_top))
        narrower = np.minimum(bound, np.minimum(1.0, smoothing + joint + second))
        radius = np.where(sampled, np.sqrt(2 * log_joint * variance / n1), 0.0) + rows.shift
        done = float(np.max(bound - narrower, initial=0.0)) < 1e-9
        bound = narrower
        if done:
            break
    return bound, np.minimum(radius, 1.0)


def joint_bound(dtmc: LearnedDTMC, *, epsilon: float, delta: float, limiting: int = 5,
                rounds: int = 8) -> TightPAC | None:
    """The joint bound on |learned − true| P(F unsafe), per state and from the first state, with its runs
    factor (module docstring); ``None`` past ``JOINT_STATES`` transient states."""
    transient = np.flatnonzero(~dtmc.absorbing)
    m = transient.size
    if m == 0:
        return TightPAC(True, 0.0, 1.0, [], [], 0.0, True, 1.0, [])
    if m > JOINT_STATES:
        return None
    departures = np.asarray(dtmc.counts.sum(axis=1)).ravel()[transient]
    jump = jump_chain(dtmc)
    system = system_of(jump, transient)
    unbounded = TightPAC(False, math.inf, None, [], [TightStatePAC(int(i), math.inf, None, False)
                                                     for i in transient.tolist()])
    try:
        fundamental = np.linalg.inv(system.toarray())
    except np.linalg.LinAlgError:
        return unbounded
    if not np.all(np.isfinite(fundamental)) or fundamental.min(initial=0.0) < -1e-9:
        return unbounded  # some state never absorbs
    fundamental = np.maximum(fundamental, 0.0)
    unsafe = np.flatnonzero(jump.unsafe)
    learned = np.clip(fundamental @ np.asarray(jump.matrix.tocsr()[transient][:, unsafe].sum(axis=1)).ravel(),
                      0.0, 1.0)
    log_joint = math.log(2.0 * m / (JOINT_SHARE * delta))
    level = (1.0 - JOINT_SHARE) * delta / (m * (dtmc.size - 1) + 1)  # each transition's interval, the start's

    # a state never left has an unknown row that could make N anything: the bound works on the chain of
    # the others, where moving into such a state j costs |x̂_j − x_j| ≤ 1 (known), and gives it 1
    left = np.asarray(jump.counts.tocsr()[transient].sum(axis=1)).ravel() > 0
    active, free = transient[left], transient[~left]
    bound, radius, upper = np.ones(m), np.ones(m), None
    if active.size:
        q_hat = jump.matrix.tocsr()[transient][:, transient].toarray()
        reduced = fundamental if not free.size else _inverse_nonnegative(np.eye(active.size),
                                                                        q_hat[np.ix_(left, left)])
        rows = _rows(jump, active, level)
        if reduced is not None:
            upper = upper_fundamental(reduced, *_operator(jump, active, rows))
        if reduced is not None and upper is not None:
            bound[left], radius[left] = _widths(jump, active, reduced, upper, learned[left], rows, log_joint, rounds,
                                                free, q_hat[np.ix_(left, ~left)].sum(axis=1))
        if free.size:
            upper = None  # the forecast works on the whole chain (a state never left counts as one departure)
    runs, mu = start_weights(jump, transient)
    log_start = math.log(2.0 / level)
    cache: dict[float, np.ndarray] = {}
    # a forecast, not a guarantee: the rows scaled (_scaled), N̄ − N̂ shrinking as 1/√scale from the first
    # scale (1, or a power of 16) at which the intervals bound N at all; four rounds per scale
    base = _rows(jump, transient, level, forecast=True)
    anchor, anchored = 1.0, upper
    while anchored is None and anchor < 1e8:
        anchor *= 16.0
        anchored = upper_fundamental(fundamental, *_operator(jump, transient, _scaled(base, jump, transient, anchor)))

    def forecast(scale: float) -> np.ndarray:
        if scale not in cache:
            cache[scale] = np.ones(m) if anchored is None or scale < anchor else _widths(
                jump, transient, fundamental, fundamental + (anchored - fundamental) * math.sqrt(anchor / scale),
                learned, _scaled(base, jump, transient, scale), log_joint, 4)[0]
        return cache[scale]

    def start(scale: float) -> float:
        return float(mu @ forecast(scale)) + math.sqrt(log_start / (2.0 * max(runs, 1) * scale))

    factors = (smallest_scale(lambda k: float(forecast(k).max(initial=0.0)) <= epsilon),
               smallest_scale(lambda k: start(k) <= epsilon) if runs else None)
    return bound_report(jump, transient, departures, system, learned, bound, radius, None, epsilon=epsilon,
                        log_term=log_start, limiting=limiting, rounds=rounds, factors=factors)


def _compute(inputs: BoundInputs) -> TightPAC | None:
    return joint_bound(inputs.dtmc, epsilon=inputs.epsilon, delta=inputs.delta)


def _absent(pac: PACReport) -> str:
    """Past JOINT_STATES transient states the bound is not computed; below, the file predates it."""
    if len(pac.states) > JOINT_STATES:
        return f"not computed past {JOINT_STATES:,} transient states."
    return older_file(pac)


BOUND = PACBound("joint", "joint-bernstein", "joint", _compute, absent=_absent)
