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

The rows are built on whole arrays (an action-memory chain has ~10⁵ (state, successor) pairs),
with the same floating-point operations, in the same order, as a row-by-row construction.
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
    low = learn_dtmc(strip_memory(counts, width), predicates, alpha=alpha, rule=rule, structure=structure)
    observed = set(counts.initial) | {a for a, _ in counts.counts} | {b for _, b in counts.counts if b != END}
    observed |= _unseen_unsafe(low, observed, predicates, memory)
    states = sorted(observed) + [END]
    end = len(states) - 1
    index = {s: i for i, s in enumerate(states[:-1])}
    unsafe = np.array([predicates.is_unsafe(s) for s in states[:-1]] + [False], dtype=bool)
    prior_row, prior_col, prior_val = _prior(counts, low, states, unsafe, memory, width)
    seen_pairs = [(index[a], end if b == END else index[b], float(n)) for (a, b), n in counts.counts.items()
                  if not unsafe[index[a]]]
    seen_row = np.fromiter((r for r, _, _ in seen_pairs), dtype=np.int64, count=len(seen_pairs))
    seen_col = np.fromiter((c for _, c, _ in seen_pairs), dtype=np.int64, count=len(seen_pairs))
    seen_val = np.fromiter((v for _, _, v in seen_pairs), dtype=np.float64, count=len(seen_pairs))
    n = len(states)
    # the union of each row's prior and observed successors, sorted by (row, column)
    codes, inverse = np.unique(np.concatenate([prior_row * n + prior_col, seen_row * n + seen_col]),
                               return_inverse=True)
    inverse = inverse.reshape(-1)
    pi_u = np.bincount(inverse[:len(prior_val)], weights=prior_val, minlength=len(codes))  # one term each
    seen_u = np.bincount(inverse[len(prior_val):], weights=seen_val, minlength=len(codes))
    info: dict[str, object] = {}
    if beta == "auto":
        if paths is None:
            raise UsageError("backoff 'auto' needs the runs' paths")
        # row sums in the order the entries were met (as summing each row's dict of them would)
        totals = np.bincount(seen_row, weights=seen_val, minlength=n)
        mass = np.bincount(prior_row, weights=prior_val, minlength=n)
        beta, scores = _choose_beta(paths, predicates, index, end, codes, seen_u, pi_u, totals, mass)
        info = {"chosen": beta, "grid": list(BETA_GRID), "heldout_loglik_per_step": scores}
    else:
        info = {"chosen": float(beta)}
    beta = float(beta)
    entry_row, entry_col = np.divmod(codes, n)
    xs = beta * pi_u
    weights = seen_u + xs
    whole = np.bincount(entry_row, weights=weights, minlength=n)  # each row's sum, left to right
    probs = weights / whole[entry_row]
    # absorbing rows (unsafe states and end) loop on themselves
    absorbing = np.append(np.flatnonzero(unsafe[:-1]), end)
    entry_row = np.concatenate([entry_row, absorbing])
    order = np.argsort(entry_row, kind="stable")
    entry_row = entry_row[order]
    indices = np.concatenate([entry_col, absorbing])[order]
    probs = np.concatenate([probs, np.ones(len(absorbing))])[order]
    ns = np.concatenate([seen_u, np.zeros(len(absorbing))])[order]
    xs = np.concatenate([xs, np.zeros(len(absorbing))])[order]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(entry_row, minlength=n), out=indptr[1:])
    shape = (n, n)
    initial = {index[s]: c for s, c in counts.initial.items()}
    chain = LearnedDTMC(predicates=list(predicates.names), states=states, unsafe=unsafe, initial=initial,
                        counts=sp.csr_matrix((ns, indices, indptr), shape=shape),
                        matrix=sp.csr_matrix((probs, indices.copy(), indptr.copy()), shape=shape),
                        alpha=low.alpha, invalid_observed=low.invalid_observed,
                        pseudo=sp.csr_matrix((xs, indices.copy(), indptr.copy()), shape=shape),
                        actions=memory.vocabulary or ())
    return chain, info


def _prior(counts: TransitionCounts, low: LearnedDTMC, states: list[int], unsafe: np.ndarray, memory: Memory,
           width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The prior's shape π as (row, column, value) entries, each row's in the order a row-by-row
    construction meets them (its memoryless successors in order; a successor's targets grouped by
    newest action, in order of first appearance).

    Row ``(b, l)`` gives the memoryless ``P(b → b2)`` to the observed states ``(b2, l')`` the memory
    allows after it (the arrival keys :meth:`Memory.successor_keys` lists); within them, a newest
    action's share is how often ``b → b2`` came with it over all histories (equal shares over the
    actions where ``b → b2`` was never observed), split equally among that action's targets.
    """
    mask = (1 << width) - 1
    low_index, low_end = low.index(), low.end_index
    end = len(states) - 1
    # observed states by what their predecessor determines (all but the newest action), as groups
    groups: dict[tuple[int, tuple[int, int]], list[int]] = {}
    for i, s in enumerate(states[:-1]):
        groups.setdefault((s & mask, memory.arrival_key(s >> width)), []).append(i)
    group_id = {key: g for g, key in enumerate(groups)}
    sizes = np.fromiter((len(m) for m in groups.values()), dtype=np.int64, count=len(groups))
    group_start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    members = np.fromiter((t for m in groups.values() for t in m), dtype=np.int64, count=int(sizes.sum()))
    newest = np.fromiter((memory.newest_action(s >> width) for s in states[:-1]), dtype=np.int64, count=end)
    actions = int(newest.max(initial=0)) + 1
    # how often b → b2 came with each newest action, over all histories (a single class without actions)
    size = low.size
    by_action: Counter[int] = Counter()
    for (a, b), n in counts.counts.items():
        if b != END:
            by_action[(low_index[a & mask] * size + low_index[b & mask]) * actions
                      + memory.newest_action(b >> width)] += n
    action_codes = np.fromiter(by_action.keys(), dtype=np.int64, count=len(by_action))
    action_counts = np.fromiter(by_action.values(), dtype=np.int64, count=len(by_action))
    order = np.argsort(action_codes)
    action_codes, action_counts = action_codes[order], action_counts[order]
    pair_total = np.bincount(action_codes // actions, weights=action_counts, minlength=size * size)
    # each row's successor keys: the groups it may stay in (b2 = b), the key it moves on with (b2 ≠ b)
    transient = np.flatnonzero(~unsafe[:end])
    row_low = np.empty(len(transient), dtype=np.int64)
    stay_group = np.full((len(transient), 2), -1, dtype=np.int64)
    move_of = np.empty(len(transient), dtype=np.int64)
    move_ids: dict[tuple[int, int], int] = {}
    for n, i in enumerate(transient.tolist()):
        b, label = states[i] & mask, states[i] >> width
        row_low[n] = low_index[b]
        for k, key in enumerate(memory.successor_keys(label, b, True)):  # the label as it is, or one bucket on
            stay_group[n, k] = group_id.get((b, key), -1)
        (move,) = memory.successor_keys(label, b, False)
        move_of[n] = move_ids.setdefault(move, len(move_ids))
    # every (row, memoryless successor) pair, in order
    indptr, indices = low.matrix.indptr, low.matrix.indices
    lengths = indptr[row_low + 1] - indptr[row_low]
    owner = np.repeat(np.arange(len(transient)), lengths)
    position = np.repeat(indptr[row_low], lengths) + np.arange(int(lengths.sum())) \
        - np.repeat(np.cumsum(lengths) - lengths, lengths)
    j_of = indices[position].astype(np.int64)
    p_of = low.matrix.data[position].astype(np.float64)
    rows = transient[owner]
    lows = np.stack([row_low[owner], j_of], axis=1)
    stays = j_of == row_low[owner]
    # the arrival groups of each pair's targets: (pair, group), in the pair's key order
    parts_pair, parts_group, parts_order = [], [], []
    for k in (0, 1):
        pairs = np.flatnonzero(stays & (stay_group[owner, k] >= 0))
        parts_pair.append(pairs)
        parts_group.append(stay_group[owner[pairs], k])
        parts_order.append(pairs * 2 + k)
    moving = np.flatnonzero(~stays & (j_of != low_end))
    width_m = max(len(move_ids), 1)
    known = [(low_index[b2] * width_m + move_ids[key], g) for (b2, key), g in group_id.items() if key in move_ids]
    known.sort()
    group_codes = np.asarray([c for c, _ in known], dtype=np.int64)
    group_of_code = np.asarray([g for _, g in known], dtype=np.int64)
    wanted = j_of[moving] * width_m + move_of[owner[moving]]
    at = np.minimum(np.searchsorted(group_codes, wanted), max(len(group_codes) - 1, 0))
    found = group_codes[at] == wanted if len(group_codes) else np.zeros(len(wanted), dtype=np.bool_)
    parts_pair.append(moving[found])
    parts_group.append(group_of_code[at[found]])
    parts_order.append(moving[found] * 2)
    order = np.argsort(np.concatenate(parts_order), kind="stable")
    kp = np.concatenate(parts_pair)[order]
    kg = np.concatenate(parts_group)[order]
    # the targets: each (pair, group) expanded to the group's members, in order
    counts_k = sizes[kg]
    pair_e = np.repeat(kp, counts_k)
    within = np.arange(len(pair_e)) - np.repeat(np.cumsum(counts_k) - counts_k, counts_k)
    target = members[np.repeat(group_start[kg], counts_k) + within]
    action = newest[target]
    # the (pair, newest action) groups: their sizes, how many a pair has, where each is first met
    codes = pair_e * actions + action
    _, first, inverse, group_sizes = np.unique(codes, return_index=True, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    per_pair = np.bincount(pair_e[first], minlength=len(rows))
    b_low, b2_low = lows[pair_e, 0], lows[pair_e, 1]
    total = pair_total[b_low * size + b2_low]
    code = (b_low * size + b2_low) * actions + action
    at = np.minimum(np.searchsorted(action_codes, code), max(len(action_codes) - 1, 0))
    seen = np.where(action_codes[at] == code, action_counts[at], 0) if len(action_codes) else np.zeros(len(code))
    with np.errstate(divide="ignore", invalid="ignore"):
        weight = np.where(total > 0, seen / np.where(total > 0, total, 1.0), 1.0 / per_pair[pair_e])
    value = p_of[pair_e] * (weight / group_sizes[inverse])
    keep = weight > 0.0
    # a row's entries: its pairs in order, a pair's targets by the first appearance of their action
    ordered = np.flatnonzero(keep)[np.argsort(first[inverse][keep], kind="stable")]
    ends = np.flatnonzero(lows[:, 1] == low_end)
    entry_pair = np.concatenate([pair_e[ordered], ends])
    merge = np.argsort(entry_pair, kind="stable")
    column = np.concatenate([target[ordered], np.full(len(ends), end, dtype=np.int64)])[merge]
    val = np.concatenate([value[ordered], p_of[ends]])[merge]
    return rows[entry_pair[merge]], column, val


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
                 codes: np.ndarray, seen: np.ndarray, prior: np.ndarray, totals: np.ndarray, mass: np.ndarray
                 ) -> tuple[float, list[float]]:
    """β of the grid maximising the leave-one-run-out log-likelihood per transition; ``codes`` are the
    entries (row · states + column, sorted) whose ``seen`` counts and ``prior`` shares are given."""
    n = len(totals)
    rows, cols, c_st, c_s, w = [], [], [], [], []
    for i, t, c, out_of, weight in held_out_transitions(paths, predicates, index, end):
        rows.append(i)
        cols.append(t)
        c_st.append(c)
        c_s.append(out_of)
        w.append(weight)
    a_i = np.asarray(rows, dtype=np.int64)
    at = np.searchsorted(codes, a_i * n + np.asarray(cols, dtype=np.int64))  # every one was observed
    a_nst, a_pi, a_ns, a_z = seen[at], prior[at], totals[a_i], mass[a_i]
    a_cst, a_cs, a_w = (np.asarray(x, dtype=float) for x in (c_st, c_s, w))
    steps = float((a_w * a_cst).sum()) or 1.0
    scores = []
    for beta in BETA_GRID:
        with np.errstate(divide="ignore", invalid="ignore"):
            p = (a_nst - a_cst + beta * a_pi) / (a_ns - a_cs + beta * a_z)
        p = np.where(np.isfinite(p), np.maximum(p, 1e-9), 1e-9)  # floored: support only this run gave
        scores.append(float((a_w * a_cst * np.log(p)).sum()) / steps)
    best = max(range(len(BETA_GRID)), key=lambda k: (round(scores[k], 12), BETA_GRID[k]))
    return float(BETA_GRID[best]), scores
