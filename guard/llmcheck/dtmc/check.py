"""Checking a query on the explored chain with Storm, with the unexplored mass as an interval.

Three numbers come back (see docs/llmcheck.md, "What the numbers mean"):

* ``value``: the paper's answer, on the DTMC whose terminal state satisfies no label;
* ``lower``/``upper``: the least and the most the property's probability can be once the
  unexplored mass continues as *any* text (the min and max of the bounds MDP), so the
  true probability of the depth-L model lies in between; ``value`` always does too;
* ``value_lower``/``value_upper``: Storm's certified numerical bounds on ``value``
  (sound method), already folded into ``lower``/``upper``.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ....errors import CheckError
from ...storm import Method, check_sparse_model
from ..chain import ExploredModel
from ..errors import QueryError
from ..quantify import Quantification
from ..query import Query
from .build import Labeling, Scope, build_bounds_mdp, build_dtmc, label_states


@dataclass(frozen=True)
class CheckResult:
    """Storm's answers for the start text, and per state for the report.

    Attributes:
        query: the parsed property.
        value: probability on the paper's DTMC (unexplored mass satisfies no label).
        lower: least probability over every continuation of the unexplored mass.
        upper: greatest probability over every continuation of the unexplored mass.
        value_lower: Storm's numerical lower bound on ``value`` (``None`` if not certified).
        value_upper: Storm's numerical upper bound on ``value``.
        verdict: for ``P~b [...]``: true/false when the whole interval decides it, else ``None``.
        method: Storm's method.
        seconds: time spent in Storm.
        values: ``value`` for every state.
        state_lower: ``lower`` for every state (``None`` when bounds were not computed).
        state_upper: ``upper`` for every state.
        labeling: quantification values and labels of the states.
        note: why bounds are missing, if they are.
    """

    query: Query
    value: float
    lower: float | None
    upper: float | None
    value_lower: float | None
    value_upper: float | None
    verdict: bool | None
    method: Method
    seconds: float
    values: np.ndarray
    state_lower: np.ndarray | None
    state_upper: np.ndarray | None
    labeling: Labeling
    note: str | None = None


def check_explored(model: ExploredModel, query: Query, quantifications: Sequence[Quantification], *,
                   scope: Scope = Scope.GENERATED, method: Method = Method.SOUND, precision: float = 1e-9,
                   bounds: bool = True) -> CheckResult:
    """Label the explored chain and check ``query`` from the start text.

    Args:
        model: the explored chain.
        query: the parsed property.
        quantifications: the quantifications its labels read.
        scope: what text the quantifications read.
        method: Storm's method (``exact`` uses the model's probabilities as rationals).
        precision: solver precision for ``sound`` and ``topological``.
        bounds: also compute the unexplored-mass interval (one more Storm call, an MDP).
    """
    labeling = label_states(model, query, quantifications, scope=scope)
    exact = method is Method.EXACT
    started = time.perf_counter()
    outcome = check_sparse_model(build_dtmc(model, labeling, exact=exact), query.formula(), method=method,
                                 precision=precision)
    value = float(outcome.values[0])
    value_lower = None if outcome.lower is None else float(outcome.lower[0])
    value_upper = None if outcome.upper is None else float(outcome.upper[0])
    lower = upper = None
    state_lower = state_upper = None
    note = None
    if bounds:
        try:
            mdp = build_bounds_mdp(model, labeling, query, exact=exact)
            low = check_sparse_model(mdp, query.formula("Pmin"), method=method, precision=precision)
            high = check_sparse_model(mdp, query.formula("Pmax"), method=method, precision=precision)
        except (QueryError, CheckError) as exc:
            note = f"no bounds for the unexplored mass: {exc}"
        else:
            n = model.size
            state_lower = (low.lower if low.lower is not None else low.values)[:n]
            state_upper = (high.upper if high.upper is not None else high.values)[:n]
            lower, upper = float(state_lower[0]), float(state_upper[0])
            if value_lower is not None:  # Storm's numerical slack widens the interval
                lower = min(lower, value_lower)
            if value_upper is not None:
                upper = max(upper, value_upper)
            lower, upper = max(0.0, lower), min(1.0, upper)
    verdict = None
    if query.bound is not None:
        low_verdict = query.verdict(lower if lower is not None else value)
        high_verdict = query.verdict(upper if upper is not None else value)
        verdict = low_verdict if low_verdict == high_verdict else None
    return CheckResult(query, value, lower, upper, value_lower, value_upper, verdict, method,
                       time.perf_counter() - started, np.asarray(outcome.values, dtype=float),
                       state_lower, state_upper, labeling, note)
