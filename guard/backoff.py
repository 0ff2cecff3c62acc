"""A chain over (abstract state, memory label), smoothed towards the memoryless chain.

Memory splits an abstract state's data over its histories, and a history seen a few
times would otherwise get a row from a few counts plus a uniform Laplace guess. Here
the prior of a row is the lower-order chain's row instead (hierarchical, or back-off,
smoothing): state ``(b, l)`` moves to ``(b', l')`` with probability

    (n + β·π) / (N + β·Z)

where ``n`` counts that transition, ``N`` the row's observations, ``π`` is the
memoryless chain's ``P(b → b')`` shared equally among the labels ``l'`` the memory
automaton allows after ``(b, l)`` that occur in the data (with ``actions``, in proportion
to how often ``b → b'`` came with each label's newest action over all histories, so the prior
is the memoryless chain of the next step's state *and* action), and ``Z`` sums the row's ``π``
(mass towards a history never observed is dropped). A rarely seen history thus behaves
like its abstract state, a much seen one follows its own counts. ``β`` is a number, or
``auto``: the value of a fixed grid with the highest leave-one-run-out log-likelihood
of transitions (closed form, as for α in guard/crossval.py; ties to the larger β).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np
import scipy.sparse as sp

from ..errors import UsageError
from .crossval import held_out_transitions
from .learning import END, LearnedDTMC, TransitionCounts, ValidTransitionRule, learn_dtmc
from .memory import Memory
from .predicates import PredicateSet

__all__ = ["BETA_GRID", "strip_memory", "learn_memory_dtmc"]

BETA_GRID = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)


def strip_memory(counts: TransitionCounts, width: int) -> TransitionCounts:
    """The counts with memory labels removed: those of the memoryless chain."""
    mask = (1 << width) - 1
    out = TransitionCounts(runs=counts.runs, steps=counts.steps, unsafe_runs=counts.unsafe_runs)
    for (a, b), n in counts.counts.items():
        out.counts[a & mask, b if b == END else b & mask] += n
    for a, n in counts.initial.items():
        out.initial[a & mask] += n
    out.unsafe = {a & mask for a in counts.unsafe}
    return out


def learn_memory_dtmc(counts: TransitionCounts, paths: Mapping[tuple[int, ...], int] | None,
                      predicates: PredicateSet, memory: Memory, *, alpha: float, beta: float | str,
                      rule: ValidTransitionRule | None = None,
                      structure: str = "valid") -> tuple[LearnedDTMC, dict[str, object]]:
    """The back-off chain over chain states ``bits | label << width`` and what was chosen.

    Args:
        counts: transition counts over chain states (runs encoded by :meth:`Memory.encode_run`).
        paths: the distinct encoded runs with multiplicities (needed for ``beta="auto"``).
        alpha, rule, structure: for the memoryless chain, as :func:`guard.learning.learn_dtmc`.
        beta: the prior's strength, or ``"auto"``.
    """
    width = predicates.width
    mask = (1 << width) - 1
    low = learn_dtmc(strip_memory(counts, width), predicates, alpha=alpha, rule=rule, structure=structure)
    low_index, low_end = low.index(), low.end_index
    observed = set(counts.initial) | {a for a, _ in counts.counts} | {b for _, b in counts.counts if b != END}
    observed |= _unseen_unsafe(low, observed, predicates, memory)
    states = sorted(observed) + [END]
    end = len(states) - 1
    index = {s: i for i, s in enumerate(states[:-1])}
    unsafe = np.array([predicates.is_unsafe(s) for s in states[:-1]] + [False], dtype=bool)
    # observed states by what their predecessor determines (all but the newest action)
    arrivals: dict[tuple[int, tuple[int, int]], list[int]] = {}
    for i, s in enumerate(states[:-1]):
        arrivals.setdefault((s & mask, memory.arrival_key(s >> width)), []).append(i)
    # how often b → b' came with each newest action, over all histories (a single class without actions)
    by_action: Counter[tuple[int, int, int]] = Counter()
    for (a, b), n in counts.counts.items():
        if b != END:
            by_action[a & mask, b & mask, memory.newest_action(b >> width)] += n
    pair_total: Counter[tuple[int, int]] = Counter()
    for (b, b2, _), n in by_action.items():
        pair_total[b, b2] += n
    # the prior's shape π per row (β multiplies it later), and the observed counts; a row's shares
    # depend on its state only through (b, its successor keys): computed once per such pair
    prior: list[dict[int, float]] = [{} for _ in states]
    cache: dict[tuple[int, int, tuple[tuple[int, int], ...]], list[tuple[int, float]]] = {}
    newest = [memory.newest_action(s >> width) for s in states[:-1]]
    for i, s in enumerate(states[:-1]):
        if unsafe[i]:
            continue
        b, label = s & mask, s >> width
        stay, move = tuple(memory.successor_keys(label, b, True)), tuple(memory.successor_keys(label, b, False))
        row = low_index[b]
        start, stop = low.matrix.indptr[row], low.matrix.indptr[row + 1]
        out = prior[i]
        for j, p in zip(low.matrix.indices[start:stop].tolist(), low.matrix.data[start:stop].tolist()):
            if j == low_end:
                out[end] = out.get(end, 0.0) + p
                continue
            b2 = low.states[j]
            keys = stay if b2 == b else move
            shares = cache.get((b, b2, keys))
            if shares is None:
                targets = [t for key in keys for t in arrivals.get((b2, key), ())]
                shares = cache[b, b2, keys] = _shares(targets, newest, by_action, pair_total, b, b2)
            for t, share in shares:
                out[t] = out.get(t, 0.0) + p * share
    seen: list[dict[int, float]] = [{} for _ in states]
    for (a, b), n in counts.counts.items():
        i = index[a]
        if not unsafe[i]:
            seen[i][end if b == END else index[b]] = float(n)
    info: dict[str, object] = {}
    if beta == "auto":
        if paths is None:
            raise UsageError("backoff 'auto' needs the runs' paths")
        beta, scores = _choose_beta(paths, predicates, index, end, prior, seen)
        info = {"chosen": beta, "grid": list(BETA_GRID), "heldout_loglik_per_step": scores}
    else:
        info = {"chosen": float(beta)}
    beta = float(beta)
    rows, cols, probs, ns, xs = [], [], [], [], []
    for i in range(len(states)):
        if unsafe[i] or i == end:
            rows.append(i)
            cols.append(i)
            probs.append(1.0)
            ns.append(0.0)
            xs.append(0.0)
            continue
        targets = sorted(set(prior[i]) | set(seen[i]))
        weights = [seen[i].get(t, 0.0) + beta * prior[i].get(t, 0.0) for t in targets]
        whole = sum(weights)
        for t, w in zip(targets, weights):
            rows.append(i)
            cols.append(t)
            probs.append(w / whole)
            ns.append(seen[i].get(t, 0.0))
            xs.append(beta * prior[i].get(t, 0.0))
    n = len(states)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(np.asarray(rows, dtype=np.int64), minlength=n), out=indptr[1:])
    indices = np.asarray(cols, dtype=np.int64)
    shape = (n, n)
    initial = {index[s]: c for s, c in counts.initial.items()}
    chain = LearnedDTMC(predicates=list(predicates.names), states=states, unsafe=unsafe, initial=initial,
                        counts=sp.csr_matrix((np.asarray(ns), indices, indptr), shape=shape),
                        matrix=sp.csr_matrix((np.asarray(probs), indices, indptr.copy()), shape=shape),
                        alpha=low.alpha, invalid_observed=low.invalid_observed,
                        pseudo=sp.csr_matrix((np.asarray(xs), indices, indptr.copy()), shape=shape),
                        actions=memory.vocabulary or ())
    return chain, info


def _shares(targets: list[int], newest: list[int], by_action: Counter[tuple[int, int, int]],
            pair_total: Counter[tuple[int, int]], b: int, b2: int) -> list[tuple[int, float]]:
    """How the memoryless P(b → b2) is shared among ``targets``: by how often b → b2 came with each
    target's newest action (equally among the targets of one action), or equally among the
    actions where b → b2 was never observed (it has mass from smoothing alone)."""
    groups: dict[int, list[int]] = {}
    for t in targets:
        groups.setdefault(newest[t], []).append(t)
    total = pair_total[b, b2]
    out = []
    for action, members in groups.items():
        weight = by_action[b, b2, action] / total if total else 1.0 / len(groups)
        out += [(t, weight / len(members)) for t in members if weight > 0.0]
    return out


def _unseen_unsafe(low: LearnedDTMC, observed: set[int], predicates: PredicateSet, memory: Memory) -> set[int]:
    """Chain states for the unsafe states the memoryless chain added (guard.learning.reachable_unsafe),
    with the memory label a run entering them from each observed state would carry."""
    width = predicates.width
    mask = (1 << width) - 1
    stripped = {s & mask for s in observed}
    added = {j for j in range(low.size - 1) if low.unsafe[j] and low.states[j] not in stripped}
    out: set[int] = set()
    if not added:
        return out
    low_index = low.index()
    indptr, indices = low.matrix.indptr, low.matrix.indices
    for s in observed:
        b, label = s & mask, s >> width
        if predicates.is_unsafe(b):
            continue
        row = low_index[b]
        for j in indices[indptr[row]:indptr[row + 1]].tolist():
            if j in added:
                u = low.states[j]
                # entered by an action the vocabulary lacks (the newest class V + 1): the labels of
                # the arrival keys a run from s could carry; without action memory, the key's own label
                newest = memory.base - 1 if memory.actions else 0
                out.update(u | (old + memory.n_old * (newest + memory.base * prefix)) << width
                           for old, prefix in memory.successor_keys(label, b, u == b))
    return out


def _choose_beta(paths: Mapping[tuple[int, ...], int], predicates: PredicateSet, index: dict[int, int], end: int,
                 prior: list[dict[int, float]], seen: list[dict[int, float]]) -> tuple[float, list[float]]:
    """β of the grid maximising the leave-one-run-out log-likelihood per transition."""
    totals = [sum(row.values()) for row in seen]
    mass = [sum(row.values()) for row in prior]
    n_st, c_st, n_s, c_s, pi, z, w = [], [], [], [], [], [], []
    for i, t, c, out_of, weight in held_out_transitions(paths, predicates, index, end):
        n_st.append(seen[i][t])
        c_st.append(c)
        n_s.append(totals[i])
        c_s.append(out_of)
        pi.append(prior[i].get(t, 0.0))
        z.append(mass[i])
        w.append(weight)
    a_nst, a_cst, a_ns, a_cs, a_pi, a_z, a_w = (np.asarray(x, dtype=float) for x in (n_st, c_st, n_s, c_s, pi, z, w))
    steps = float((a_w * a_cst).sum()) or 1.0
    scores = []
    for beta in BETA_GRID:
        with np.errstate(divide="ignore", invalid="ignore"):
            p = (a_nst - a_cst + beta * a_pi) / (a_ns - a_cs + beta * a_z)
        p = np.where(np.isfinite(p), np.maximum(p, 1e-9), 1e-9)  # floored: support only this run gave
        scores.append(float((a_w * a_cst * np.log(p)).sum()) / steps)
    best = max(range(len(BETA_GRID)), key=lambda k: (round(scores[k], 12), BETA_GRID[k]))
    return float(BETA_GRID[best]), scores
