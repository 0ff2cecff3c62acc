"""Whether discovery can learn anything from the runs it is given, and over how many folds (issue 39).

Discovery chooses predicates by held-out prediction: every candidate is scored on runs its
fold did not count. That needs runs of both outcomes on both sides of every split, and as
many groups of runs as folds. Discovery now runs on every learning (``discover: auto``,
``--discover``), often on a fold's training part or a small first log, so what it cannot do
is no error: it adapts the folds or gives the spec back unchanged, with one line saying why.

The rules, in order (docs/method.md, "Discovery on every learning"):

1. no runs, or runs that all end the same way (all safe, all violating): the spec unchanged;
2. fewer than :data:`MIN_EACH` runs of either outcome: the spec unchanged (a lone violating run
   sits in one test fold, and the other folds learn from none);
3. fewer than two groups holding a violating run, or two holding a safe one: the spec unchanged
   (the same, a whole group at a time);
4. fewer groups than folds: one fold per group (leave-one-group-out), said in a note.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MIN_EACH = 2  # runs (and groups) of each outcome held-out scoring needs


@dataclass(frozen=True)
class Plan:
    """The folds discovery runs with (``None``: it does not run), and the line saying why, if any."""

    folds: int | None
    note: str | None = None


def plan_folds(unsafe: Sequence[bool], groups: Sequence[str], folds: int, key: str | None) -> Plan:
    """How discovery runs on runs whose outcomes are ``unsafe`` and groups ``groups`` (see the module's doc).

    Args:
        unsafe: whether each run violates, under the spec's ``unsafe`` and monitors.
        groups: each run's group (``folds.group_of``), in the same order.
        folds: the folds asked for (at least 2).
        key: the grouping key, for the notes (``None``: each run its own group).
    """
    runs = len(unsafe)
    unchanged = "the spec is unchanged"
    if runs == 0:
        return Plan(None, f"no runs to discover predicates from: {unchanged}")
    bad = sum(unsafe)
    if bad in (0, runs):
        how = "safe" if bad == 0 else "violating"
        return Plan(None, f"all {runs} runs are {how} under the spec's 'unsafe' and monitors: discovery learns what "
                          f"tells runs that violate from runs that do not, and needs both; {unchanged}")
    fewest = min(bad, runs - bad)
    if fewest < MIN_EACH:
        which = "violates" if bad < MIN_EACH else "stays safe"
        return Plan(None, f"only {fewest} of {runs} runs {which}: held-out scoring needs at least {MIN_EACH} runs "
                          f"of each outcome; {unchanged}")
    what = "run ids" if key in (None, "id") else f"values of {key}"
    with_bad = {g for g, u in zip(groups, unsafe) if u}
    with_good = {g for g, u in zip(groups, unsafe) if not u}
    if len(with_bad) < MIN_EACH or len(with_good) < MIN_EACH:
        which, count = ("a violating", len(with_bad)) if len(with_bad) < MIN_EACH else ("a safe", len(with_good))
        return Plan(None, f"only {count} distinct {what} hold {which} run: held-out scoring needs at least "
                          f"{MIN_EACH} groups of each outcome; {unchanged}")
    distinct = len(set(groups))
    if distinct < folds:
        return Plan(distinct, f"{distinct} distinct {what} for {folds} folds: discovery scored leave-one-group-out "
                              f"({distinct} folds)")
    return Plan(folds)
