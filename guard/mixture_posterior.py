"""At run time, which kind of run is this? The posterior over kinds given a session's prefix.

A model learned with ``learning.kinds`` (guard/mixture.py) stores, beside the pooled chain, each
kind's weight ``w_k``, start probabilities ``π_k``, transition probabilities ``P_k`` (on the
product's sparsity) and checked values. A session's belief after the prefix ``x_0 … x_t`` is

    log b_k(t) = log w_k + log π_k(x_0) + Σ_{s<t} log P_k(x_s, x_{s+1}) − log Z

updated once per observed step, in log space (a long run would underflow a product of
probabilities). A step the model cannot score — an unseen state, or a transition outside the
model's sparsity, or one every kind calls impossible — leaves the belief as it was, and the next
step is scored from the state after it. The risk of a property is the posterior-weighted value
``Σ_k b_k · v_k(x_t)`` (each kind being a Markov chain, ``v_k(x_t)`` is its risk from ``x_t``), and
its bounds and confidence interval are the posterior-weighted bounds of the kinds (each kind's
interval holds its value with the confidence the model file states; the weighted interval then
holds the weighted value, taking the posterior as known).

Pure values and arithmetic: no scipy, no Storm (a guard that decides loads neither).
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..errors import ModelFileError

_TOLERANCE = 1e-9


@dataclass(frozen=True, slots=True)
class Belief:
    """A session's posterior over kinds: log weights (normalised); the product state it is at (None: the
    last step was one the model could not place); and, with intervals, bounds on each kind's
    log-likelihood of the prefix (unnormalised), from which the posterior's own bounds follow."""

    log_weights: tuple[float, ...]
    index: int | None
    log_low: tuple[float, ...] | None = None
    log_high: tuple[float, ...] | None = None

    @property
    def weights(self) -> tuple[float, ...]:
        return tuple(math.exp(x) for x in self.log_weights)

    def weight_bounds(self) -> tuple[list[float], list[float]] | None:
        """Per kind, the lowest and highest posterior weight any parameters inside the intervals give:
        ``L_k^low / (L_k^low + Σ_{j≠k} L_j^high)`` and ``L_k^high / (L_k^high + Σ_{j≠k} L_j^low)``."""
        if self.log_low is None or self.log_high is None:
            return None
        low, high = self.log_low, self.log_high
        lows, highs = [], []
        for k in range(len(low)):
            others_high = [h for j, h in enumerate(high) if j != k]
            others_low = [lo for j, lo in enumerate(low) if j != k]
            lows.append(_share(low[k], others_high))
            highs.append(_share(high[k], others_low))
        return lows, highs


@dataclass(frozen=True)
class KindColumns:
    """One property's values in one kind, per product state (as :class:`CheckedProperty` holds them)."""

    values: np.ndarray
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    ci_low: np.ndarray | None = None
    ci_high: np.ndarray | None = None


@dataclass(frozen=True)
class KindMixture:
    """What a model file keeps of a mixture of kinds (all over the product's states and CSR entries).

    ``probabilities[k]``, ``counts[k]``: kind ``k``'s transition probabilities and weighted counts, in
    the order of the model's ``transitions`` (same ``indptr``/``indices``); ``initial[k]``: its start
    probability per product state (0 where no training run started); ``columns[k][p]``: property
    ``p``'s values in kind ``k``; ``chosen``: how K was set (``"auto"`` or the spec's number) and, for
    auto, the BIC of each candidate (lower is better). With intervals, ``transition_bounds``
    (K × entries, low and high) are each kind's transition intervals and ``start_bounds`` (K × states)
    intervals of ``w_k·π_k(x)``, the share of runs of kind ``k`` that start in ``x``.
    """

    weights: np.ndarray
    initial: np.ndarray  # K × states
    probabilities: np.ndarray  # K × entries
    counts: np.ndarray  # K × entries
    columns: list[list[KindColumns]]
    indptr: np.ndarray
    indices: np.ndarray
    chosen: str = "auto"
    scores: dict[int, float] | None = None
    transition_bounds: tuple[np.ndarray, np.ndarray] | None = None
    start_bounds: tuple[np.ndarray, np.ndarray] | None = None
    # the same as plain lists, for the per-step path (a list index is several times cheaper than numpy's)
    _log_w: list[float] = field(init=False, repr=False, compare=False)
    _log_pi: list[list[float]] = field(init=False, repr=False, compare=False)  # per state: K values
    _log_p: list[list[float]] = field(init=False, repr=False, compare=False)  # per entry: K values
    _log_bounds: tuple[list[list[float]], list[list[float]]] | None = field(init=False, repr=False, compare=False)
    _log_starts: tuple[list[list[float]], list[list[float]]] | None = field(init=False, repr=False, compare=False)
    _indptr: list[int] = field(init=False, repr=False, compare=False)
    _indices: list[int] = field(init=False, repr=False, compare=False)
    _lists: list[list[tuple[list[float] | None, ...]]] = field(init=False, repr=False, compare=False)
    _ends: dict[tuple[int, int], tuple[tuple[float, ...] | None, ...]] = field(
        init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        def logs(a: np.ndarray) -> list[list[float]]:
            with np.errstate(divide="ignore"):
                out: list[list[float]] = np.log(a).T.tolist()
            return out

        with np.errstate(divide="ignore"):
            object.__setattr__(self, "_log_w", np.log(self.weights).tolist())
        object.__setattr__(self, "_log_pi", logs(self.initial))
        object.__setattr__(self, "_log_p", logs(self.probabilities))
        bounds, starts = self.transition_bounds, self.start_bounds
        object.__setattr__(self, "_log_bounds", None if bounds is None else (logs(bounds[0]), logs(bounds[1])))
        object.__setattr__(self, "_log_starts", None if starts is None else (logs(starts[0]), logs(starts[1])))
        object.__setattr__(self, "_indptr", self.indptr.tolist())
        object.__setattr__(self, "_indices", self.indices.tolist())
        object.__setattr__(self, "_lists", [[_as_lists(c) for c in kind] for kind in self.columns])

    @property
    def kinds(self) -> int:
        return len(self.weights)

    def prior(self) -> Belief:
        """The belief before any step: the kinds' weights (and, with intervals, nothing known of the bounds)."""
        unknown = self._log_starts is not None
        return Belief(tuple(self._log_w), None, (-math.inf,) * self.kinds if unknown else None,
                      (0.0,) * self.kinds if unknown else None)

    def start(self, index: int | None) -> Belief:
        """The belief after a run's first state (product index, None when unseen)."""
        if index is None:
            return self.prior()
        low = high = None
        if self._log_starts is not None:
            low, high = tuple(self._log_starts[0][index]), tuple(self._log_starts[1][index])
        return _updated(self._log_w, self._log_pi[index], index, low, high)

    def step(self, belief: Belief, index: int | None) -> Belief:
        """The belief after a step into product state ``index`` (None when unseen)."""
        if index is None or belief.index is None:  # this step, or the one before, was not placed: not scored
            return Belief(belief.log_weights, index, belief.log_low, belief.log_high)
        indptr, indices = self._indptr, self._indices
        begin, stop = indptr[belief.index], indptr[belief.index + 1]
        position = bisect.bisect_left(indices, index, begin, stop)
        if position == stop or indices[position] != index:  # outside the model's sparsity
            return Belief(belief.log_weights, index, belief.log_low, belief.log_high)
        low, high = belief.log_low, belief.log_high
        if self._log_bounds is not None and low is not None and high is not None:
            low = tuple(a + b for a, b in zip(low, self._log_bounds[0][position]))
            high = tuple(a + b for a, b in zip(high, self._log_bounds[1][position]))
        return _updated(list(belief.log_weights), self._log_p[position], index, low, high)

    def mix(self, belief: Belief, prop: int, index: int) -> tuple[float, float | None, float | None,
                                                                float | None, float | None]:
        """Property ``prop`` at product state ``index`` under ``belief``: the posterior-weighted value and
        Storm's bounds; the confidence interval is the lowest (highest) weighted end over the posterior
        weights the likelihood bounds allow (posterior-weighted ends when the model has no bounds)."""
        weights = belief.weights
        ends = self._ends.get((prop, index))
        if ends is None:  # each field's K values at the state, gathered once per (property, state)
            columns = [self._lists[k][prop] for k in range(len(weights))]
            at = [[c[which] for c in columns] for which in range(5)]
            ends = self._ends[prop, index] = tuple(
                None if any(a is None for a in kinds) else tuple(a[index] for a in kinds if a is not None)
                for kinds in at)

        def weigh(xs: tuple[float, ...] | None) -> float | None:
            return None if xs is None else min(max(sum(w * x for w, x in zip(weights, xs)), 0.0), 1.0)

        value = weigh(ends[0])
        assert value is not None
        lows, highs = ends[3], ends[4]
        box = belief.weight_bounds() if lows is not None and highs is not None else None
        if box is not None and lows is not None and highs is not None:
            ci_low: float | None = min(_extreme(lows, *box, largest=False), value)
            ci_high: float | None = max(_extreme(highs, *box, largest=True), value)
        else:
            ci_low, ci_high = weigh(lows), weigh(highs)
        return value, weigh(ends[1]), weigh(ends[2]), ci_low, ci_high


def _share(own: float, others: list[float]) -> float:
    """``e^own / (e^own + Σ e^others)``, in log space; 0 when ``own`` is −∞, and 1 when every other is."""
    if own == -math.inf:
        return 0.0
    top = max([own, *others])
    total = sum(math.exp(x - top) for x in [own, *others])
    return math.exp(own - top) / total


def _extreme(values: Sequence[float], low: list[float], high: list[float], *, largest: bool) -> float:
    """min (max) of ``Σ ω_k·values_k`` over ``low ≤ ω ≤ high``, ``Σ ω = 1`` (the greedy fill of
    guard/mixture_check.py's ``simplex_extreme``, for one state)."""
    order = sorted(range(len(values)), key=lambda k: values[k], reverse=largest)
    room = max(1.0 - sum(low), 0.0)
    total = 0.0
    for k in order:
        extra = min(max(high[k] - low[k], 0.0), room)
        room -= extra
        total += values[k] * (low[k] + extra)
    return total


def _as_lists(c: KindColumns) -> tuple[list[float] | None, ...]:
    return tuple(None if a is None else a.tolist() for a in (c.values, c.lower, c.upper, c.ci_low, c.ci_high))


def logsumexp_normalise(log_weights: Sequence[float]) -> tuple[float, ...] | None:
    """Log weights shifted to sum to 1 in probability; None when every weight is 0 (−∞)."""
    top = max(log_weights)
    if top == -math.inf:
        return None
    z = top + math.log(sum(math.exp(x - top) for x in log_weights))
    return tuple(x - z for x in log_weights)


def _updated(log_weights: list[float], factor: list[float], index: int, low: tuple[float, ...] | None,
             high: tuple[float, ...] | None) -> Belief:
    normalised = logsumexp_normalise([a + b for a, b in zip(log_weights, factor)])
    if normalised is None:  # every kind calls the step impossible: it says nothing about which kind
        return Belief(tuple(log_weights), index, low, high)
    return Belief(normalised, index, low, high)


# -- the model file's "kinds" block (absent from a model of one kind, which loads as before) ------

class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


# a state index as the file gives it: an int64, or refused at its field (the range is checked below)
_Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class KindPropertyEntry(_Doc):
    values: list[float]
    lower: list[float] | None = None
    upper: list[float] | None = None
    ci_low: list[float] | None = None
    ci_high: list[float] | None = None


class KindEntry(_Doc):
    weight: float = Field(gt=0.0, le=1.0)
    initial: list[tuple[_Int64, float]]  # (product state, start probability) where positive
    probabilities: list[float]  # in the order of the model's transitions
    counts: list[float]  # weighted counts (responsibilities × counts), same order
    properties: list[KindPropertyEntry]
    # with intervals: the kind's transition intervals (same order), and (state, low, high) of w_k·π_k(state)
    transition_low: list[float] | None = None
    transition_high: list[float] | None = None
    start_bounds: list[tuple[_Int64, float, float]] | None = None


class KindsEntry(_Doc):
    chosen: str  # "auto" or the spec's number of kinds
    # auto: the BIC per candidate K (a number of kinds, as JSON keys are strings)
    scores: dict[Annotated[str, Field(pattern=r"^[1-9][0-9]{0,5}$")], float] | None = None
    components: list[KindEntry] = Field(min_length=2)


def kinds_document(mixture: KindMixture) -> dict[str, Any]:
    """The ``kinds`` block of a model file."""
    def column(a: np.ndarray | None) -> list[float] | None:
        return None if a is None else a.tolist()

    bounds, starts = mixture.transition_bounds, mixture.start_bounds

    return {
        "chosen": mixture.chosen,
        "scores": None if mixture.scores is None else {str(k): v for k, v in mixture.scores.items()},
        "components": [{
            "weight": float(mixture.weights[k]),
            "initial": [[int(i), float(mixture.initial[k, i])] for i in np.flatnonzero(mixture.initial[k] > 0)],
            "probabilities": mixture.probabilities[k].tolist(),
            "counts": mixture.counts[k].tolist(),
            "properties": [{"values": c.values.tolist(), "lower": column(c.lower), "upper": column(c.upper),
                            "ci_low": column(c.ci_low), "ci_high": column(c.ci_high)} for c in mixture.columns[k]],
            **({} if bounds is None or starts is None else {
                "transition_low": bounds[0][k].tolist(), "transition_high": bounds[1][k].tolist(),
                "start_bounds": [[int(i), float(starts[0][k, i]), float(starts[1][k, i])]
                                 for i in np.flatnonzero(starts[1][k] > 0)]}),
        } for k in range(mixture.kinds)],
    }


def read_kinds(entry: KindsEntry, *, source: str, indptr: np.ndarray, indices: np.ndarray, absorbing: np.ndarray,
               properties: int) -> KindMixture:
    """A stored mixture, checked against the model it belongs to (a :class:`ModelFileError` naming the field)."""
    def bad(where: str, message: str) -> ModelFileError:
        return ModelFileError(f"{source}: kinds.{where}: {message}")

    n, entries = len(indptr) - 1, len(indices)
    weights = np.array([c.weight for c in entry.components])
    if abs(float(weights.sum()) - 1.0) > 1e-6:
        raise bad("components", f"the kinds' weights sum to {float(weights.sum())!r}, not 1")
    initial = np.zeros((len(weights), n))
    probabilities = np.zeros((len(weights), entries))
    counts = np.zeros((len(weights), entries))
    columns: list[list[KindColumns]] = []
    bounded = [c.transition_low is not None for c in entry.components]
    if any(bounded) and not all(bounded):
        raise bad("components", "give every kind its transition intervals, or none")
    t_low, t_high = np.zeros((len(weights), entries)), np.ones((len(weights), entries))
    s_low, s_high = np.zeros((len(weights), n)), np.zeros((len(weights), n))
    for k, c in enumerate(entry.components):
        where = f"components[{k}]"
        for i, start in c.initial:
            if not 0 <= i < n or not 0.0 < start <= 1.0 + _TOLERANCE:
                raise bad(f"{where}.initial", f"entry ({i}, {start}) is out of range")
            initial[k, i] = start
        if len(c.probabilities) != entries or len(c.counts) != entries:
            raise bad(where, f"probabilities and counts need one value per transition ({entries})")
        p = np.array(c.probabilities, dtype=float)
        if np.any(~np.isfinite(p)) or np.any(p < 0) or np.any(p > 1 + _TOLERANCE):
            raise bad(f"{where}.probabilities", "must lie in [0, 1]")
        sums = np.add.reduceat(p, indptr[:-1]) if entries else np.zeros(n)
        worst = int(np.argmax(np.abs(sums - 1.0))) if n else 0
        if n and abs(sums[worst] - 1.0) > 1e-9:
            raise bad(f"{where}.probabilities", f"state {worst}'s row sums to {float(sums[worst])!r}, not 1")
        if np.any(p[indptr[np.flatnonzero(absorbing)]] != 1.0):
            raise bad(f"{where}.probabilities", "an absorbing state must stay where it is")
        probabilities[k], counts[k] = p, np.array(c.counts, dtype=float)
        if c.transition_low is not None:
            if c.transition_high is None or c.start_bounds is None \
                    or len(c.transition_low) != entries or len(c.transition_high) != entries:
                raise bad(where, f"transition_low/high need one value per transition ({entries}), and start_bounds")
            t_low[k], t_high[k] = c.transition_low, c.transition_high
            if np.any(t_low[k] < -_TOLERANCE) or np.any(t_high[k] > 1 + _TOLERANCE) \
                    or np.any(t_low[k] > np.array(c.probabilities) + _TOLERANCE) \
                    or np.any(np.array(c.probabilities) > t_high[k] + _TOLERANCE):
                raise bad(where, "transition intervals must lie in [0, 1] around the probabilities")
            for i, low, high in c.start_bounds:
                if not 0 <= i < n or not 0.0 <= low <= high <= 1.0 + _TOLERANCE:
                    raise bad(f"{where}.start_bounds", f"entry ({i}, {low}, {high}) is out of range")
                s_low[k, i], s_high[k, i] = low, high
        if len(c.properties) != properties:
            raise bad(f"{where}.properties", f"needs one entry per guarded property ({properties})")
        columns.append([_column(prop, n, f"{where}.properties[{t}]", bad) for t, prop in enumerate(c.properties)])
    scores = None if entry.scores is None else {int(k): v for k, v in entry.scores.items()}
    return KindMixture(weights, initial, probabilities, counts, columns, indptr, indices, entry.chosen, scores,
                       (t_low, t_high) if all(bounded) else None, (s_low, s_high) if all(bounded) else None)


def _column(prop: KindPropertyEntry, n: int, where: str, bad: Any) -> KindColumns:
    arrays: list[np.ndarray | None] = []
    for name in ("values", "lower", "upper", "ci_low", "ci_high"):
        raw = getattr(prop, name)
        if raw is None:
            arrays.append(None)
            continue
        column = np.array(raw, dtype=float)
        if column.shape != (n,) or np.any(~np.isfinite(column)) or np.any(column < -_TOLERANCE) \
                or np.any(column > 1 + _TOLERANCE):
            raise bad(f"{where}.{name}", f"needs {n} probabilities in [0, 1]")
        arrays.append(column)
    values, lower, upper, low, high = arrays
    assert values is not None
    for small, large, what in ((lower, values, "lower <= value"), (values, upper, "value <= upper"),
                               (low, values, "ci_low <= value"), (values, high, "value <= ci_high")):
        if small is not None and large is not None and np.any(small > large + _TOLERANCE):
            raise bad(where, f"must satisfy {what} in every state")
    return KindColumns(values, lower, upper, low, high)
