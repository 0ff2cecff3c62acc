"""Plain results of learning and checking: what a model file stores beside the chain.

The solver method and the per-state values of a property (guard/storm.py computes them),
the PAC report (guard/pac/) and how the transition intervals were made
(guard/intervals.py). Those modules re-export these names. Kept apart because loading a
model and deciding need only these values, never Storm or scipy (bench/import_time.py).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

import numpy as np


class Method(str, Enum):
    """How Storm solves: certified bounds, fast but uncertified, or exact rationals."""

    SOUND = "sound"  # optimistic value iteration on SCCs: certified lower/upper bounds
    TOPOLOGICAL = "topological"  # SCC-wise, not certified: no bounds are kept
    EXACT = "exact"  # rational arithmetic: value = lower = upper

    @property
    def certified(self) -> bool:
        return self is not Method.TOPOLOGICAL


@dataclass(frozen=True)
class CheckOutcome:
    """Per-state results of one property.

    For a state formula with a bound (``P>0.4 [F "unsafe"]``, ``P>=1 [...]``) Storm's
    per-state truth value is in ``verdicts``, and ``values`` (with ``lower``/``upper``)
    holds the probability the bound is compared with; for a Boolean combination of such
    formulas there is no single probability, and ``values`` is NaN.
    """

    formula: str
    values: np.ndarray
    lower: np.ndarray | None
    upper: np.ndarray | None
    method: Method
    precision: float
    seconds: float
    verdicts: np.ndarray | None = None


@dataclass(frozen=True)
class StatePAC:
    state: int
    visits: int
    required: int | None  # None: no finite number of visits suffices (B is infinite)
    satisfied: bool


JOINT_STATES = 1000
"""Transient states up to which the joint PAC bound is computed (it inverts dense m × m matrices)."""


@dataclass(frozen=True)
class TightStatePAC:
    state: int
    bound: float  # ε̂: |learned − true| P(F unsafe) from this state, with probability ≥ 1 − δ (jointly)
    required: int | None  # visits under proportional growth that meet ε everywhere (None: never)
    satisfied: bool  # bound ≤ ε


@dataclass(frozen=True)
class TightPAC:
    """The tighter bound (see the module docstring), for every state and from the start."""

    satisfied: bool  # every state's bound ≤ ε
    worst_bound: float  # max_i ε̂_i (∞ if some state never absorbs)
    runs_factor: float | None  # runs needed / runs learned from (1 when met; None: no forecast)
    limiting: list[int]  # states carrying most of the worst state's bound, largest share first
    states: list[TightStatePAC]
    # the risk of a run from its first state (Definition 4 of the paper: P(φ) of the chain)
    initial_bound: float = math.inf
    initial_satisfied: bool = False
    initial_runs_factor: float | None = None
    initial_limiting: list[int] = field(default_factory=list)
    # the model file's `method` (guard/pac/registry.py); what a report was computed with, not part of its value
    method: str = field(default="hoeffding-bernstein", compare=False)


@dataclass(frozen=True)
class PACReport:
    """``states``, ``satisfied``, ``amplification``: the paper's bound; ``bounds``: the per-state bounds by name,
    in the order registered (guard/pac/registry.py; a model file written before a bound existed lacks it)."""

    epsilon: float
    delta: float
    delta_per_state: float
    amplification: float  # B
    states: list[StatePAC]
    bounds: Mapping[str, TightPAC] = field(default_factory=dict)

    # the built-in bounds by name (guard/pac/): the tighter, empirical-Bernstein, joint and outcome bounds
    @property
    def tight(self) -> TightPAC | None:
        return self.bounds.get("tight")

    @property
    def empirical(self) -> TightPAC | None:
        return self.bounds.get("empirical")

    @property
    def joint(self) -> TightPAC | None:
        return self.bounds.get("joint")  # also None past JOINT_STATES transient states

    @property
    def outcome(self) -> TightPAC | None:
        return self.bounds.get("outcome")  # also None when learned without the runs

    @property
    def satisfied(self) -> bool:
        return all(s.satisfied for s in self.states)

    @property
    def satisfied_count(self) -> int:
        return sum(s.satisfied for s in self.states)

    @property
    def worst(self) -> StatePAC | None:
        """The state furthest from its requirement (largest required/visits ratio)."""
        if not self.states:
            return None
        return max(self.states, key=lambda s: (s.required / s.visits) if s.visits and s.required is not None else math.inf)

    @property
    def runs_factor(self) -> float | None:
        """The paper's bound as a multiple of the runs learned from (every state's visits
        growing in proportion): max required/visits, at least 1; ``None``: never met."""
        ratios = [s.required / s.visits if s.visits and s.required is not None else math.inf for s in self.states]
        worst = max(ratios, default=1.0)
        return None if not math.isfinite(worst) else max(1.0, worst)


class IntervalMethod(str, Enum):
    """How a transition probability's confidence interval is computed from its counts."""

    CLOPPER_PEARSON = "clopper_pearson"
    HOEFFDING = "hoeffding"
    NONE = "none"  # no intervals: decisions carry ci_low = ci_high = None


@dataclass(frozen=True)
class IntervalReport:
    """How a model's intervals were made (stored in the model file beside them)."""

    method: IntervalMethod
    delta: float
    delta_per_entry: float
    entries: int
    seconds: float = 0.0  # building and checking the interval model
    # direct outcome intervals, used where runs visited (guard/outcomes.py): their count D and δ each;
    # ``delta`` stays the model-wide total, split δ/2 chain, δ/2 outcomes
    outcomes: int | None = None
    delta_per_outcome: float | None = None
    # the per-state test of the Markov assumption (guard/markov_check.py): its family-wise level and
    # the (state, property) pairs it tested; None when no direct interval was made
    markov_level: float | None = None
    markov_tested: int | None = None

    @property
    def construction(self) -> str:
        """What the file's ``intervals.method`` says: ``clopper_pearson`` or ``clopper_pearson+outcomes``."""
        return self.method.value + ("+outcomes" if self.outcomes is not None else "")

    def to_document(self) -> dict[str, object]:
        doc: dict[str, object] = {"method": self.construction, "delta": self.delta,
                                  "delta_per_entry": self.delta_per_entry, "entries": self.entries,
                                  "seconds": self.seconds}
        if self.outcomes is not None:
            doc["outcomes"] = self.outcomes
            doc["delta_per_outcome"] = self.delta_per_outcome
        if self.markov_level is not None:
            doc["markov_level"] = self.markov_level
            doc["markov_tested"] = self.markov_tested
        return doc
