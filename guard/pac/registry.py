"""The per-state PAC bounds as one table: learning computes each, and the model file, ``learn``, ``check`` and
``evaluate`` loop over it.

A bound is one module of ``guard/pac/`` defining its :class:`PACBound` (``BOUND``) and one ``register`` line in
``guard/pac/__init__.py`` (or a user's own code). Its ``name`` is its key everywhere it appears: ``pac.<name>`` in
the model file (written with ``"method": <method>``), ``pac.<name>`` in ``check --format json`` and in
``evaluate``'s folds, ``pac_<name>_*`` in ``learn --format json``. The paper's sample-size requirement is not one
of them: it is the report's own fields (:func:`guard.pac.paper.pac_report`).

Bounds are listed in the order registered, loosest first: "Enough runs?" (``learn``) answers with the last one a
model file holds.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ...errors import InputError
from ..results import PACReport, TightPAC

if TYPE_CHECKING:
    from ..learning import LearnedDTMC


@dataclass(frozen=True)
class BoundInputs:
    """What a bound is computed from: the learned chain, (ε, δ), δ per state (δ/|S|, the paper's union bound),
    and, when learned from the runs rather than their counts, each state's first-visit counts
    (:func:`guard.outcomes.first_visit_counts`)."""

    dtmc: LearnedDTMC
    epsilon: float
    delta: float
    delta_per_state: float
    first_visits: tuple[np.ndarray, np.ndarray] | None = None


def older_file(pac: PACReport) -> str:
    """Why a bound is absent from a model file, by default: the file predates it."""
    return "not in this model file (written by an older Forewarn); re-learn."


@dataclass(frozen=True)
class PACBound:
    """One registered bound: its key, the model file's ``method``, its name in words (``PAC, <title> bound``),
    what computes it (``None``: not computed for these inputs), whether its runs forecast is met in ≥ 1 − δ of
    learnings (else it is a typical learning's need), a note on what it is computed from, and why it is absent
    from a model file."""

    name: str
    method: str
    title: str
    compute: Callable[[BoundInputs], TightPAC | None]
    guaranteed: bool = False
    note: str = ""
    absent: Callable[[PACReport], str] = older_file


_BOUNDS: dict[str, PACBound] = {}


def register(bound: PACBound) -> None:
    """Add a bound after those registered before it (a second one of the same name is an error)."""
    if bound.name in _BOUNDS:
        raise InputError(f"PAC bound {bound.name!r} is already registered")
    if not bound.name.isidentifier():  # it becomes a JSON key and part of learn's pac_<name>_* keys
        raise InputError(f"PAC bound name {bound.name!r} is not an identifier")
    _BOUNDS[bound.name] = bound


def unregister(name: str) -> None:
    """Remove a bound registered with :func:`register` (a test's, a plugin's)."""
    if _BOUNDS.pop(name, None) is None:
        raise InputError(f"no PAC bound {name!r} is registered; known: {', '.join(_BOUNDS)}")


def bounds() -> list[PACBound]:
    """The registered bounds, in the order registered."""
    return list(_BOUNDS.values())


def compute_bounds(inputs: BoundInputs) -> dict[str, TightPAC]:
    """Every registered bound's report on ``inputs`` (those computed), each carrying its ``method``."""
    out: dict[str, TightPAC] = {}
    for bound in _BOUNDS.values():
        report = bound.compute(inputs)
        if report is not None:
            out[bound.name] = replace(report, method=bound.method)
    return out
