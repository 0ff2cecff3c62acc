"""K-fold splits by a grouping key, so near-duplicate runs never sit on both sides.

Runs of the same task (or the same seed, driver, user…) resemble each other more than
runs of different ones; learning on some and testing on others of the same group
flatters the model. A split therefore assigns whole groups to folds. Groups are
balanced greedily — largest first, each to the fold where it adds least to the share
of runs and of violating runs — so every test fold gets about as many runs and as many
violations as the others.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import orjson

from ...errors import InputError, UsageError
from ..traces import Run


def group_of(run: Run, key: str | None) -> str:
    """The run's group: the value at a dotted path (``meta.task``, ``id``), or its id when ``key`` is None.

    Two or more paths, comma-separated (``meta.attack,meta.task``), group by the first the run holds
    (not null): runs that carry an attack are grouped by it, the others by their task, so a test fold's
    attacks are never in training, nor are its benign runs' tasks.

    Raises:
        ForewarnError: when the run has no value at that path (at none of them).
    """
    if key is None or key == "id":
        return run.id
    if "," in key:  # s38-text: grouping by two fields
        keys = [k.strip() for k in key.split(",") if k.strip()]
        for k in keys[:-1]:
            value = _at(run, k)
            if value is not None:
                return f"{k}={_text(value)}"
        return f"{keys[-1]}={group_of(run, keys[-1])}"
    node: Any = {"id": run.id, "meta": run.meta}
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise InputError(f"{run.source}:{run.line}: run {run.id!r} has no {key!r} to group by "
                                f"(expected a path such as 'meta.task' or 'id')")
        node = node[part]
    return _text(node)


def group_units(run: Run, key: str) -> str:
    """With comma-separated fields, the run's values of every one it holds (``meta.attack=pay|meta.task=t1``):
    finer than :func:`group_of`'s, for counting independent units within the folds it makes."""
    keys = [k.strip() for k in key.split(",") if k.strip()]
    return "|".join(f"{k}={_text(v)}" for k in keys if (v := _at(run, k)) is not None) or group_of(run, key)


def _at(run: Run, key: str) -> Any:
    """The value at a dotted path of the run, None where it has none."""
    node: Any = {"id": run.id, "meta": run.meta}
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _text(node: Any) -> str:
    return node if isinstance(node, str) else orjson.dumps(node, option=orjson.OPT_SORT_KEYS).decode()


def split_folds(groups: Sequence[str], unsafe: Sequence[bool], folds: int, *, seed: int = 0,
                key: str | None = None) -> list[list[int]]:
    """Assign runs to ``folds`` test folds, whole groups at a time.

    Args:
        groups: each run's group (see :func:`group_of`).
        unsafe: whether each run violates (to spread violations over the folds).
        folds: number of folds, at least 2 and at most the number of groups.
        seed: breaks ties between groups of equal size.
        key: the grouping key, for error messages.

    Returns:
        Per fold, the indices of its runs in ascending order.
    """
    if len(groups) != len(unsafe):
        raise UsageError(f"{len(groups)} groups but {len(unsafe)} outcomes")
    members: dict[str, list[int]] = {}
    for index, group in enumerate(groups):
        members.setdefault(group, []).append(index)
    if folds < 2:
        raise InputError(f"--folds must be at least 2, got {folds}")
    if folds > len(members):
        what = "distinct run ids" if key in (None, "id") else f"distinct values of {key!r}"
        if len(members) < 2:  # no --folds helps: cross-validation needs two groups at the least
            same = " (runs sharing an id count as one: give them distinct ids)" if key in (None, "id") else ""
            raise InputError(f"cross-validation needs at least 2 groups, but there is only {len(members)} of "
                                f"{what} among {len(groups)} runs{same}; group by another key or add runs")
        raise InputError(f"--folds {folds} needs at least {folds} groups, but there are only {len(members)} "
                            f"{what}; use --folds {len(members)} or less, or group by another key")
    order = list(members)
    random.Random(seed).shuffle(order)
    order.sort(key=lambda g: (-sum(unsafe[i] for i in members[g]), -len(members[g])))
    total_runs = len(groups)
    total_unsafe = max(sum(unsafe), 1)
    runs = [0] * folds
    violating = [0] * folds
    assigned: list[list[int]] = [[] for _ in range(folds)]
    for group in order:
        size = len(members[group])
        bad = sum(unsafe[i] for i in members[group])
        target = min(range(folds), key=lambda f: ((runs[f] + size) / total_runs
                                                  + (violating[f] + bad) / total_unsafe, runs[f], f))
        runs[target] += size
        violating[target] += bad
        assigned[target].extend(members[group])
    return [sorted(fold) for fold in assigned]
