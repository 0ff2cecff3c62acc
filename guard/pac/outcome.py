"""The outcome bound: every state's risk bounded by what the runs that visited it went on to do.

The other bounds carry sampling errors of transitions through the fundamental matrix, and pay for it
twice: once in estimating the weights (N, the variances) and once in an exponential (Chernoff-type)
inequality, which asks about 1.7× the runs a Gaussian quantile would. This one needs neither. By the
strong Markov property, the part of a run after its *first* visit to state s is a fresh run of the chain
from s, so whether it reaches ``unsafe`` is Bernoulli(x_s), independently across runs, whatever made the
run visit s (guard/outcomes.py). With v_s runs visiting s and k_s of them reaching ``unsafe``, the
Clopper–Pearson interval [lo_s, hi_s] on (k_s, v_s) at level δ/(m + 1) holds x_s with probability at least
1 − δ/(m + 1) — an exact binomial tail, no asymptotics. Every run's own outcome is Bernoulli with the
start risk μ·x, so the interval on (unsafe runs, runs) holds it at the same level. By a union bound over
the m transient states and the start, with probability ≥ 1 − δ all m + 1 intervals hold, and then, per state,

    |x̂_s − x_s| ≤ ε̂_s = max(x̂_s − lo_s, hi_s − x̂_s)

(x̂_s the learned chain's risk), and the same from the start with x̂ = μ̂·x̂. The event concerns the
intervals alone, so this holds however x̂ was learned (smoothing, back-off, memory), and nothing is taken
as given (the other bounds take the departure counts as given). A state no run visited has [0, 1].

The runs factor is the number of runs (a multiple of those learned from) after which the bound is met in
≥ 1 − δ of learnings, not a median (docs/intervals.md derives it). At c times the runs a state has about
c·v_s visits (a state not yet visited counts one), and its bound is at most |x̂_s − p̂_s| plus the
Clopper–Pearson half-width around p̂_s = k_s/v_s. The half-width is largest where the risk is nearest ½:
it is taken at p*_s, the point of the state's interval nearest ½ (the largest variance the runs cannot
rule out). The gap |x̂_s − p̂_s| is a difference of two estimates of one number, the chain's the efficient one under
the Markov assumption, so the chain's estimate is uncorrelated with the difference and
Var(gap) = Var(p̂_s) − Var(x̂_s) (Hausman): p*(1−p*)/(c·v_s) less σ_s²/c, σ_s the delta-method spread of
x̂_s (guard/pac/_spread.py). The gap stays below z·√Var(gap) but with probability δ/(m + 1), z the normal
quantile at 1 − δ/2(m + 1). By a union bound over the m states and the
start, a learning from c times the runs then meets the bound with probability ≥ 1 − δ (up to the normal
reading of the gap and the visits' own randomness; tests/test_pac_forecast.py checks it by simulation).

Without the Markov assumption the intervals still hold the *first-visit* risk (the runs are independent),
so ε̂ then bounds the learned risk's distance to what runs from s really do.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from ..intervals import clopper_pearson
from ..learning import LearnedDTMC
from ..results import TightPAC, TightStatePAC
from ._solve import smallest_scale, solve_nonnegative, start_weights, system_of
from ._spread import chain_spread
from .registry import BoundInputs, PACBound


def outcome_widths(learned: np.ndarray, reached: np.ndarray, visited: np.ndarray, level: float) -> np.ndarray:
    """max(x̂ − lo, hi − x̂) per entry, [lo, hi] the Clopper–Pearson interval on (reached, visited) at
    confidence 1 − ``level`` ([0, 1] where nothing was visited)."""
    seen = visited > 0
    low, high = np.zeros(learned.size), np.ones(learned.size)
    if seen.any():
        low[seen], high[seen] = clopper_pearson(reached[seen], visited[seen], level)
    width: np.ndarray = np.clip(np.maximum(learned - low, high - learned), 0.0, 1.0)
    return width


def _forecast(reached: np.ndarray, visited: np.ndarray, level: float, scale: float, spread: np.ndarray
              ) -> np.ndarray:
    """ε̂ at ``scale`` times the runs that a learning exceeds with probability at most ``level`` per state
    (module docstring): the half-width and the gap's (1 − level) quantile at the riskiest share p*;
    ``spread``: σ², the variance of the chain's estimate at today's runs (0 where unknown: a wider gap)."""
    seen = visited > 0
    low, high = np.zeros(visited.size), np.ones(visited.size)
    if seen.any():
        low[seen], high[seen] = clopper_pearson(reached[seen], visited[seen], level)
    centre = np.clip(0.5, low, high)  # p*: the variance the runs cannot rule out
    counted = np.where(seen, visited, 1.0) * scale
    variance = np.maximum(centre * (1.0 - centre) / np.where(seen, visited, 1.0) - spread, 0.0) / scale
    gap = float(norm.ppf(1.0 - level / 2)) * np.sqrt(variance)
    out: np.ndarray = np.clip(gap + outcome_widths(centre, centre * counted, counted, level), 0.0, 1.0)
    return out


def outcome_bound(dtmc: LearnedDTMC, first_visits: tuple[np.ndarray, np.ndarray], *, epsilon: float, delta: float,
                  limiting: int = 5) -> TightPAC:
    """The outcome bound on |learned − true| P(F unsafe), per transient state and from the start
    (module docstring). ``first_visits`` is, per state of ``dtmc``, the runs that visited it and those of them
    that reached ``unsafe`` after their first visit there (:func:`guard.outcomes.first_visit_counts`)."""
    transient = np.flatnonzero(~dtmc.absorbing)
    m = transient.size
    if m == 0:
        return TightPAC(True, 0.0, 1.0, [], [], 0.0, True, 1.0, [])
    unsafe = np.flatnonzero(dtmc.unsafe)
    system = system_of(dtmc, transient)
    learned = solve_nonnegative(system, np.asarray(dtmc.matrix.tocsr()[transient][:, unsafe].sum(axis=1)).ravel())
    if learned is None:  # some state never absorbs: the learned risks are not defined
        return TightPAC(False, math.inf, None, [], [TightStatePAC(int(i), math.inf, None, False)
                                                    for i in transient.tolist()])
    learned = np.clip(learned, 0.0, 1.0)
    level = delta / (m + 1)  # m states and the start, each two-sided
    visited = np.asarray(first_visits[0], dtype=float)[transient]
    reached = np.minimum(np.asarray(first_visits[1], dtype=float)[transient], visited)
    bound = outcome_widths(learned, reached, visited, level)

    runs, mu = start_weights(dtmc, transient)
    at_unsafe = sum(count for i, count in dtmc.initial.items() if dtmc.unsafe[int(i)])
    start_risk = float(mu @ learned) + at_unsafe / max(runs, 1)
    # every run enters an (absorbing) unsafe state at most once: the runs that went wrong
    went_wrong = float(np.asarray(dtmc.counts.tocsr()[:, unsafe].sum())) + at_unsafe
    start_args = (np.array([start_risk]), np.array([min(went_wrong, runs)], dtype=float), np.array([runs], dtype=float))
    initial = float(outcome_widths(*start_args, level)[0])

    sigma = chain_spread(dtmc, _full(dtmc, transient, learned), transient)[0]
    spread = np.where(np.isfinite(sigma), sigma, 0.0) ** 2
    start_spread = np.array([float(mu**2 @ spread)])  # a lower bound (states' errors correlate positively)

    def every(scale: float) -> bool:
        return float(_forecast(reached, visited, level, scale, spread).max(initial=0.0)) <= epsilon

    def start(scale: float) -> bool:
        return float(_forecast(*start_args[1:], level, scale, start_spread)[0]) <= epsilon

    worst = float(bound.max(initial=0.0))
    factor = 1.0 if worst <= epsilon else smallest_scale(every)
    initial_factor = 1.0 if initial <= epsilon else smallest_scale(start) if runs else None
    departures = np.asarray(dtmc.counts.sum(axis=1)).ravel()[transient]  # as the other bounds report them
    states = [TightStatePAC(int(i), float(bound[k]), None if factor is None else
                            math.ceil(factor * departures[k] - 1e-9), bool(bound[k] <= epsilon))
              for k, i in enumerate(transient.tolist())]
    # a state's bound depends on its own visits only: the widest are the ones more runs must reach
    # (the start's depends on the number of runs alone: no state limits it)
    order = [int(transient[k]) for k in np.argsort(-bound, kind="stable")[:limiting] if bound[k] > epsilon]
    return TightPAC(worst <= epsilon, worst, factor, order, states, initial, initial <= epsilon, initial_factor, [])


def _full(dtmc: LearnedDTMC, transient: np.ndarray, learned: np.ndarray) -> np.ndarray:
    """Risks per state of ``dtmc``: ``learned`` on the transient states, 1 on unsafe, 0 elsewhere."""
    out = dtmc.unsafe.astype(float)
    out[transient] = learned
    return out


def _compute(inputs: BoundInputs) -> TightPAC | None:
    if inputs.first_visits is None:
        return None  # learned from counts: the runs' outcomes are not known
    return outcome_bound(inputs.dtmc, inputs.first_visits, epsilon=inputs.epsilon, delta=inputs.delta)


BOUND = PACBound("outcome", "first-visit-clopper-pearson", "outcome", _compute, guaranteed=True,
                 note="from what the runs visiting each state went on to do",
                 absent=lambda pac: "not computed (it needs the runs, not only their counts).")
