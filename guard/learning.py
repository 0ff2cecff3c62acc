"""Learning a DTMC from abstract traces (Pro2Guard §3.2, eq. 1).

* Every run ends in the absorbing ``end`` state; a run is read up to its first unsafe
  step, and unsafe states are absorbing (nothing after a violation is counted).
* Valid-transition-aware Laplace smoothing:
  ``P(i, j) = (n_ij + α) / (n_i + k_i·α)`` for valid ``j``, 0 otherwise.
* A state never seen as a source gets the uniform row over its valid successors.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations

import numpy as np
import scipy.sparse as sp

from guard.predicates import PredicateSet
from guard.traces import Run, abstract_run

__all__ = [
    "END",
    "TransitionCounts",
    "LearnedDTMC",
    "ValidTransitionRule",
    "count_transitions",
    "learn_dtmc",
    "spec_transition_rule",
]

END = -1  # the abstract 'state' a run enters after its last step
ValidTransitionRule = Callable[[tuple[bool, ...], tuple[bool, ...]], bool]
DENSE_LIMIT = 50_000_000  # valid-successor entries we agree to materialise without a rule


@dataclass
class TransitionCounts:
    """Sufficient statistics of a trace set over abstract states (bit masks, ``END``)."""

    counts: Counter[tuple[int, int]] = field(default_factory=Counter)
    initial: Counter[int] = field(default_factory=Counter)
    unsafe: set[int] = field(default_factory=set)
    runs: int = 0
    steps: int = 0
    unsafe_runs: int = 0

    def add(self, abstract: list[int], predicates: PredicateSet) -> None:
        """Count one run's abstract states."""
        self.runs += 1
        self.steps += len(abstract)
        is_unsafe = predicates.is_unsafe
        previous = abstract[0]
        self.initial[previous] += 1
        counts = self.counts
        if is_unsafe(previous):
            self.unsafe.add(previous)
            self.unsafe_runs += 1
            return
        for current in abstract[1:]:
            counts[previous, current] += 1
            if is_unsafe(current):
                self.unsafe.add(current)
                self.unsafe_runs += 1
                return
            previous = current
        counts[previous, END] += 1


def count_transitions(runs: Iterable[Run], predicates: PredicateSet,
                      counts: TransitionCounts | None = None) -> TransitionCounts:
    """Stream runs into transition counts (memory grows with abstract states, not runs)."""
    counts = counts or TransitionCounts()
    for run in runs:
        counts.add(abstract_run(run, predicates), predicates)
    return counts


def spec_transition_rule(max_changed: int | None, irreversible_bits: int,
                         extra: ValidTransitionRule | None = None,
                         width: int = 0) -> ValidTransitionRule | None:
    """Combine the spec's constraints into one rule over valuations (``None``: all valid)."""
    if max_changed is None and not irreversible_bits and extra is None:
        return None

    def rule(src: tuple[bool, ...], dst: tuple[bool, ...]) -> bool:
        s = PredicateSet.bits_of(src)
        d = PredicateSet.bits_of(dst)
        if max_changed is not None and (s ^ d).bit_count() > max_changed:
            return False
        if s & irreversible_bits & ~d:
            return False
        return extra(src, dst) if extra is not None else True

    rule.max_changed = max_changed  # type: ignore[attr-defined]  # lets learning enumerate, not scan
    rule.irreversible_bits = irreversible_bits  # type: ignore[attr-defined]
    rule.extra = extra  # type: ignore[attr-defined]
    return rule


@dataclass
class LearnedDTMC:
    """A learned chain over abstract states; the last state is ``end``.

    ``counts`` and ``matrix`` are CSR matrices over state indices with the same
    sparsity: ``matrix`` holds the smoothed probabilities, ``counts`` the observations.
    """

    predicates: list[str]
    states: list[int]  # bit masks; END for the end state
    unsafe: np.ndarray  # bool per state
    initial: dict[int, int]  # state index -> runs that started there
    counts: sp.csr_matrix
    matrix: sp.csr_matrix
    alpha: float
    invalid_observed: int = 0  # observed transitions the rules call invalid (kept: data wins)
    # For a product with monitors (monitors/product.py): their names and, per state,
    # each monitor's state (row of ``end`` is all zeros: monitors stop there).
    monitors: list[str] = field(default_factory=list)
    monitor_states: np.ndarray | None = None

    @property
    def size(self) -> int:
        return len(self.states)

    @property
    def end_index(self) -> int:
        return len(self.states) - 1

    @property
    def absorbing(self) -> np.ndarray:
        mask = self.unsafe.copy()
        mask[self.end_index] = True
        return mask

    def index(self) -> dict[int, int]:
        """Bit mask → state index (``end`` excluded); for a chain without monitors."""
        if self.monitors:
            raise ValueError("a product with monitors is indexed by (bits, monitor states): use product_index()")
        return {bits: i for i, bits in enumerate(self.states[:-1])}

    def product_index(self) -> dict[tuple[int, tuple[int, ...]], int]:
        """(bit mask, monitor states) → state index (``end`` excluded)."""
        if self.monitor_states is None:
            return {(bits, ()): i for i, bits in enumerate(self.states[:-1])}
        rows = self.monitor_states.tolist()
        return {(bits, tuple(rows[i])): i for i, bits in enumerate(self.states[:-1])}

    @property
    def violations(self) -> np.ndarray:
        """Per state and monitor, whether the monitor is in ``viol`` (shape n × monitors)."""
        if self.monitor_states is None:
            return np.zeros((self.size, 0), dtype=bool)
        out = self.monitor_states == -1
        out[self.end_index] = False
        return out

    def exact_row(self, i: int) -> list[tuple[int, Fraction]]:
        """Row ``i`` as exact rationals, computed from the counts and α (for exact checking)."""
        start, stop = self.matrix.indptr[i], self.matrix.indptr[i + 1]
        cols = self.matrix.indices[start:stop]
        if self.absorbing[i]:
            return [(i, Fraction(1))]
        n = self.counts[i].toarray().ravel()
        alpha = Fraction(str(self.alpha))
        k = len(cols)
        total = int(n.sum())
        if total == 0:
            return [(int(j), Fraction(1, k)) for j in cols]
        return [(int(j), (int(n[j]) + alpha) / (total + k * alpha)) for j in cols]


def learn_dtmc(counts: TransitionCounts, predicates: PredicateSet, *, alpha: float,
               rule: ValidTransitionRule | None = None) -> LearnedDTMC:
    """Smooth counts into a DTMC (eq. 1 of the paper).

    Args:
        counts: transition counts from :func:`count_transitions`.
        predicates: the spec's predicates (names, widths, unsafe condition).
        alpha: Laplace smoothing constant (0 gives the maximum-likelihood chain).
        rule: which transitions are valid; ``None`` makes every observed state and
            ``end`` a valid successor of every non-absorbing state. Observed
            transitions are always kept, even where the rule calls them invalid.
    """
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    observed = set(counts.initial)
    for src, dst in counts.counts:
        observed.add(src)
        if dst != END:
            observed.add(dst)
    states = sorted(observed) + [END]
    index = {bits: i for i, bits in enumerate(states)}
    n_states = len(states)
    end = n_states - 1
    unsafe = np.array([bits != END and predicates.is_unsafe(bits) for bits in states], dtype=bool)

    observed_succ: dict[int, dict[int, int]] = {}
    for (src, dst), n in counts.counts.items():
        observed_succ.setdefault(index[src], {})[index[dst]] = n

    successors = _valid_successors(states, index, unsafe, predicates.width, rule)
    if successors is None and (n_states - 1) * n_states > DENSE_LIMIT:
        raise ValueError(
            f"{n_states - 1} abstract states with every transition valid would need "
            f"{(n_states - 1) * n_states:,} entries; narrow the valid transitions "
            "(valid_transitions.max_changed_predicates or a domain rule)")
    all_targets = np.arange(n_states, dtype=np.int64)

    indptr = [0]
    cols_parts: list[np.ndarray] = []
    prob_parts: list[np.ndarray] = []
    count_parts: list[np.ndarray] = []
    invalid_observed = 0
    for i in range(n_states):
        if i == end or unsafe[i]:
            cols = np.array([i], dtype=np.int64)
            probs = np.ones(1)
            row_counts = np.zeros(1)
        else:
            seen = observed_succ.get(i, {})
            valid = all_targets if successors is None else successors[i]
            extra = [j for j in seen if not _contains(valid, j)]
            if extra:
                invalid_observed += sum(seen[j] for j in extra)
                valid = np.union1d(valid, np.array(extra, dtype=np.int64))
            cols = valid
            row_counts = np.array([seen.get(int(j), 0) for j in cols], dtype=np.float64) if seen \
                else np.zeros(len(cols))
            total = row_counts.sum()
            k = len(cols)
            if total == 0 and alpha == 0:
                probs = np.full(k, 1.0 / k)
            else:
                probs = (row_counts + alpha) / (total + k * alpha)
                if alpha == 0:  # maximum likelihood: drop the zero entries
                    keep = row_counts > 0
                    cols, probs, row_counts = cols[keep], probs[keep], row_counts[keep]
        cols_parts.append(cols)
        prob_parts.append(probs)
        count_parts.append(row_counts)
        indptr.append(indptr[-1] + len(cols))
    indices = np.concatenate(cols_parts)
    shape = (n_states, n_states)
    matrix = sp.csr_matrix((np.concatenate(prob_parts), indices, np.array(indptr)), shape=shape)
    count_matrix = sp.csr_matrix((np.concatenate(count_parts), indices, np.array(indptr)), shape=shape)
    initial = {index[bits]: n for bits, n in counts.initial.items()}
    return LearnedDTMC(predicates=list(predicates.names), states=states, unsafe=unsafe, initial=initial,
                       counts=count_matrix, matrix=matrix, alpha=float(alpha),
                       invalid_observed=invalid_observed)


def _contains(sorted_array: np.ndarray, value: int) -> bool:
    position = np.searchsorted(sorted_array, value)
    return bool(position < len(sorted_array) and sorted_array[position] == value)


def _valid_successors(states: list[int], index: dict[int, int], unsafe: np.ndarray, width: int,
                      rule: ValidTransitionRule | None) -> list[np.ndarray] | None:
    """Sorted valid successor indices per state (``end`` always valid); ``None``: all states."""
    if rule is None:
        return None
    end = len(states) - 1
    max_changed = getattr(rule, "max_changed", None)
    irreversible = getattr(rule, "irreversible_bits", 0)
    extra = getattr(rule, "extra", rule)
    valuation = [tuple(bool(bits >> b & 1) for b in range(width)) if bits != END else () for bits in states]
    out: list[np.ndarray] = []
    for i, src in enumerate(states):
        if i == end or unsafe[i]:
            out.append(np.array([i], dtype=np.int64))
            continue
        if max_changed is not None and max_changed < width:
            # enumerate the few neighbours within the Hamming ball instead of scanning all states
            candidates = set()
            for r in range(max_changed + 1):
                for flip in combinations(range(width), r):
                    mask = 0
                    for b in flip:
                        mask |= 1 << b
                    j = index.get(src ^ mask)
                    if j is not None:
                        candidates.add(j)
        else:
            candidates = set(range(end))
        valid = [j for j in candidates
                 if not (src & irreversible & ~states[j])
                 and (extra is None or extra(valuation[i], valuation[j]))]
        valid.append(end)
        out.append(np.array(sorted(valid), dtype=np.int64))
    return out
