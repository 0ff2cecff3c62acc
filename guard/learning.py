"""Learning a DTMC from abstract traces (Pro2Guard §3.2, eq. 1).

* Every run ends in the absorbing ``end`` state; a run is read up to its first unsafe
  step, and unsafe states are absorbing (nothing after a violation is counted).
* Valid-transition-aware Laplace smoothing:
  ``P(i, j) = (n_ij + α) / (n_i + k_i·α)`` for valid ``j``, 0 otherwise.
* A state never seen as a source gets the uniform row over its valid successors.
"""
from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain, combinations
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError, StateSpaceTooLargeError
from .chain import END, LearnedDTMC
from .predicates import PredicateSet
from .traces import Run, abstract_run

__all__ = [
    "END",
    "TransitionCounts",
    "LearnedDTMC",
    "ValidTransitionRule",
    "count_transitions",
    "learn_dtmc",
    "reachable_unsafe",
    "spec_transition_rule",
]

ValidTransitionRule = Callable[[tuple[bool, ...], tuple[bool, ...]], bool]
DENSE_LIMIT = 50_000_000  # valid-successor entries we agree to materialise without a rule (read at each call)
_TABLE_WIDTH = 22  # up to this many predicates, states are found in a table of 2^width entries


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
                      counts: TransitionCounts | None = None,
                      paths: Counter[tuple[int, ...]] | None = None,
                      encode: Callable[[list[int], list[Any]], list[int]] | None = None) -> TransitionCounts:
    """Stream runs into transition counts (memory grows with abstract states, not runs).

    The cyclic garbage collector is paused meanwhile (and restored after, also on
    error): parsed JSON holds no cycles, and its passes over the freshly parsed states
    cost more than the parsing itself. The pause is process-wide. ``paths``, when given,
    collects each distinct abstract run with its multiplicity (for cross-validation);
    ``encode`` maps each abstract run, with its steps' actions, to chain states first (a memory,
    guard/memory.py).
    """
    counts = counts or TransitionCounts()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for run in runs:
            abstract = abstract_run(run, predicates)
            if encode is not None:
                abstract = encode(abstract, [step.get("action") for step in run.steps])
            counts.add(abstract, predicates)
            if paths is not None:
                paths[tuple(abstract)] += 1
    finally:
        if was_enabled:
            gc.enable()
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


def learn_dtmc(counts: TransitionCounts, predicates: PredicateSet, *, alpha: float,
               rule: ValidTransitionRule | None = None, structure: str = "valid") -> LearnedDTMC:
    """Smooth counts into a DTMC (eq. 1 of the paper).

    Args:
        counts: transition counts from :func:`count_transitions`.
        predicates: the spec's predicates (names, widths, unsafe condition).
        alpha: Laplace smoothing constant (0 gives the maximum-likelihood chain).
        rule: which transitions are valid; ``None`` makes every observed state and
            ``end`` a valid successor of every non-absorbing state. Observed
            transitions are always kept, even where the rule calls them invalid.
        structure: ``"valid"`` (every successor the rule allows gets α) or
            ``"observed"`` (only successors observed from the state do; the rule is not read).
    """
    if structure not in ("valid", "observed"):
        raise ConfigError(f"structure must be 'valid' or 'observed', got {structure!r}")
    if alpha < 0:
        raise ConfigError(f"alpha must be >= 0, got {alpha}")
    # Everything below works on whole arrays: entry (i, j) of the chain is the code i·n + j.
    pairs = counts.counts
    observed_n = np.fromiter(pairs.values(), dtype=np.int64, count=len(pairs))
    src_bits, dst_bits, initial_bits = _bit_arrays(counts)
    bits = _sorted_unique(np.concatenate([initial_bits, src_bits, dst_bits[dst_bits != END]]))
    flags = _unsafe_flags(bits, predicates)
    if structure == "valid":  # an unsafe state the spec allows is in the model, seen or not (docs/method.md)
        added = reachable_unsafe(bits, flags, predicates, rule)
        if len(added):
            bits = np.concatenate([bits, added])
            flags = np.concatenate([flags, np.ones(len(added), dtype=bool)])
            order = np.argsort(bits, kind="stable")
            bits, flags = bits[order], flags[order]
    states = bits.tolist() + [END]
    n_states = len(states)
    end = n_states - 1
    unsafe = np.zeros(n_states, dtype=bool)
    unsafe[:end] = flags
    transient = np.flatnonzero(~unsafe[:end])
    absorbing = np.append(np.flatnonzero(unsafe[:end]), end)

    locate = _locator(bits, predicates.width)
    if structure == "observed":
        valid = _observed_pairs(counts, locate, unsafe, n_states)
    elif rule is None:
        if (n_states - 1) * n_states > DENSE_LIMIT:
            raise StateSpaceTooLargeError(
                f"{n_states - 1:,} abstract states with every transition valid would need "
                f"{(n_states - 1) * n_states:,} matrix entries, over the limit of {DENSE_LIMIT:,} "
                "(forewarn.guard.learning.DENSE_LIMIT); narrow the valid transitions in the spec "
                "(valid_transitions: max_changed_predicates, irreversible or a function), learn only the "
                "observed successors (learning: structure: observed), or use fewer predicates",
                states=n_states - 1, limit=DENSE_LIMIT)
        valid = (transient[:, None] * n_states + np.arange(n_states)).ravel()
    else:
        sources, targets = _valid_pairs(bits, states, transient, predicates.width, rule, locate)
        valid = np.concatenate([sources * n_states + targets, transient * n_states + end])
        valid.sort(kind="stable")  # a radix sort for integers

    src = locate(src_bits)
    dst = np.where(dst_bits == END, end, locate(dst_bits))
    from_transient = ~unsafe[src]  # nothing is learned out of an absorbing state
    seen = src[from_transient] * n_states + dst[from_transient]
    order = np.argsort(seen, kind="stable")  # sorted look-ups below are several times faster than random ones
    seen, seen_n = seen[order], observed_n[from_transient][order]
    position = np.minimum(np.searchsorted(valid, seen), max(len(valid) - 1, 0))
    is_valid = valid[position] == seen if len(valid) else np.zeros(len(seen), dtype=bool)
    invalid_observed = int(seen_n[~is_valid].sum())
    codes = np.concatenate([valid, seen[~is_valid], absorbing * n_states + absorbing])
    codes.sort(kind="stable")
    rows, cols = np.divmod(codes, n_states)
    row_counts = np.zeros(len(codes))
    row_counts[np.searchsorted(codes, seen)] = seen_n

    # eq. 1 per entry, with the same floating-point operations as row by row
    k = np.bincount(rows, minlength=n_states)
    total = np.bincount(rows, weights=row_counts, minlength=n_states)
    alpha = float(alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        probs = (row_counts + alpha) / (total[rows] + k[rows].astype(np.float64) * alpha)
    absorbing_entry = unsafe[rows] | (rows == end)
    if alpha == 0:
        uniform = (total[rows] == 0) & ~absorbing_entry  # never seen as a source
        probs[uniform] = 1.0 / k[rows[uniform]]
        keep = absorbing_entry | uniform | (row_counts > 0)  # maximum likelihood: drop the zeros
        rows, cols, probs, row_counts = rows[keep], cols[keep], probs[keep], row_counts[keep]
    probs[unsafe[rows] | (rows == end)] = 1.0
    indptr = np.zeros(n_states + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_states), out=indptr[1:])
    indices = cols.astype(np.int64, copy=False)
    shape = (n_states, n_states)
    matrix = sp.csr_matrix((probs, indices, indptr), shape=shape)
    count_matrix = sp.csr_matrix((row_counts, indices, indptr.copy()), shape=shape)
    initial_index = np.searchsorted(bits, initial_bits).tolist()
    initial = dict(zip(initial_index, counts.initial.values()))
    return LearnedDTMC(predicates=list(predicates.names), states=states, unsafe=unsafe, initial=initial,
                       counts=count_matrix, matrix=matrix, alpha=alpha, invalid_observed=invalid_observed)


def _observed_pairs(counts: TransitionCounts, locate: Callable[[np.ndarray], np.ndarray], unsafe: np.ndarray,
                    n_states: int) -> np.ndarray:
    """Entry codes ``i·n + j`` of the transitions observed out of non-absorbing states, sorted."""
    src_bits, dst_bits, _ = _bit_arrays(counts)
    end = n_states - 1
    src = locate(src_bits)
    dst = np.where(dst_bits == END, end, locate(dst_bits))
    keep = ~unsafe[src]
    return _sorted_unique(src[keep] * n_states + dst[keep])


def _bit_arrays(counts: TransitionCounts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sources, targets and initial states as int64 arrays, or object arrays for masks past 63 bits."""
    pairs, initial = counts.counts, counts.initial
    for dtype in (np.int64, object):
        try:
            flat = np.fromiter(chain.from_iterable(pairs), dtype=dtype, count=2 * len(pairs))
            return flat[0::2], flat[1::2], np.fromiter(initial, dtype=dtype, count=len(initial))
        except OverflowError:
            continue
    raise AssertionError("unreachable: object arrays hold any int")


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    # sort and compare neighbours: np.unique's hash path is far slower on large int64 arrays
    values = np.sort(values, kind="stable")
    if len(values) > 1:
        values = values[np.concatenate([[True], values[1:] != values[:-1]])]
    return values


def _unsafe_flags(bits: np.ndarray, predicates: PredicateSet) -> np.ndarray:
    """``is_unsafe`` per state, evaluated once per valuation of the bits it reads."""
    mask = getattr(predicates, "unsafe_mask", None)
    if mask is None or len(bits) == 0:
        return np.array([predicates.is_unsafe(b) for b in bits.tolist()], dtype=bool)
    if bits.dtype != object:
        mask &= (1 << 63) - 1
    read, inverse = np.unique(bits & mask, return_inverse=True)
    return np.array([predicates.is_unsafe(b) for b in read.tolist()], dtype=bool)[inverse.ravel()]


def _locator(bits: np.ndarray, width: int) -> Callable[[np.ndarray], np.ndarray]:
    """A function giving the index of each bit mask among ``bits`` (sorted), or -1."""
    n = len(bits)
    if n and bits.dtype != object and width <= _TABLE_WIDTH and bits[0] >= 0 and bits[-1] >> width == 0:
        table = np.full(1 << width, -1, dtype=np.int64)  # a direct table: no search at all
        table[bits] = np.arange(n)
        return lambda values: table[values]

    def search(values: np.ndarray) -> np.ndarray:
        position = np.minimum(np.searchsorted(bits, values), max(n - 1, 0))
        return np.where(bits[position] == values, position, -1) if n else np.full(len(values), -1)

    return search


def _valid_pairs(bits: np.ndarray, states: list[int], sources: np.ndarray, width: int,
                 rule: ValidTransitionRule,
                 locate: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) index pairs the rule allows among observed states (``end`` excluded)."""
    max_changed = getattr(rule, "max_changed", None)
    irreversible = getattr(rule, "irreversible_bits", 0)
    extra = getattr(rule, "extra", rule)
    n = len(bits)
    source_bits = bits[sources]
    src_parts: list[np.ndarray] = []
    dst_parts: list[np.ndarray] = []
    if max_changed is not None and max_changed < width:
        # the few neighbours within the Hamming ball, looked up, not scanned for
        flippable = range(width) if bits.dtype == object else range(min(width, 63))
        for r in range(max_changed + 1):
            for flip in combinations(flippable, r):
                position = locate(source_bits ^ sum(1 << b for b in flip))
                hit = position >= 0
                src_parts.append(sources[hit])
                dst_parts.append(position[hit])
    else:
        chunk = max(1, (1 << 22) // max(n, 1))  # bound the candidate arrays, not the result
        kept = 0
        for start in range(0, len(sources), chunk):
            block = sources[start:start + chunk]
            src_parts.append(np.repeat(block, n))
            dst_parts.append(np.tile(np.arange(n), len(block)))
            if irreversible or extra is not None:
                src_parts[-1], dst_parts[-1] = _allowed(bits, states, width, irreversible, extra,
                                                        src_parts[-1], dst_parts[-1])
            kept += len(src_parts[-1])
            if kept > DENSE_LIMIT:  # the rule allows nearly every pair: stop before memory runs out
                raise StateSpaceTooLargeError(
                    f"{n:,} abstract states: the transitions the spec's valid_transitions allow pass the limit "
                    f"of {DENSE_LIMIT:,} matrix entries (forewarn.guard.learning.DENSE_LIMIT); narrow them "
                    "(valid_transitions: max_changed_predicates) or learn only the observed successors "
                    "(learning: structure: observed)", states=n, limit=DENSE_LIMIT)
        irreversible, extra = 0, None
    src = np.concatenate(src_parts) if src_parts else np.zeros(0, dtype=np.int64)
    dst = np.concatenate(dst_parts) if dst_parts else np.zeros(0, dtype=np.int64)
    return _allowed(bits, states, width, irreversible, extra, src, dst)


def _allowed(bits: np.ndarray, states: list[int], width: int, irreversible: int,
             extra: ValidTransitionRule | None, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs that keep the irreversible predicates and pass the domain rule."""
    if irreversible:
        if bits.dtype != object:
            irreversible &= (1 << 63) - 1
        keep = (bits[src] & irreversible & ~bits[dst]) == 0
        src, dst = src[keep], dst[keep]
    if extra is not None and len(src):
        valuation = [tuple(bool(b >> i & 1) for i in range(width)) for b in states[:len(bits)]]
        keep = np.fromiter((bool(extra(valuation[i], valuation[j])) for i, j in zip(src.tolist(), dst.tolist())),
                           dtype=bool, count=len(src))
        src, dst = src[keep], dst[keep]
    return src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False)


UNSAFE_ENUMERATION_BITS = 16  # unsafe conditions reading more predicates are not searched for unseen valuations


def reachable_unsafe(bits: np.ndarray, flags: np.ndarray, predicates: PredicateSet,
                     rule: ValidTransitionRule | None) -> np.ndarray:
    """Unsafe valuations to add to the observed states ``bits`` (``flags``: which are unsafe) so that
    every transient state the rule lets reach *some* unsafe valuation has one in the model.

    A run set without a violation would otherwise give a model without an unsafe state, where every
    risk is exactly 0 however few runs stand behind it. For each transient state without an observed
    unsafe successor the rule allows, the nearest unsafe valuation (fewest predicates changed, only
    those the unsafe condition reads; ties to the smaller mask) the rule allows is added; with every
    transition valid, one valuation serves all, and none is added once one was observed. Which
    unsafe valuation it is does not change a reach probability: unsafe states are absorbing and all
    carry the label ``unsafe``. Unsafe conditions reading more than
    :data:`UNSAFE_ENUMERATION_BITS` predicates are not searched.
    """
    mask = getattr(predicates, "unsafe_mask", 0)
    none = np.zeros(0, dtype=bits.dtype)
    if not mask or not len(bits) or mask.bit_count() > UNSAFE_ENUMERATION_BITS:
        return none
    seen_unsafe = bits[flags].tolist()
    sources = bits[~flags].tolist()
    if not sources or (rule is None and seen_unsafe):
        return none
    positions = [b for b in range(mask.bit_length()) if mask >> b & 1]
    assignments = [sum(1 << positions[i] for i in range(len(positions)) if r >> i & 1)
                   for r in range(1 << len(positions))]
    unsafe = [u for u in assignments if predicates.is_unsafe(u)]
    if not unsafe:
        return none

    ranked: dict[int, list[int]] = {}  # per valuation of the bits 'unsafe' reads, the unsafe ones nearest first

    def nearest(s: int) -> list[int]:
        key = s & mask
        order = ranked.get(key)
        if order is None:
            order = ranked[key] = sorted(unsafe, key=lambda u: ((key ^ u).bit_count(), u))
        rest = s & ~mask
        return [rest | u for u in order]

    if rule is None:  # every state reaches every state: one unsafe state is enough
        return np.array(nearest(sources[0])[:1], dtype=bits.dtype)
    if getattr(rule, "extra", rule) is None and bits.dtype != object:  # Hamming and irreversibility only
        return _nearest_unsafe_vectorised(bits, flags, mask, unsafe, getattr(rule, "max_changed", None),
                                          getattr(rule, "irreversible_bits", 0))
    width = predicates.width

    def valuation(b: int) -> tuple[bool, ...]:
        return tuple(bool(b >> i & 1) for i in range(width))

    present = set(bits.tolist())
    checked_unsafe = [valuation(u) for u in seen_unsafe[:8]]  # bounded: beyond, a nearer unsafe state is added
    added: set[int] = set()
    for s in sources:
        vs = valuation(s)
        found = next((c for c in nearest(s) if rule(vs, valuation(c))), None)
        if found is None or found in present or found in added or any(rule(vs, u) for u in checked_unsafe):
            continue
        added.add(found)
    return np.array(sorted(added), dtype=bits.dtype)


def _nearest_unsafe_vectorised(bits: np.ndarray, flags: np.ndarray, mask: int, unsafe: list[int],
                               max_changed: int | None, irreversible: int) -> np.ndarray:
    """:func:`reachable_unsafe` for a rule of changed-predicate counts and irreversible predicates only:
    the same states, without calling the rule per state. Whether ``(s & ~mask) | u`` is allowed from ``s``
    depends on ``s & mask`` alone (only bits 'unsafe' reads change), so the choice is made once per value."""
    irreversible &= (1 << 63) - 1
    sources = bits[~flags]
    seen = bits[flags][:8]
    keys = sources & mask
    chosen: dict[int, int] = {}
    for key in np.unique(keys).tolist():
        for u in sorted(unsafe, key=lambda u: ((key ^ u).bit_count(), u)):
            if (max_changed is None or (key ^ u).bit_count() <= max_changed) and not key & irreversible & ~u:
                chosen[key] = u
                break
    has = np.array([k in chosen for k in keys.tolist()], dtype=bool)
    picked = np.array([chosen.get(k, 0) for k in keys.tolist()], dtype=np.int64)
    found = (sources & ~mask) | picked
    covered = np.zeros(len(sources), dtype=bool)  # an observed unsafe state is already a valid successor
    for u in seen.tolist():
        ok = (sources & irreversible & ~u) == 0
        if max_changed is not None:
            ok &= np.bitwise_count(sources ^ u) <= max_changed
        covered |= ok
    found = found[has & ~covered]
    return _sorted_unique(found[~np.isin(found, bits)]).astype(bits.dtype)
