"""Simulated learnings from known chains, to check PAC bounds against the truth.

A true chain is given over the toy domain's abstract states (NONE, A, B transient; AB
unsafe; ``end``). Runs are simulated in lock-step with numpy (every run takes one step
at a time), counted into :class:`TransitionCounts`, and learned with ``learn_dtmc``; the
learned and true probabilities of reaching ``unsafe`` are solved with numpy, not Storm.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from _toy import AB, NONE
from forewarn.guard.learning import END, LearnedDTMC, TransitionCounts, learn_dtmc
from forewarn.guard.predicates import PredicateSet

Chain = Mapping[int, Mapping[int, float]]  # state → {successor (END for end): probability}

# three chains of different shapes: short and risky, long loops, and a rare risky corner
CHAINS: dict[str, tuple[dict[int, float], Chain]] = {
    "short": ({0: 1.0}, {0: {1: 0.5, 2: 0.3, END: 0.2}, 1: {3: 0.3, 0: 0.2, END: 0.5}, 2: {2: 0.2, 1: 0.3, END: 0.5}}),
    "loops": ({0: 0.7, 2: 0.3}, {0: {0: 0.6, 1: 0.25, END: 0.15}, 1: {1: 0.5, 2: 0.3, 3: 0.05, END: 0.15},
                                 2: {0: 0.4, 2: 0.4, 3: 0.1, END: 0.1}}),
    "rare": ({0: 1.0}, {0: {0: 0.3, 1: 0.65, 2: 0.05}, 1: {END: 0.9, 0: 0.1}, 2: {3: 0.6, END: 0.4}}),
}


def true_reach(chain: Chain) -> dict[int, float]:
    """P(F unsafe) of the true chain from each transient state."""
    states = sorted(chain)
    q = np.array([[chain[i].get(j, 0.0) for j in states] for i in states])
    b = np.array([chain[i].get(AB, 0.0) for i in states])
    return dict(zip(states, np.linalg.solve(np.eye(len(states)) - q, b)))


def learned_reach(dtmc: LearnedDTMC) -> dict[int, float]:
    """P(F unsafe) of a learned chain, by a dense solve, keyed by abstract state."""
    transient = np.flatnonzero(~dtmc.absorbing)
    dense = dtmc.matrix.toarray()
    q = dense[np.ix_(transient, transient)]
    b = dense[transient][:, np.flatnonzero(dtmc.unsafe)].sum(axis=1)
    x = np.linalg.solve(np.eye(len(transient)) - q, b)
    return {dtmc.states[i]: float(v) for i, v in zip(transient.tolist(), x)}


def simulate(chain: Chain, initial: Mapping[int, float], runs: int, rng: np.random.Generator,
             predicates: PredicateSet, alpha: float) -> LearnedDTMC:
    """Learn a chain from ``runs`` simulated runs of the true one."""
    return simulate_runs(chain, initial, runs, rng, predicates, alpha)[0]


def simulate_runs(chain: Chain, initial: Mapping[int, float], runs: int, rng: np.random.Generator,
                  predicates: PredicateSet, alpha: float) -> tuple[LearnedDTMC, tuple[np.ndarray, np.ndarray]]:
    """As :func:`simulate`, with the runs' first-visit outcomes per state of the learned chain: how many runs
    visited it, and how many of those went on to reach ``unsafe`` (what guard/pipeline.py gives the outcome bound)."""
    starts = list(initial)
    state = np.array(starts)[rng.choice(len(starts), size=runs, p=list(initial.values()))]
    counts = TransitionCounts(runs=runs)
    for s, n in zip(*np.unique(state, return_counts=True)):
        counts.initial[int(s)] += int(n)
    tables = {i: (np.array(list(row)), np.cumsum(list(row.values()))) for i, row in chain.items()}
    alive = np.ones(runs, dtype=bool)
    visited = np.zeros((runs, 16), dtype=bool)  # by abstract state (END is -1: never marked)
    visited[np.arange(runs), state] = True
    pairs = np.zeros(16 * 16, dtype=np.int64)  # (source + 1) * 16 + (target + 1): END is -1
    while alive.any():
        nxt = state.copy()
        u = rng.random(runs)
        for i, (targets, cumulative) in tables.items():
            here = alive & (state == i)
            if here.any():
                pick = np.minimum(np.searchsorted(cumulative, u[here], side="right"), len(targets) - 1)
                nxt[here] = targets[pick]
        pairs += np.bincount((state[alive] + 1) * 16 + nxt[alive] + 1, minlength=16 * 16)
        counts.steps += int(alive.sum())
        unsafe_now = alive & (nxt == AB)
        counts.unsafe_runs += int(unsafe_now.sum())
        if unsafe_now.any():
            counts.unsafe.add(AB)
        alive &= (nxt != END) & (nxt != AB)
        state = nxt
        visited[np.flatnonzero(alive), state[alive]] = True
    for code in np.flatnonzero(pairs).tolist():
        counts.counts[code // 16 - 1, code % 16 - 1] = int(pairs[code])
    assert NONE in chain
    dtmc = learn_dtmc(counts, predicates, alpha=alpha)
    wrong = state == AB  # every run has ended: in AB or in END
    codes = np.array([s if s != END else -1 for s in dtmc.states])
    known = codes >= 0
    ran = np.zeros(dtmc.size, dtype=np.int64)
    reached = np.zeros(dtmc.size, dtype=np.int64)
    ran[known] = visited[:, codes[known]].sum(axis=0)
    reached[known] = (visited[:, codes[known]] & wrong[:, None]).sum(axis=0)
    return dtmc, (ran, reached)
