"""An abstract state the training runs never showed, judged from the nearest states they did show.

A state is a bit vector over the spec's predicates; two states are as far apart as the number of
predicates on which they differ (the Hamming distance). An unseen state backs off to the seen states
at the smallest distance, up to ``guard.near_states`` predicates away (docs/method.md, "Unseen
states: judged from what is near"):

* its risk is the mean of theirs, weighted by how often each was left in the training runs (the
  same weighting as a history the runs never showed, ``Guard._add_history_fallback``), and so are
  Storm's bounds (a mean of lower bounds bounds the mean from below);
* its confidence interval is the hull of theirs, from the lowest lower end to the highest upper end:
  which neighbour the unseen state resembles is not known, so the interval must hold each of them.
  The hull contains every neighbour's interval and the weighted mean, and is never narrower than the
  widest of them: the interval is widened by not knowing which neighbour applies;
* the evidence behind it is their visits summed.

Nothing here reads a model: the functions take numbers (floats, or ``Fraction`` for exact checks).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Generic, TypeVar

N = TypeVar("N", float, Fraction)  # a float, or a Fraction in the exact tests


def nearest(bits: int, seen: Sequence[int], max_distance: int) -> tuple[int, list[int]]:
    """The positions in ``seen`` at the smallest Hamming distance from ``bits``, with that distance;
    ``(max_distance + 1, [])`` when none is within ``max_distance`` (0 finds nothing: an unseen state
    is not in ``seen``)."""
    best, out = max_distance + 1, []
    for position, other in enumerate(seen):
        distance = (bits ^ other).bit_count()
        if distance < best:
            best, out = distance, [position]
        elif distance == best and distance <= max_distance:
            out.append(position)
    return best, out


@dataclass(frozen=True)
class Near(Generic[N]):
    """What an unseen state borrows from its nearest seen states."""

    value: N
    low: N | None  # the interval's ends (None: the model has no intervals)
    high: N | None
    visits: int


def back_off(values: Sequence[N], visits: Sequence[int], lows: Sequence[N] | None = None,
             highs: Sequence[N] | None = None) -> Near[N]:
    """The visit-weighted mean of the neighbours' ``values`` (equal weights when none was left), and
    the hull of their intervals ``[lows, highs]``."""
    if not values:
        raise ValueError("back_off needs at least one neighbour")
    total = sum(visits)
    weights = list(visits) if total > 0 else [1] * len(values)
    mass = sum(weights)
    # one neighbour: its value as it is (a float's w·v / w may differ from v in the last bit)
    value = values[0] if len(values) == 1 else sum((w * v for w, v in zip(weights, values)), values[0] * 0) / mass
    low = None if lows is None else min(lows)
    high = None if highs is None else max(highs)
    return Near(value, low, high, total)
