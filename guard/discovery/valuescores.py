"""Graded value scores: "the step's values, weighed by how often their runs violate, add up to at least t".

A value set (:mod:`.valuesets`) is one bit: a task whose instruction says *drop* and one that says
*drop the egg near the pillow* look the same. A score grades them: every value of a list field (the
words of a task's instruction first) gets an integer weight from how often the groups of runs (tasks)
that carry it hold a violating run, against groups overall, and a step's score is the weighted count
of its values::

    2 * size(meta.words.filter(v, v in ["drop", "throw"])) + size(meta.words.filter(v, v in ["break"]))
      - size(meta.words.filter(v, v in ["near", "pillow"])) >= 2

**The weights.** For a value seen in ``g`` groups, ``k`` of them holding a violating run, against a
share ``p`` of groups overall: the shrunk share ``s = (k + A·p) / (g + A)`` (``A`` = :data:`PSEUDO_GROUPS`
pseudo-groups at the overall share) and its log-odds ratio ``logit(s) − logit(p)``. Shrinking towards 0
is what keeps a value of two tasks from counting much: its ratio stays near 0 unless both tasks
violate. The ratio is quantised to tiers, ±1 from :data:`LOW` and ±2 from :data:`HIGH`; a value of
fewer than :data:`~.valuesets.MIN_GROUPS` groups, or nearer 0, weighs nothing and is not written.
Integer tiers keep the CEL readable and its arithmetic exact.

**Thresholds.** One candidate per threshold at the :data:`QUANTILES` of the groups' scores (above the
lowest); the search chooses, and may add a second threshold when it pays (its states are then tiers of
the score).

**Held out honestly**, as value sets are: the search scores, on each fold's steps, the score with the
weights chosen from the *other* folds alone (a value seen only in the test fold weighs 0 there); the
weights written are chosen from all the runs, and the spec is confirmed with the real learner afterwards.

Offered on list fields of text whose lists hold no element twice (CEL's ``size(filter)`` counts
repeats; the weights count a value once per step). A text field of one value per step needs no score:
``weight(x) >= t`` is the value set ``x in [values of weight >= t]``.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from .columns import Column, _quote, path_text
from .valuesets import MIN_GROUPS, ValueSets

__all__ = ["HIGH", "LOW", "MAX_WEIGHTED", "PSEUDO_GROUPS", "QUANTILES", "ScoreCandidate", "score_candidates",
           "score_expression", "weights"]

PSEUDO_GROUPS = 10.0  # groups at the overall share each value's share is shrunk towards
LOW = 0.7  # |log-odds ratio| from which a value weighs ±1
HIGH = 1.4  # … and ±2
NEGATIVE = True
MAX_WEIGHTED = 64  # values written (the largest |ratio|): keeps the CEL readable
QUANTILES = (0.9, 0.95, 0.98)  # of the groups' scores: the thresholds offered

ScoreCandidate = tuple[str, str, str, NDArray[np.bool_], NDArray[np.bool_]]  # cel, name, description, all, held out


def weights(sets: ValueSets, rows: NDArray[np.int64], codes: NDArray[np.int64], size: int,
            without: int | None) -> NDArray[np.int64]:
    """Each value's integer weight (−2…2), chosen from the scored steps outside fold ``without`` (None: all).

    Args:
        sets: the scored steps' outcomes, folds and groups (:class:`.valuesets.ValueSets`).
        rows: scored-step positions of each (step, value) pair; codes: each pair's value code (0..size-1).
    """
    keep = np.ones(len(rows), dtype=np.bool_) if without is None else sets.fold[rows] != without
    steps = np.ones(len(sets.y), dtype=np.bool_) if without is None else sets.fold != without
    out = np.zeros(size, dtype=np.int64)
    if not steps.any():
        return out
    width = int(sets.group.max()) + 1
    violating = np.zeros(width)
    np.maximum.at(violating, sets.group[steps], sets.y[steps])
    present = np.zeros(width, dtype=np.bool_)
    present[sets.group[steps]] = True
    base = float(violating[present].mean())
    if not 0.0 < base < 1.0:
        return out
    r, c = rows[keep], codes[keep]
    # (value, group) pairs, and whether a violating run's step carries the value in that group
    pairs, pair_of = np.unique(c * width + sets.group[r], return_inverse=True)
    pair_violating = np.zeros(len(pairs))
    np.maximum.at(pair_violating, pair_of, sets.y[r])
    groups = np.bincount(pairs // width, minlength=size).astype(np.float64)
    k = np.bincount(pairs // width, weights=pair_violating, minlength=size).astype(np.float64)
    shrunk = (k + PSEUDO_GROUPS * base) / (groups + PSEUDO_GROUPS)
    ratio = np.log(shrunk / (1.0 - shrunk)) - math.log(base / (1.0 - base))
    ratio[groups < MIN_GROUPS] = 0.0
    if not NEGATIVE:
        ratio[ratio < 0] = 0.0
    magnitude = np.where(np.abs(ratio) >= HIGH, 2, np.where(np.abs(ratio) >= LOW, 1, 0))
    weighted = np.flatnonzero(magnitude > 0)
    if len(weighted) > MAX_WEIGHTED:  # the most telling, either way
        weighted = weighted[np.argsort(-np.abs(ratio[weighted]), kind="stable")[:MAX_WEIGHTED]]
    out[weighted] = (np.sign(ratio[weighted]) * magnitude[weighted]).astype(np.int64)
    return out


def score_expression(column: Column, values: list[str], weight: NDArray[np.int64], threshold: int) -> str:
    """CEL: the weighted count of ``column``'s elements (a list) is at least ``threshold``."""
    text = path_text(column.path)
    terms: list[str] = []
    for tier in (2, 1, -1, -2):
        chosen = sorted(values[c] for c in np.flatnonzero(weight == tier).tolist())
        if not chosen:
            continue
        count = f"size({text}.filter(v, v in [{', '.join(_quote(v) for v in chosen)}]))"
        term = count if abs(tier) == 1 else f"{abs(tier)} * {count}"
        terms.append(("-" if tier < 0 else "") + term if not terms else (" + " if tier > 0 else " - ") + term)
    return "".join(terms) + f" >= {threshold}"


def _scores(pair_rows: NDArray[np.int64], pair_codes: NDArray[np.int64], weight: NDArray[np.int64],
            count: int) -> NDArray[np.int64]:
    return np.bincount(pair_rows, weights=weight[pair_codes], minlength=count).round().astype(np.int64)


def score_candidates(sets: ValueSets, column: Column, rows: NDArray[np.int64], codes: NDArray[np.int64],
                     values: list[str], all_rows: NDArray[np.int64], all_codes: NDArray[np.int64]
                     ) -> list[ScoreCandidate]:
    """The score candidates of a list field (see the module's doc).

    Args:
        rows, codes: the (scored-step position, value code) pairs, each value once per step.
        all_rows, all_codes: the same over all steps (the final score on every step, what CEL computes).

    Returns:
        (CEL, name, description, bit on every step, held-out bit on each scored step) per threshold.
    """
    if any(v.__class__ is list and len(v) != len(set(v)) for v in column.values):
        return []
    final = weights(sets, rows, codes, len(values), None)
    if not (final != 0).any():
        return []
    held = [weights(sets, rows, codes, len(values), f) for f in range(sets.folds)]
    scored_count = len(sets.scored)
    every = _scores(all_rows, all_codes, final, len(column.values))
    held_scores = np.zeros(scored_count, dtype=np.int64)
    for f, w in enumerate(held):
        in_fold = sets.fold == f
        held_scores[in_fold] = _scores(rows, codes, w, scored_count)[in_fold]
    # thresholds at quantiles of the groups' scores (each group's highest), above the lowest score
    per_group = np.full(int(sets.group.max()) + 1, np.iinfo(np.int64).min)
    np.maximum.at(per_group, sets.group, every[sets.scored])
    seen = per_group[per_group > np.iinfo(np.int64).min]
    levels = [t for t in np.unique(np.quantile(seen, QUANTILES, method="higher")).tolist() if t > seen.min()]
    text = path_text(column.path)
    tiers = {t: int((final == t).sum()) for t in (2, 1, -1, -2)}
    counts = ", ".join(f"{n} {t:+d}" for t, n in tiers.items() if n)
    out: list[ScoreCandidate] = []
    for t in levels:
        name = f"{'_'.join(column.path[1:] if column.path[0] == 'state' else column.path)}_score_{t}"
        out.append((score_expression(column, values, final, int(t)), name.replace("-", "minus"),
                    f"{text}'s values weighed by how often their runs violate ({counts}) add up to >= {t}",
                    every >= t, held_scores >= t))
    return out
