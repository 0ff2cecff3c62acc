"""Value-set candidates: "the field holds one of the values whose runs violate far more often".

A field of many values (the words of a task's instruction, the object an action names)
rarely tells the outcome through one value — ``"break" in meta.words`` covers a few
tasks — but often through a family of them (break, throw, drop, dirty…). One predicate
per value fragments the abstraction: each value's states are visited too rarely to
learn from. A value set pools the family into one bit::

    meta.words.exists(v, v in ["break", "drop", "throw"])      # a list field
    action.object in ["Egg", "Vase"]                             # a string field

A value joins the set when the scored steps that carry it belong to violating runs at
least ``factor`` times as often as the steps overall (the rate smoothed by one pseudo-step
at the overall rate) and it is seen in at least two groups of runs — a value of one task
cannot generalise to a task held out. One candidate per factor in :data:`FACTORS`: the
search chooses between them on held-out folds.

**Held out honestly.** The set is chosen from the outcomes, so scoring its bit on the same
folds would flatter it (a value seen only in the test fold's violating runs would look
telling). The search therefore scores, on each fold's steps, the set chosen from the
*other* folds' steps alone (``held_out``); the set written to the spec is the one chosen
from all the runs (``packed``), and the spec is confirmed with the real learner afterwards.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .columns import Column, _quote, path_text

__all__ = ["FACTORS", "MAX_SET", "MIN_GROUPS", "MIN_VALUES", "ValueSets", "set_expression"]

FACTORS = (2.0, 3.0, 4.0)  # how much more often a value's steps must belong to violating runs
MAX_SET = 48  # values a set may hold (the most telling)
MIN_GROUPS = 2  # groups of runs a value must be seen in
MIN_VALUES = 3  # distinct values a field needs for a set to say more than an equality


class ValueSets:
    """Chooses value sets for one column, per fold and over all scored steps.

    Args:
        scored: indices of the scored steps among all steps.
        y: 1.0 on each scored step of a violating run.
        fold: each scored step's fold.
        group: each scored step's group of runs.
    """

    def __init__(self, scored: NDArray[np.int64], y: NDArray[np.float64], fold: NDArray[np.int64],
                 group: NDArray[np.int64]) -> None:
        self.scored = scored
        self.y = y
        self.fold = fold
        self.folds = int(fold.max()) + 1 if len(fold) else 1
        self.group = group

    def sets(self, rows: NDArray[np.int64], codes: NDArray[np.int64], values: list[object], factor: float,
             min_support: int) -> tuple[list[object], list[NDArray[np.bool_]]] | None:
        """The set chosen from all scored steps, and each step's held-out membership.

        Args:
            rows: scored-step positions (0..len(scored)-1) of each (step, value) pair.
            codes: the value code of each pair (a step holds a value at most once).
            values: the values by code.

        Returns:
            (the values of the final set, sorted; per fold f, membership of fold f's steps in the set
            chosen without fold f), or None when no set is chosen from all steps.
        """
        final = self._choose(rows, codes, len(values), factor, min_support, None)
        if not len(final):
            return None
        held = []
        for f in range(self.folds):
            chosen = self._choose(rows, codes, len(values), factor, min_support, f)
            member = np.zeros(len(self.scored), dtype=np.bool_)
            if len(chosen):
                member[rows[np.isin(codes, chosen)]] = True
            held.append(member)
        return sorted((values[c] for c in final.tolist()), key=str), held

    def _choose(self, rows: NDArray[np.int64], codes: NDArray[np.int64], size: int, factor: float,
                min_support: int, without: int | None) -> NDArray[np.int64]:
        keep = np.ones(len(rows), dtype=np.bool_) if without is None else self.fold[rows] != without
        steps = np.ones(len(self.y), dtype=np.bool_) if without is None else self.fold != without
        total = int(steps.sum())
        if not total:
            return np.zeros(0, dtype=np.int64)
        base = float(self.y[steps].mean())
        if not 0.0 < base < 1.0:
            return np.zeros(0, dtype=np.int64)
        r, c = rows[keep], codes[keep]
        n = np.bincount(c, minlength=size).astype(np.float64)
        u = np.bincount(c, weights=self.y[r], minlength=size)
        pairs = np.unique(c * (int(self.group.max()) + 1) + self.group[r])
        groups = np.bincount(pairs // (int(self.group.max()) + 1), minlength=size)
        rate = (u + base) / (n + 1.0)
        chosen = np.flatnonzero((n >= min_support) & (groups >= MIN_GROUPS) & (rate >= factor * base))
        if len(chosen) > MAX_SET:
            chosen = chosen[np.argsort(-rate[chosen], kind="stable")[:MAX_SET]]
        return np.sort(chosen)


def set_expression(column: Column, chosen: list[object]) -> str:
    """CEL for membership of ``column``'s value (or of one of its elements, for a list) in ``chosen``."""
    literals = ", ".join(_literal(v) for v in chosen)
    text = path_text(column.path)
    if column.kind == "list":
        return f"{text}.exists(v, v in [{literals}])"
    return f"{text} in [{literals}]"


def _literal(value: object) -> str:
    assert isinstance(value, str)  # sets are offered on text values only (CEL compares numbers by type)
    return _quote(value)
