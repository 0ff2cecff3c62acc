"""The paper's sample-size bound, and the PAC report that carries it beside the registered bounds.

**The paper's bound** (Pro2Guard Algorithm 1 line 11; Bazille et al., CAV 2020). For a
state p with n_p observed departures, the learned chain is (ε, δ)-PAC-correct once, for
every p,

    n_p ≥ (1.1·B)² · H*(p),   H*(p) = max_q 2/ε² · log(2/δ') · [1/4 − (|1/2 − n_pq/n_p| − 2ε/3)²]

with δ' = δ/|S| (a union bound over states) and B = ‖(I − Q)⁻¹‖∞ the amplification
factor: the largest expected number of steps before absorption, Q the transient part
of the learned chain. The maximum over successors q is taken outside the bracket, as
in the paper's appendix (H* = max_t H), which is the sound reading of line 11.
"""
from __future__ import annotations

import math

import numpy as np

from ..learning import LearnedDTMC
from ..results import PACReport, StatePAC
from ._solve import solve_nonnegative, system_of
from .registry import BoundInputs, compute_bounds


def amplification_factor(dtmc: LearnedDTMC) -> float:
    """B = max expected steps to absorption over transient states (∞ if some never absorb).

    Solves (I − Q) t = 1 by BiCGSTAB (milliseconds where a sparse LU of an agent-shaped
    chain takes minutes at 10⁴ states), accepts it only if the residual is small, and
    falls back to a direct solve otherwise.
    """
    transient = np.flatnonzero(~dtmc.absorbing)
    if transient.size == 0:
        return 1.0
    steps = solve_nonnegative(system_of(dtmc, transient), np.ones(transient.size))
    if steps is None:
        return math.inf
    return float(max(1.0, steps.max()))



def pac_report(dtmc: LearnedDTMC, *, epsilon: float, delta: float,
               first_visits: tuple[np.ndarray, np.ndarray] | None = None) -> PACReport:
    """Visits per state against the visits an (ε, δ) guarantee needs, and every registered bound
    (guard/pac/registry.py); with ``first_visits`` (per state of ``dtmc``, the runs that visited it and those
    that then reached ``unsafe``), those that need the runs too (the outcome bound)."""
    n_states = dtmc.size
    delta_prime = delta / n_states
    amplification = amplification_factor(dtmc)
    base = 2.0 / epsilon**2 * math.log(2.0 / delta_prime)
    factor = (1.1 * amplification) ** 2
    counts = dtmc.counts
    absorbing = dtmc.absorbing
    out = []
    for i in range(n_states):
        if absorbing[i]:
            continue  # absorbing rows are fixed by construction, not estimated
        row = counts.data[counts.indptr[i]:counts.indptr[i + 1]]
        visits = int(row.sum())
        if visits == 0:
            bracket = 0.25
        else:
            gaps = np.abs(0.5 - row / visits) - 2.0 * epsilon / 3.0
            bracket = float(np.max(np.clip(0.25 - gaps**2, 0.0, None)))
        needed = factor * base * bracket
        required = math.ceil(needed) if math.isfinite(needed) else None
        satisfied = math.isfinite(needed) and visits >= needed and visits > 0
        out.append(StatePAC(state=i, visits=visits, required=required, satisfied=satisfied))
    return PACReport(epsilon=epsilon, delta=delta, delta_per_state=delta_prime,
                     amplification=amplification, states=out,
                     bounds=compute_bounds(BoundInputs(dtmc, epsilon, delta, delta_prime, first_visits)))
