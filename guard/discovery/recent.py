"""Whether remembering recent actions pays off: ``learning.memory.actions`` proposed like a predicate.

Real agents announce what they are about to do in their actions (``find Vase`` before ``break
Vase``), so the state that remembers the last K actions can tell apart runs the predicates
alone cannot. Discovery offers, after the predicates, each option the runs support:

* ``actions`` 1 or 2,
* ``action_class`` ``verb`` (a text action's first word, a tool's name), ``raw`` (the action's
  words, or a tool's name with its argument classes) and — when the runs hold tool calls —
  ``tool`` (the tool's kind),

and scores it as the search scores a predicate: counting on the same held-out folds, each
state's risk refined from the abstraction's own where the (state, recent actions) pair is
visited, backing off to it where it is rare (the visit penalty counts the rare pairs). The
best option is kept when it passes the same test as a predicate (:func:`.search.pays_off`);
the spec then asks the learner for it, whose back-off towards the memoryless chain plays the
same part.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..actions import ActionClass, action_class, action_view
from .scoring import HeldOut, Score
from .search import pays_off, required_z

DEPTHS = (1, 2)


@dataclass(frozen=True)
class ActionMemory:
    """The action memory discovery proposes, and the held-out figures before and after it."""

    actions: int
    action_class: ActionClass
    before: Score
    after: Score

    def text(self) -> str:
        return f"actions: {self.actions}, action_class: {self.action_class}"


def _classes(actions: Sequence[Any], of: ActionClass) -> NDArray[np.int64]:
    """Each step's action class as a code (0: no action)."""
    codes: dict[str, int] = {"": 0}
    return np.fromiter((codes.setdefault(action_class(action_view(a), of), len(codes)) for a in actions),
                       dtype=np.int64, count=len(actions))


def _history(codes: NDArray[np.int64], run_of_step: NDArray[np.int64], depth: int) -> NDArray[np.int64]:
    """Each step's last ``depth`` action codes (its own first) as one code; none before a run's start."""
    width = int(codes.max(initial=0)) + 2
    out = codes.copy()
    scale = 1
    for lag in range(1, depth):
        scale *= width
        earlier = np.zeros(len(codes), dtype=np.int64)  # 0: before the run's start
        same = run_of_step[lag:] == run_of_step[:-lag]
        earlier[lag:] = np.where(same, codes[:-lag] + 1, 0)
        out = out + scale * earlier
    return out


def propose_actions(scorer: HeldOut, key: NDArray[np.int64], current: Score, actions: Sequence[Any],
                    run_of_step: NDArray[np.int64], scored: NDArray[np.int64], *, min_gain: float,
                    min_brier_gain: float, min_z: float | None = None, untested: bool = False
                    ) -> tuple[ActionMemory | None, list[tuple[str, Score]]]:
    """The best action memory that pays off on held-out runs (None when none does), and every option's figures.

    With ``untested``, when none passes the test the option with the best objective that gains
    ``min_gain`` is returned instead: a candidate for the real learner to judge (:mod:`.confirm`),
    which counting's significance test would otherwise keep from it.

    Args:
        key: the abstraction's state at each scored step (0..states-1).
        current: the abstraction's held-out score.
        actions: each step's action as logged (all steps, runs in order).
        run_of_step: each step's run.
        scored: the indices of the scored steps among all steps.
    """
    views = [action_view(a) for a in actions]
    kinds: list[ActionClass] = ["verb", "raw"]
    if any(v["tool"] for v in views):
        kinds.append("tool")
    if min_z is None:  # the best of the options tried: the test grows with them, as a predicate's
        min_z = required_z(len(kinds) * len(DEPTHS))
    options: list[tuple[str, Score]] = []
    best: ActionMemory | None = None
    closest: ActionMemory | None = None
    for of in kinds:
        codes = _classes(actions, of)
        if int(codes.max(initial=0)) == 0:
            continue
        for depth in DEPTHS:
            history = _history(codes, run_of_step, depth)[scored]
            combined = key.astype(np.int64) * (int(history.max(initial=0)) + 1) + history
            values, compact = np.unique(combined, return_inverse=True)
            refined = scorer.score(compact.reshape(-1).astype(np.int64), len(values), current.risk)
            options.append((ActionMemory(depth, of, current, refined).text(), refined))
            if current.objective - refined.objective < min_gain:
                continue
            if closest is None or refined.objective < closest.after.objective:
                closest = ActionMemory(depth, of, current, refined)
            if not pays_off(scorer, current, refined, min_brier_gain=min_brier_gain, min_z=min_z):
                continue
            if best is None or refined.objective < best.after.objective:
                best = ActionMemory(depth, of, current, refined)
    return (closest if best is None and untested else best), options
