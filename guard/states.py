"""Looking inside a model: its abstract states, how much data each rests on, what each triggers.

``forewarn states MODEL`` lists, per state of the checked model (the learned chain, or
its product with the monitors): the visits the risk was estimated from, the risk with
Storm's bounds and, where the model has one, its statistical interval, the action the
policy takes there, and the most likely path to an unsafe state.

The most likely path is the single most probable sequence of transitions of the
learned chain from the state into an unsafe state (a monitor violation counts): a
shortest path with weights −log p, found by one Dijkstra search backwards from all
unsafe states at once. Its probability is a lower bound of the risk (the risk sums
over all paths); it says *how* the state is most likely to go wrong.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from .model import GuardModel
from .runtime import Guard

_PATHS: dict[int, tuple[GuardModel, np.ndarray, np.ndarray]] = {}  # per model: its most likely paths


@dataclass(frozen=True)
class StateRow:
    """One state of a model as ``forewarn states`` shows it."""

    index: int
    predicates: dict[str, bool]
    monitors: dict[str, str]
    unsafe: bool
    visits: int  # departures observed from the state (in a product: its abstract state's)
    runs_started: int
    p_unsafe: float
    lower: float | None  # Storm's certified bounds on p_unsafe
    upper: float | None
    ci_low: float | None  # the statistical interval, when the model has one
    ci_high: float | None
    action: str
    threshold: float | None
    path: list[int] | None  # most likely path to unsafe (state indices, this state first); None: unreachable
    path_probability: float | None
    # the Markov test rejected here (guard/markov_check.py): runs here differ by more than the state shows
    mismatch: bool = False
    # the guarded property whose figures these are: the one calling for the most severe action here
    property: str | None = None
    # with several guarded properties (guard.properties): each one's p_unsafe, action and threshold here
    properties: dict[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "predicates": self.predicates, "monitors": self.monitors,
                "unsafe": self.unsafe, "visits": self.visits, "runs_started": self.runs_started,
                "p_unsafe": self.p_unsafe, "lower": self.lower, "upper": self.upper,
                "ci_low": self.ci_low, "ci_high": self.ci_high, "action": self.action,
                "threshold": self.threshold, "path": self.path, "path_probability": self.path_probability,
                "markov_mismatch": self.mismatch, "property": self.property,
                **({} if self.properties is None else {"properties": self.properties})}


def most_likely_paths(matrix: sp.csr_matrix, targets: np.ndarray, absorbing: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The most probable path from every state into ``targets``.

    Args:
        matrix: row-stochastic transition matrix (CSR).
        targets: bool per state: where paths end.
        absorbing: bool per state: states no path leaves (targets included).

    Returns:
        ``(probability, successor)``: per state, the probability of its most likely path
        (0 where no target is reachable, 1 for a target) and the next state on it (−1 at
        a target or where there is none). Ties go to the lower state index.
    """
    n = matrix.shape[0]
    reverse = matrix.transpose().tocsr()  # row j: the predecessors i of j, with P(i, j)
    cost = np.full(n, math.inf)
    successor = np.full(n, -1, dtype=np.int64)
    heap = [(0.0, int(j)) for j in np.flatnonzero(targets)]
    for _, j in heap:
        cost[j] = 0.0
    heapq.heapify(heap)
    done = np.zeros(n, dtype=bool)
    while heap:
        c, j = heapq.heappop(heap)
        if done[j]:
            continue
        done[j] = True
        start, stop = reverse.indptr[j], reverse.indptr[j + 1]
        for i, p in zip(reverse.indices[start:stop].tolist(), reverse.data[start:stop].tolist()):
            if absorbing[i] or done[i] or p <= 0.0:
                continue
            candidate = c - math.log(p)
            if candidate < cost[i] or (candidate == cost[i] and j < successor[i]):
                cost[i], successor[i] = candidate, j
                heapq.heappush(heap, (candidate, i))
    return np.exp(-cost), successor


def _walk(successor: np.ndarray, start: int) -> list[int]:
    path = [start]
    while successor[path[-1]] >= 0:
        path.append(int(successor[path[-1]]))
    return path


def path_to_unsafe(model: GuardModel, index: int) -> tuple[list[int], float] | None:
    """The most likely path from chain state ``index`` into an unsafe state — what ``forewarn
    states`` prints as "most likely path to unsafe" — as (state indices, this one first; its
    probability); None where no unsafe state is reachable. The search runs once per model."""
    cached = _PATHS.get(id(model))
    if cached is None or cached[0] is not model:
        dtmc = model.dtmc
        cached = _PATHS[id(model)] = (model, *most_likely_paths(dtmc.matrix, dtmc.unsafe, dtmc.absorbing))
    _, probability, successor = cached
    if probability[index] <= 0.0:
        return None
    return _walk(successor, index), float(probability[index])


def state_rows(model: GuardModel, guard: Guard | None = None) -> list[StateRow]:
    """Every state of the model except ``end``, in the model's order.

    Args:
        guard: the guard whose policy decides the action (default: the spec's policy).
    """
    guard = guard if guard is not None else Guard(model)
    dtmc = model.dtmc
    visits = np.asarray(dtmc.counts.sum(axis=1)).ravel()
    probability, successor = most_likely_paths(dtmc.matrix, dtmc.unsafe, dtmc.absorbing)
    rows_q = dtmc.monitor_states.tolist() if dtmc.monitor_states is not None else None
    rows: list[StateRow] = []
    flagged = model.properties[0].mismatch
    for i, bits in enumerate(dtmc.states[:-1]):
        q = tuple(rows_q[i]) if rows_q is not None else ()
        memory = guard.memory
        if memory is None:
            decision = guard.decide_product(bits, q)
        else:  # a chain state carries its memory's label above the predicates: decide as a run there would
            width = memory.width
            predicates = bits & ((1 << width) - 1)
            decision = guard.decide_product(predicates, (*q, memory.state_for(predicates, bits >> width)))
        path = _walk(successor, i) if probability[i] > 0.0 else None
        deciding = next((v.name for v in decision.properties if v.formula == decision.property), None)
        several = None if len(decision.properties) < 2 else {
            v.name: {"p_unsafe": v.p_unsafe, "action": v.action.value, "threshold": v.threshold}
            for v in decision.properties}
        rows.append(StateRow(
            index=i, predicates={n: bool(bits >> b & 1) for b, n in enumerate(dtmc.predicates)},
            monitors=dict(decision.monitors), unsafe=bool(dtmc.unsafe[i]), visits=int(visits[i]),
            runs_started=int(dtmc.initial.get(i, 0)),
            p_unsafe=float(decision.p_unsafe if decision.p_unsafe is not None else math.nan),
            lower=decision.lower, upper=decision.upper,
            # the statistical interval, for models and decisions that carry one
            ci_low=getattr(decision, "ci_low", None), ci_high=getattr(decision, "ci_high", None),
            action=decision.action.value, threshold=decision.threshold,
            path=path, path_probability=None if path is None else float(probability[i]),
            mismatch=bool(flagged is not None and flagged[i]), property=deciding, properties=several))
    return rows
