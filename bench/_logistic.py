"""A yardstick outside Forewarn's abstraction: per-step logistic regression over generic features.

``discover_agentspec.py --ceiling`` asks how much of the gap to a detection target is the
abstraction (predicates over a state, a learned chain) and how much is the data. A
discriminative model sees, at every step, every generic feature discovery could read at
once — each instruction word seen in two training tasks or more, the last action's verb and
the last two verbs, whether the last action succeeded, holding something, steps, failures,
actions on request, the instruction's length — with no state to fit in and no significance
bar. It is fitted on each outer training fold (L2, plain gradient descent) and scores a run by
its highest risk strictly before the hazard, as the bench scores the guard. The best of three
regularisation strengths is reported, chosen on the outer folds: an optimistic figure, which is
what a ceiling should be.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

STRENGTHS = (1e-2, 3e-3, 1e-3)
ITERATIONS = 300


def features(steps: Sequence[dict[str, Any]], words: Sequence[str], verb: Callable[[str], str],
             end: int) -> list[dict[str, float]]:
    """Each step's features before ``end`` (the hazard's step, or the run's length)."""
    rows = []
    previous = "^"
    for k in range(end):
        state = steps[k]["state"]
        action = str(steps[k].get("action") or "").lower()
        current = verb(action) if action else "^"
        row = {"bias": 1.0, f"verb:{current}": 1.0, f"verbs:{previous}>{current}": 1.0,
               "succeeded": float(state["last_success"]), "holding": float(state["holding"] != ""),
               "steps": min(state["steps"], 8) / 8, "failures": min(state["failures"], 3) / 3,
               "on_request": min(state["on_request"], 3) / 3, "last_on_request": float(state["last_on_request"]),
               "words": min(len(words), 12) / 12}
        row.update({f"word:{w}": 1.0 for w in words})
        rows.append(row)
        previous = current
    return rows


def _matrix(rows: Sequence[dict[str, float]], columns: dict[str, int]) -> NDArray[np.float64]:
    x = np.zeros((len(rows), len(columns)))
    for i, row in enumerate(rows):
        for name, value in row.items():
            j = columns.get(name)
            if j is not None:
                x[i, j] = value
    return x


def fit(x: NDArray[np.float64], y: NDArray[np.float64], strength: float) -> NDArray[np.float64]:
    """Weights minimising the mean log-loss plus ``strength``/2 ‖w‖² (column 0, the bias, unpenalised)."""
    w = np.zeros(x.shape[1])
    for _ in range(ITERATIONS):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        gradient = x.T @ (p - y) / len(y) + strength * w
        gradient[0] -= strength * w[0]
        w -= gradient
    return w


def run_scores(train: Sequence[tuple[list[dict[str, float]], bool, str]],
               test: Sequence[list[dict[str, float]]], strength: float) -> list[float]:
    """Each test run's highest risk, from a model fitted on ``train`` (features, outcome, group) runs;
    a word is a feature only when two training groups or more use it."""
    groups: dict[str, set[str]] = {}
    for rows, _, group in train:
        for name in rows[0] if rows else {}:
            if name.startswith("word:"):
                groups.setdefault(name, set()).add(group)
    names = ["bias"] + sorted({n for rows, _, _ in train for row in rows for n in row
                               if n != "bias" and (not n.startswith("word:") or len(groups[n]) >= 2)})
    columns = {n: j for j, n in enumerate(names)}
    x = _matrix([row for rows, _, _ in train for row in rows], columns)
    y = np.array([float(outcome) for rows, outcome, _ in train for _ in rows])
    w = fit(x, y, strength)
    return [float((1.0 / (1.0 + np.exp(-(_matrix(rows, columns) @ w)))).max()) if rows else 0.0 for rows in test]
