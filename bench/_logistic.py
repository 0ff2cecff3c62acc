"""A yardstick outside Forewarn's abstraction: per-step logistic regression over generic features.

``discover_agentspec.py --ceiling`` asks how much of the gap to a detection target is the
abstraction (predicates over a state, a learned chain) and how much is the data. A
discriminative model sees, at every step, every generic feature discovery could read at
once — each instruction word seen in two training tasks or more, the last action's verb and
the last two verbs, whether the last action succeeded, holding something, steps, failures,
actions on request, the instruction's length — with no state to fit in and no significance
bar. With ``interactions`` it also sees what no single predicate of the abstraction reads: each
instruction word paired with the action's verb, the object the action names, and verb and
object together (each seen in two training tasks or more). It is fitted on each outer training
fold (L2, L-BFGS to convergence) and scores a run by its highest risk strictly before the
hazard, as the bench scores the guard. The best of four regularisation strengths is reported,
chosen on the outer folds: an optimistic figure, which is what a ceiling should be.

(Session 5 fitted by 300 steps of plain gradient descent, which stopped short of the optimum on
these sparse features: 81.2 % where the converged fit reaches 83.2 %.)
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import sparse
from scipy.optimize import minimize

STRENGTHS = (1e-2, 3e-3, 1e-3, 3e-4)
_COUNTED = ("word:", "wv:", "obj:", "vo:")  # features kept only when two training groups or more carry them


def features(steps: Sequence[dict[str, Any]], words: Sequence[str], parts: Callable[[str], tuple[str, str]],
             end: int, interactions: bool = False) -> list[dict[str, float]]:
    """Each step's features before ``end`` (the hazard's step, or the run's length); ``parts``: a lowered
    action's verb and object."""
    rows = []
    previous = "^"
    for k in range(end):
        state = steps[k]["state"]
        action = str(steps[k].get("action") or "").lower()
        current, obj = parts(action) if action else ("^", "")
        row = {"bias": 1.0, f"verb:{current}": 1.0, f"verbs:{previous}>{current}": 1.0,
               "succeeded": float(state["last_success"]), "holding": float(state["holding"] != ""),
               "steps": min(state["steps"], 8) / 8, "failures": min(state["failures"], 3) / 3,
               "on_request": min(state["on_request"], 3) / 3, "last_on_request": float(state["last_on_request"]),
               "words": min(len(words), 12) / 12}
        row.update({f"word:{w}": 1.0 for w in words})
        if interactions:
            row.update({f"wv:{w}|{current}": 1.0 for w in words})
            row[f"vo:{current}|{obj}"] = 1.0
            if obj:
                row[f"obj:{obj}"] = 1.0
        rows.append(row)
        previous = current
    return rows


def _matrix(rows: Sequence[dict[str, float]], columns: dict[str, int]) -> sparse.csr_matrix:
    at: list[int] = []
    to: list[int] = []
    values: list[float] = []
    for i, row in enumerate(rows):
        for name, value in row.items():
            j = columns.get(name)
            if j is not None:
                at.append(i)
                to.append(j)
                values.append(value)
    return sparse.csr_matrix((values, (at, to)), shape=(len(rows), len(columns)))


def fit(x: sparse.csr_matrix, y: NDArray[np.float64], strength: float) -> NDArray[np.float64]:
    """Weights minimising the mean log-loss plus ``strength``/2 ‖w‖² (column 0, the bias, unpenalised)."""
    def loss(w: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        z = x @ w
        gradient = x.T @ (1.0 / (1.0 + np.exp(-z)) - y) / len(y)
        gradient[1:] += strength * w[1:]
        return float(np.mean(np.logaddexp(0.0, z) - y * z) + strength / 2 * w[1:] @ w[1:]), gradient

    return np.asarray(minimize(loss, np.zeros(x.shape[1]), jac=True, method="L-BFGS-B",
                               options={"maxiter": 5000}).x)


def run_scores(train: Sequence[tuple[list[dict[str, float]], bool, str]],
               test: Sequence[list[dict[str, float]]], strength: float) -> list[float]:
    """Each test run's highest risk, from a model fitted on ``train`` (features, outcome, group) runs;
    a word, a word with a verb, an object, a verb with an object is a feature only when two training
    groups or more use it."""
    groups: dict[str, set[str]] = {}
    for rows, _, group in train:
        for row in rows:
            for name in row:
                if name.startswith(_COUNTED):
                    groups.setdefault(name, set()).add(group)
    names = ["bias"] + sorted({n for rows, _, _ in train for row in rows for n in row
                               if n != "bias" and (not n.startswith(_COUNTED) or len(groups[n]) >= 2)})
    columns = {n: j for j, n in enumerate(names)}
    x = _matrix([row for rows, _, _ in train for row in rows], columns)
    y = np.array([float(outcome) for rows, outcome, _ in train for _ in rows])
    w = fit(x, y, strength)
    return [float((1.0 / (1.0 + np.exp(-(_matrix(rows, columns) @ w)))).max()) if rows else 0.0 for rows in test]
