"""At run time, which kind of run is this? The posterior over kinds given a session's prefix.

A model learned with ``learning.kinds`` (guard/kinds.py) stores, beside the pooled chain, each
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
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..errors import ModelFileError

__all__ = ["Belief", "KindColumns", "KindMixture", "KindsEntry", "kinds_document", "logsumexp_normalise",
           "read_kinds"]

_TOLERANCE = 1e-9


@dataclass(frozen=True, slots=True)
class Belief:
    """A session's posterior over kinds: log weights (normalised), and the product state it is at
    (None: the last step was one the model could not place)."""

    log_weights: tuple[float, ...]
    index: int | None

    @property
    def weights(self) -> tuple[float, ...]:
        return tuple(math.exp(x) for x in self.log_weights)


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
    auto, the held-out log-likelihood per run of each candidate.
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
    # the same as plain lists, for the per-step path (a list index is several times cheaper than numpy's)
    _log_w: list[float] = field(init=False, repr=False, compare=False)
    _log_pi: list[list[float]] = field(init=False, repr=False, compare=False)  # per state: K values
    _log_p: list[list[float]] = field(init=False, repr=False, compare=False)  # per entry: K values
    _indptr: list[int] = field(init=False, repr=False, compare=False)
    _indices: list[int] = field(init=False, repr=False, compare=False)
    _lists: list[list[tuple[list[float] | None, ...]]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        with np.errstate(divide="ignore"):
            object.__setattr__(self, "_log_w", np.log(self.weights).tolist())
            object.__setattr__(self, "_log_pi", np.log(self.initial).T.tolist())
            object.__setattr__(self, "_log_p", np.log(self.probabilities).T.tolist())
        object.__setattr__(self, "_indptr", self.indptr.tolist())
        object.__setattr__(self, "_indices", self.indices.tolist())
        object.__setattr__(self, "_lists", [[_as_lists(c) for c in kind] for kind in self.columns])

    @property
    def kinds(self) -> int:
        return len(self.weights)

    def prior(self) -> Belief:
        """The belief before any step: the kinds' weights."""
        return Belief(tuple(self._log_w), None)

    def start(self, index: int | None) -> Belief:
        """The belief after a run's first state (product index, None when unseen)."""
        prior = self._log_w
        if index is None:
            return Belief(tuple(prior), None)
        start = self._log_pi[index]
        return _updated(prior, start, index)

    def step(self, belief: Belief, index: int | None) -> Belief:
        """The belief after a step into product state ``index`` (None when unseen)."""
        if index is None:
            return Belief(belief.log_weights, None)
        if belief.index is None:  # the step before was not placed: this one cannot be scored
            return Belief(belief.log_weights, index)
        indptr = self._indptr
        indices = self._indices
        begin, stop = indptr[belief.index], indptr[belief.index + 1]
        position = bisect.bisect_left(indices, index, begin, stop)
        if position == stop or indices[position] != index:  # outside the model's sparsity
            return Belief(belief.log_weights, index)
        step = self._log_p[position]
        return _updated(list(belief.log_weights), step, index)

    def mix(self, belief: Belief, prop: int, index: int) -> tuple[float, float | None, float | None,
                                                                float | None, float | None]:
        """Property ``prop`` at product state ``index`` under ``belief``: the posterior-weighted value,
        Storm's bounds and confidence interval (None where the kinds have none)."""
        weights = belief.weights
        lists = self._lists
        out: list[float | None] = []
        for which in range(5):
            total = 0.0
            for k, w in enumerate(weights):
                column = lists[k][prop][which]
                if column is None:
                    total = math.nan
                    break
                total += w * column[index]
            out.append(None if math.isnan(total) else min(max(total, 0.0), 1.0))
        value = out[0]
        assert value is not None
        return value, out[1], out[2], out[3], out[4]


def _as_lists(c: KindColumns) -> tuple[list[float] | None, ...]:
    return tuple(None if a is None else a.tolist() for a in (c.values, c.lower, c.upper, c.ci_low, c.ci_high))


def logsumexp_normalise(log_weights: Sequence[float]) -> tuple[float, ...] | None:
    """Log weights shifted to sum to 1 in probability; None when every weight is 0 (−∞)."""
    top = max(log_weights)
    if top == -math.inf:
        return None
    z = top + math.log(sum(math.exp(x - top) for x in log_weights))
    return tuple(x - z for x in log_weights)


def _updated(log_weights: list[float], factor: list[float], index: int) -> Belief:
    normalised = logsumexp_normalise([a + b for a, b in zip(log_weights, factor)])
    if normalised is None:  # every kind calls the step impossible: it says nothing about which kind
        return Belief(tuple(log_weights), index)
    return Belief(normalised, index)


# -- the model file's "kinds" block (absent from a model of one kind, which loads as before) ------

class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KindPropertyEntry(_Doc):
    values: list[float]
    lower: list[float] | None = None
    upper: list[float] | None = None
    ci_low: list[float] | None = None
    ci_high: list[float] | None = None


class KindEntry(_Doc):
    weight: float = Field(gt=0.0, le=1.0)
    initial: list[tuple[int, float]]  # (product state, start probability) where positive
    probabilities: list[float]  # in the order of the model's transitions
    counts: list[float]  # weighted counts (responsibilities × counts), same order
    properties: list[KindPropertyEntry]


class KindsEntry(_Doc):
    chosen: str  # "auto" or the spec's number of kinds
    scores: dict[str, float] | None = None  # auto: held-out log-likelihood per run, per candidate K
    components: list[KindEntry] = Field(min_length=2)


def kinds_document(mixture: KindMixture) -> dict[str, Any]:
    """The ``kinds`` block of a model file."""
    def column(a: np.ndarray | None) -> list[float] | None:
        return None if a is None else a.tolist()

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
        if len(c.properties) != properties:
            raise bad(f"{where}.properties", f"needs one entry per guarded property ({properties})")
        columns.append([_column(prop, n, f"{where}.properties[{t}]", bad) for t, prop in enumerate(c.properties)])
    scores = None if entry.scores is None else {int(k): v for k, v in entry.scores.items()}
    return KindMixture(weights, initial, probabilities, counts, columns, indptr, indices, entry.chosen, scores)


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
