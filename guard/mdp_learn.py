"""Learning the MDP beside the chain (``learning.mdp``; guard/mdp.py holds what it is, docs/shield.md why).

Counting reads each run as the chain's counting does — up to its first unsafe step — and keeps the
class of the action that made each step: ``(s, a, s')``. Smoothing is the chain's (eq. 1), per choice:
``P(s, a, j) = (n_saj + α) / (n_sa + k·α)`` over the successors the chain gives ``s`` (its valid
successors, less ``end``) and those observed after ``a``. Storm's MDP engine then gives ``Pmin`` and
``Pmax`` in every state; each choice's risk is one step of Bellman's equation over ``Pmin``, with a
confidence interval from Clopper–Pearson intervals on the choice's row (union bound over the
estimated entries at ``learning.delta``), the continuation's ``Pmin`` taken as known.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from ..errors import ConfigError
from ..monitors.base import Monitor
from ..monitors.product import advance
from .actions import ActionClass, action_class, action_view
from .chain import LearnedDTMC
from .intervals import clopper_pearson
from .mdp import ANY, END_CHOICE, LearnedMDP
from .memory import Memory, build_memory
from .predicates import PredicateSet
from .results import CheckOutcome
from .spec import Meaning, PropertyDef, Spec
from .storm import Method, build_sparse_mdp, check_sparse_model, labels_of
from .traces import Run, abstract_run

_REACH = re.compile(r'^\s*F\s*"[^"]+"\s*$')  # an unbounded reachability: one Bellman step over Pmin is exact


@dataclass
class ChoiceCounts:
    """``(source bits, action class, target bits)`` counts, and the runs that ended in each state."""

    steps: Counter[tuple[int, str, int]] = field(default_factory=Counter)
    ends: Counter[int] = field(default_factory=Counter)

    def add(self, abstract: list[int], classes: list[str], predicates: PredicateSet) -> None:
        previous = abstract[0]
        if predicates.is_unsafe(previous):
            return
        for current, cls in zip(abstract[1:], classes[1:]):
            self.steps[previous, cls, current] += 1
            if predicates.is_unsafe(current):
                return
            previous = current
        self.ends[previous] += 1


def mdp_refusal(spec: Spec) -> str | None:
    """Why this spec cannot have an MDP (None: it can)."""
    if spec.learning.kinds != 1:
        return ("learning.mdp: a spec with learning.kinds is refused: a run's kind is hidden, so the safest next "
                "move over a mixture of MDPs is a partially observable problem, not one MDP's per-state risk "
                "(set kinds: 1)")
    return None


def tap_choices(runs: Iterable[Run], predicates: PredicateSet, of: ActionClass, counts: ChoiceCounts,
                memory: Memory | None = None) -> Iterator[Run]:
    """The runs, unchanged, each also counted into ``counts`` (one pass over the data for chain and MDP);
    ``memory`` encodes the abstract states as the chain's counting does (with ``actions``, portably:
    :func:`learn_mdp` numbers them as the model does)."""
    for run in runs:
        yield run
        abstract = abstract_run(run, predicates)
        if memory is not None:
            abstract = memory.encode_run(abstract, [step.get("action") for step in run.steps])
        counts.add(abstract, [action_class(action_view(step.get("action")), of) for step in run.steps], predicates)


def advice_property(spec: Spec) -> PropertyDef | None:
    """The property the MDP's risks are for: the first guarded one, when it is an unbounded reachability of
    a violation (``F "unsafe"``); None otherwise (the MDP is then stored and checkable, with no advice)."""
    first = spec.guard.effective_properties()[0]
    return first if first.meaning is Meaning.VIOLATION and _REACH.match(first.formula) else None


def learn_mdp(counts: ChoiceCounts, dtmc: LearnedDTMC, spec: Spec, *, alpha: float, delta: float,
              precision: float = 1e-6, monitors: Sequence[Monitor] = ()) -> LearnedMDP:
    """Smooth the counted choices over the model's states, check them with Storm, and attach the risks.

    With monitors the states are the product's (abstract state × monitor states, ``dtmc``): a choice from
    ``(s, q)`` goes where the chain's choice from ``s`` goes, each successor ``s'`` with the monitor states
    ``q`` steps to on it — the product of the MDP with the monitors' automata, over the product's states."""
    if len(monitors) != len(dtmc.monitors):
        raise ConfigError(f"learning.mdp: the model has monitors {dtmc.monitors}, {len(monitors)} were given")
    end = dtmc.end_index
    matrix = dtmc.matrix
    absorbing = dtmc.absorbing
    # counted by abstract state (bits): each product state (bits, monitor states) takes its bits' counts, the
    # successor's monitor states following from its bits (a monitor steps deterministically on them)
    by_bits: dict[int, dict[str, Counter[int]]] = {}
    # learning.memory.actions: the runs were counted with portable histories; the model numbers them by its
    # vocabulary, and a choice of class a leads only to states whose newest remembered action is a
    portable = build_memory(spec.learning.memory, len(dtmc.predicates)) if spec.learning.memory.actions else None
    compact = build_memory(spec.learning.memory, len(dtmc.predicates), dtmc.actions) if portable else None
    ends: Counter[int] = Counter()
    for state, n in counts.ends.items():
        ends[state if portable is None or compact is None else portable.recode(state, compact)] += n
    for (src, cls, dst), n in counts.steps.items():
        if portable is not None and compact is not None:
            src, dst = portable.recode(src, compact), portable.recode(dst, compact)
        by_bits.setdefault(src, {}).setdefault(cls, Counter())[dst] += n
    index = dtmc.product_index()
    rows_q = dtmc.monitor_states.tolist() if dtmc.monitor_states is not None else None
    names: set[str] = {ANY}
    choices = [0]
    rows: list[tuple[str, list[int], list[float], list[float]]] = []
    for s in range(dtmc.size):
        chain_targets = matrix.indices[matrix.indptr[s]:matrix.indptr[s + 1]].tolist()
        here: list[tuple[str, list[int], list[float], list[float]]] = []
        if absorbing[s]:
            here.append((ANY, [s], [1.0], [0.0]))
        else:
            support = [j for j in chain_targets if j != end]
            q = () if rows_q is None else tuple(rows_q[s])
            width = len(dtmc.predicates)
            by_state: dict[str, Counter[int]] = {}
            for cls, seen_bits in by_bits.get(dtmc.states[s], {}).items():
                mapped: Counter[int] = Counter()
                for dst, n in seen_bits.items():
                    j = index.get((dst, advance(monitors, q, dst) if monitors else ()))
                    if j is not None:  # the product has every successor the chain has (monitors only relabel)
                        mapped[j] += n
                if mapped:
                    by_state[cls] = mapped
            for cls, seen in sorted(by_state.items()):
                allowed = support if compact is None else [  # the states that remember this move as the newest
                    j for j in support if compact.newest_action(dtmc.states[j] >> width) == compact.class_id(cls)]
                targets = sorted(set(allowed) | set(seen)) if alpha > 0 else sorted(seen)
                observed = [float(seen.get(j, 0)) for j in targets]
                total = sum(observed) + len(targets) * alpha
                here.append((cls, targets, [(c + alpha) / total for c in observed], observed))
            if ends.get(dtmc.states[s], 0):
                here.append((END_CHOICE, [end], [1.0], [float(ends[dtmc.states[s]])]))
            if not here:  # never left by an action: the chain's row
                start, stop = matrix.indptr[s], matrix.indptr[s + 1]
                here.append((ANY, chain_targets, matrix.data[start:stop].tolist(), [0.0] * (stop - start)))
        for cls, *_ in here:
            names.add(cls)
        rows += here
        choices.append(len(rows))
    classes = tuple(sorted(names))
    number = {c: k for k, c in enumerate(classes)}
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r[1]) for r in rows], out=indptr[1:])
    mdp = LearnedMDP(classes, spec.learning.memory.action_class, np.array(choices, dtype=np.int64),
                     np.array([number[r[0]] for r in rows], dtype=np.int64), indptr,
                     np.array([j for r in rows for j in r[1]], dtype=np.int64),
                     np.array([p for r in rows for p in r[2]], dtype=float),
                     np.array([c for r in rows for c in r[3]], dtype=float))
    prop = advice_property(spec)
    if prop is None:
        return mdp
    labels = labels_of(dtmc)
    mdp.formula = prop.formula
    mdp.pmin = check_mdp(mdp, labels, f"Pmin=? [{prop.formula}]", precision=precision).values
    mdp.pmax = check_mdp(mdp, labels, f"Pmax=? [{prop.formula}]", precision=precision).values
    mdp.risk, mdp.risk_low, mdp.risk_high = choice_risks(mdp, mdp.pmin, delta)
    mdp.delta = delta
    return mdp


def check_mdp(mdp: LearnedMDP, labels: dict[str, list[int]], formula: str, *, method: Method = Method.SOUND,
              precision: float = 1e-6, exact: list[Fraction] | None = None) -> CheckOutcome:
    """``Pmin=? [...]`` or ``Pmax=? [...]`` in every state, by Storm's MDP engine."""
    model = build_sparse_mdp(mdp.choices, mdp.indptr, mdp.indices, mdp.probabilities, labels, exact=exact)
    return check_sparse_model(model, formula, method=method, precision=precision)


def choice_risks(mdp: LearnedMDP, pmin: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per choice, ``Q = Σ_j P(s, a, j)·Pmin(j)`` and its interval: the least and greatest such sum over
    the rows inside the entries' Clopper–Pearson intervals (summing to 1), clipped to contain ``Q``."""
    m = len(mdp.indptr) - 1
    visits = mdp.visits
    lengths = np.diff(mdp.indptr)
    estimated = int(lengths[(visits > 0) & (lengths >= 2)].sum())
    per_entry = delta / max(estimated, 1)
    row_n = np.repeat(visits, lengths)
    seen = row_n > 0
    low = np.zeros(len(mdp.indices))
    high = np.ones(len(mdp.indices))
    if seen.any():
        low[seen], high[seen] = clopper_pearson(mdp.counts[seen], row_n[seen], per_entry)
    single = np.repeat(lengths == 1, lengths)  # a one-target row is certain
    low[single], high[single] = 1.0, 1.0
    values = pmin[mdp.indices]
    risk = np.add.reduceat(mdp.probabilities * values, mdp.indptr[:-1])
    risk_low, risk_high = np.empty(m), np.empty(m)
    for c in range(m):
        a, b = mdp.indptr[c], mdp.indptr[c + 1]
        v, lo, hi = values[a:b], low[a:b], high[a:b]
        risk_low[c] = _extreme(v, lo, hi, ascending=True)
        risk_high[c] = _extreme(v, lo, hi, ascending=False)
    risk = np.clip(risk, 0.0, 1.0)
    return risk, np.minimum(risk_low, risk), np.maximum(risk_high, risk)


def _extreme(values: np.ndarray, low: np.ndarray, high: np.ndarray, *, ascending: bool) -> float:
    """min (or max) of Σ p·v with low ≤ p ≤ high, Σ p = 1: the free mass goes to the lowest (highest) v first."""
    p = low.copy()
    free = 1.0 - float(p.sum())
    for k in (np.argsort(values) if ascending else np.argsort(-values)).tolist():
        give = min(free, float(high[k] - low[k]))
        p[k] += give
        free -= give
        if free <= 0:
            break
    return float(np.clip(np.dot(p, values), 0.0, 1.0))
