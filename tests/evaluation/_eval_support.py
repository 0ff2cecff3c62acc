"""Support for the evaluation tests: the toy domain with risks set by hand, CLI results."""
from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from _support import AB, NONE, A, B, Result
from forewarn.guard.learning import END
from forewarn.guard.model import GuardModel
from forewarn.guard.storm import CheckOutcome, Method

# p_safe is NONE 0.9, A 0.4, B 0.7, AB 0: every alarm below can be worked out on paper.
RISK = {NONE: Fraction(1, 10), A: Fraction(6, 10), B: Fraction(3, 10), AB: Fraction(1), END: Fraction(0)}


def with_risk(model: GuardModel, risk: dict[int, Fraction], formula: str | None = None) -> GuardModel:
    """The model with its values replaced by ``risk`` (per abstract state), and optionally its formula."""
    values = np.array([float(risk[bits]) for bits in model.dtmc.states])
    outcome = CheckOutcome(formula or model.outcome.formula, values, None, None, Method.TOPOLOGICAL, 1e-6, 0.0)
    return GuardModel(model.spec, model.dtmc, outcome, model.pac, model.provenance)


def assert_user_error(result: Result, *fragments: str) -> None:
    assert result.returncode == 2, (result.args, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    line = " ".join(result.stderr.split())
    assert line.startswith("error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)


def mutation_places(value: Any, out: list[tuple[Any, Any]] | None = None) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in a JSON value, depth first: where a mutation fuzz replaces a part."""
    out = [] if out is None else out
    if isinstance(value, dict):
        for key, item in value.items():
            out.append((value, key))
            mutation_places(item, out)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.append((value, index))
            mutation_places(item, out)
    return out
