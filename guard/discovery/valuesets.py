"""Value-set candidates: "the field holds one of the values whose runs violate far more often".

A field of many values (the words of a task's instruction, the object an action names)
rarely tells the outcome through one value — ``"break" in meta.words`` covers a few
tasks — but often through a family of them (break, throw, drop, dirty…). One predicate
per value fragments the abstraction: each value's states are visited too rarely to
learn from. A value set pools the family into one bit::

    meta.words.exists(v, v in ["break", "drop", "throw"])      # a list field
    action.object in ["Egg", "Vase"]                             # a string field

A value joins the set when the groups of runs (tasks) whose scored steps carry it hold a
violating run at least ``factor`` times as often as groups overall, by a one-sided 95 %
Wilson lower bound on that share, and it is seen in at least two groups. Groups, not steps,
are the unit: the folds hold out whole groups, so a value is telling for a held-out task only
as far as it was telling across training tasks — a value of one or two tasks (an object that
task names) has a wide interval and stays out, while a verb shared by dozens of tasks (break,
throw, drop) gets in on a share of 0.3–0.4, its interval narrow. On AgentSpec's logs, steps as
the unit put words of one or two tasks (``for``, ``top``, ``simulate``) into the sets and held-out
detection at 20 % false alarms was 61.4 %; groups as the unit, 76.2 % (76–82 % over four outer
splits: bench/README.md).
One candidate per factor in :data:`FACTORS`: the search chooses between them on held-out folds.

**Held out honestly.** The set is chosen from the outcomes, so scoring its bit on the same
folds would flatter it (a value seen only in the test fold's violating runs would look
telling). The search therefore scores, on each fold's steps, the set chosen from the
*other* folds' steps alone (``held_out``); the set written to the spec is the one chosen
from all the runs (``packed``), and the spec is confirmed with the real learner afterwards.
"""
from __future__ import annotations

from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from .columns import Column, _quote, path_text

FACTORS = (1.25, 1.5, 2.0, 3.0)  # how much more often a value's groups must hold a violating run (lower bound)
MAX_SET = 48  # values a set may hold (the most telling)
MIN_GROUPS = 2  # groups of runs a value must be seen in
MIN_VALUES = 3  # distinct values a field needs for a set to say more than an equality
Z = NormalDist().inv_cdf(0.95)  # the lower bound's one-sided 95 % point


def wilson_lower(k: NDArray[np.float64], n: NDArray[np.float64], z: float = Z) -> NDArray[np.float64]:
    """Wilson's lower confidence bound on a share ``k / n`` (n ≥ 1): it falls with ``n``, so a share seen in
    few groups needs to be high (2 violating groups of 2: 0.42; 11 of 28: 0.26; 3 of 9: 0.14)."""
    p = k / n
    z2 = z * z
    return (p + z2 / (2 * n) - z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n))) / (1 + z2 / n)


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
        if not steps.any():
            return np.zeros(0, dtype=np.int64)
        width = int(self.group.max()) + 1
        # the share of groups (among those with scored steps) that hold a violating run
        violating = np.zeros(width)
        np.maximum.at(violating, self.group[steps], self.y[steps])
        present = np.zeros(width, dtype=np.bool_)
        present[self.group[steps]] = True
        base = float(violating[present].mean())
        if not 0.0 < base < 1.0:
            return np.zeros(0, dtype=np.int64)
        r, c = rows[keep], codes[keep]
        n = np.bincount(c, minlength=size)
        # (value, group) pairs, and whether a violating run's step carries the value in that group
        pairs, pair_of = np.unique(c * width + self.group[r], return_inverse=True)
        pair_violating = np.zeros(len(pairs))
        np.maximum.at(pair_violating, pair_of, self.y[r])
        groups = np.bincount(pairs // width, minlength=size).astype(np.float64)
        groups_violating = np.bincount(pairs // width, weights=pair_violating, minlength=size).astype(np.float64)
        lower = np.zeros(size)
        seen = groups > 0
        lower[seen] = wilson_lower(groups_violating[seen], groups[seen])
        chosen = np.flatnonzero((n >= min_support) & (groups >= MIN_GROUPS) & (lower >= factor * base))
        if len(chosen) > MAX_SET:
            chosen = chosen[np.argsort(-lower[chosen], kind="stable")[:MAX_SET]]
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
