"""A decision: what the guard says about one state, and the figures of each guarded property.

Plain values (frozen dataclasses). The guard makes its decisions as
:class:`~guard._lazy_decision.LazyDecision`, which equals the Decision with the same fields.
"""
from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Any

from .spec import Action

__all__ = ["Alternative", "Decision", "PropertyValue"]


@dataclass(frozen=True, slots=True)
class Alternative:
    """One next move from a state (the MDP beside the chain, docs/shield.md): an action class, the
    risk of taking it then continuing as safely as possible, that risk's confidence interval, and
    the times the runs took it from there."""

    action_class: str
    risk: float
    ci_low: float | None = None
    ci_high: float | None = None
    visits: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"action_class": self.action_class, "risk": self.risk, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "visits": self.visits}


@dataclass(frozen=True, slots=True)
class PropertyValue:
    """One guarded property in one state: its risk, bounds and the action it calls for."""

    name: str
    formula: str
    p_unsafe: float | None
    p_safe: float | None
    lower: float | None  # certified bounds on p_unsafe (sound/exact checking)
    upper: float | None
    action: Action
    threshold: float | None
    ci_low: float | None = None  # statistical confidence interval of p_unsafe (1 − learning.delta)
    ci_high: float | None = None
    baseline_p_unsafe: float | None = None  # trigger increase: the run's risk p_unsafe was compared with
    increase: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "formula": self.formula, "p_unsafe": self.p_unsafe, "p_safe": self.p_safe,
                "lower": self.lower, "upper": self.upper, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "action": self.action.value, "threshold": self.threshold,
                "baseline_p_unsafe": self.baseline_p_unsafe, "increase": self.increase}


@dataclass(frozen=True, slots=True)
class Decision:
    """What the guard says about one state.

    The top-level figures are those of the property that calls for the most severe
    action (the lowest p_safe among equals); ``properties`` has every property.
    ``p_unsafe`` is ``None`` when the model never saw the state; ``lower``/``upper``
    are Storm's certified bounds on it when the model was checked soundly (numerical,
    not statistical); ``ci_low``/``ci_high`` its statistical confidence interval at
    confidence 1 − ``learning.delta``, and ``visits`` the departures observed from the
    state in the runs the model was learned from. Under the increase trigger
    ``baseline_p_unsafe`` is the run's risk the step was compared with and ``increase`` =
    ``p_unsafe`` − it; under the level trigger both are None.
    """

    action: Action
    p_unsafe: float | None
    p_safe: float | None
    property: str
    abstract_state: dict[str, bool]
    message: str
    lower: float | None = None
    upper: float | None = None
    threshold: float | None = None
    known: bool = True
    unsafe_now: bool = False
    properties: tuple[PropertyValue, ...] = ()
    monitors: dict[str, str] = field(default_factory=dict)
    ci_low: float | None = None
    ci_high: float | None = None
    visits: int | None = None
    member: str | None = None  # in a bundle: the member that decided ("pooled" or a group's value)
    group: str | None = None  # in a bundle: the session's group (None: its metadata has no grouping key)
    fallback: bool = False  # in a bundle: no model for the session's group, the pooled one decided
    baseline_p_unsafe: float | None = None
    increase: float | None = None
    # the learned chain's state the figures were read from (None: never seen, or a history the runs never
    # showed); what `forewarn states` numbers it, for the likeliest path from here (guard/states.py)
    index: int | None = None
    # the predicates could not read the state within their CPU budget (Guard.over_budget); said in the message
    over_budget: bool = False
    # with an MDP (learning.mdp, docs/shield.md): the lowest risk any continuation from the state reaches,
    # the next moves from it safest first, and (a proposed call, guard/judge.py) its own move
    p_min: float | None = None
    alternatives: tuple[Alternative, ...] = ()
    proposed: Alternative | None = None

    @builtins.property  # (``property`` is a field's name here)
    def action_risk(self) -> float | None:
        """The risk of the proposed call's action class from where the run stands (None: no call, no MDP,
        or a class the runs never took from there)."""
        return None if self.proposed is None else self.proposed.risk

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action.value, "p_unsafe": self.p_unsafe, "p_safe": self.p_safe,
            "lower": self.lower, "upper": self.upper, "ci_low": self.ci_low, "ci_high": self.ci_high,
            "visits": self.visits, "property": self.property,
            "abstract_state": dict(self.abstract_state), "message": self.message,
            "threshold": self.threshold, "known": self.known, "unsafe_now": self.unsafe_now,
            "baseline_p_unsafe": self.baseline_p_unsafe, "increase": self.increase,
            "properties": [p.to_dict() for p in self.properties], "monitors": dict(self.monitors),
            "member": self.member, "group": self.group, "fallback": self.fallback,
            "p_min": self.p_min, "alternatives": [a.to_dict() for a in self.alternatives],
            "action_risk": self.action_risk, "proposed": None if self.proposed is None else self.proposed.to_dict(),
        }
