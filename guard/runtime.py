"""Run time: a guard holds a checked model; a session follows one agent run.

A decision is: evaluate the predicates, look up the cached value of the abstract
state, apply the policy. No solver call on this path; decisions are cached per
abstract state because the model, and so the answer, is fixed.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guard.model import GuardModel
from guard.policy import Policy
from guard.predicates import PredicateSet, PythonPredicate
from guard.spec import Action

__all__ = ["Decision", "Guard", "Session", "StepRecord"]


@dataclass(frozen=True, slots=True)
class Decision:
    """What the guard says about one state.

    ``p_unsafe`` is the cached probability of the guarded property failing from this
    abstract state (``None`` when the model never saw the state); ``lower``/``upper``
    are Storm's certified bounds on it when the model was checked soundly.
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action.value, "p_unsafe": self.p_unsafe, "p_safe": self.p_safe,
            "lower": self.lower, "upper": self.upper, "property": self.property,
            "abstract_state": dict(self.abstract_state), "message": self.message,
            "threshold": self.threshold, "known": self.known, "unsafe_now": self.unsafe_now,
        }


class Guard:
    """A loaded model plus a policy; makes sessions.

    Args:
        model: a learned and checked model.
        policy: overrides the spec's thresholds and unseen-state action.
        python_predicates: predicates defined in code, by name.
    """

    def __init__(self, model: GuardModel, *, policy: Policy | None = None,
                 python_predicates: Mapping[str, PythonPredicate] | None = None) -> None:
        self.model = model
        self.policy = policy or Policy.from_settings(model.spec.guard)
        self.predicates = PredicateSet(model.spec, python_predicates)
        self.property = model.outcome.formula
        dtmc = model.dtmc
        self._index = dtmc.index()
        self._values = model.outcome.values.tolist()
        self._lower = None if model.outcome.lower is None else model.outcome.lower.tolist()
        self._upper = None if model.outcome.upper is None else model.outcome.upper.tolist()
        self._decisions: dict[int, Decision] = {}

    @classmethod
    def load(cls, path: str | Path, **options: Any) -> Guard:
        """Load a model file written by ``forewarn learn`` (validated; see :class:`GuardModel`)."""
        return cls(GuardModel.load(path), **options)

    def session(self, policy: Policy | None = None) -> Session:
        """A new session for one agent run; ``policy`` overrides the guard's for it alone."""
        if policy is None:
            return Session(self)
        return Session(Guard._with_policy(self, policy))

    @staticmethod
    def _with_policy(guard: Guard, policy: Policy) -> Guard:
        clone = object.__new__(Guard)
        clone.__dict__.update(guard.__dict__)
        clone.policy = policy
        clone._decisions = {}
        return clone

    def decide_bits(self, bits: int) -> Decision:
        """The decision for an abstract state (cached)."""
        decision = self._decisions.get(bits)
        if decision is None:
            decision = self._decisions[bits] = self._make_decision(bits)
        return decision

    def decide(self, state: Mapping[str, Any]) -> Decision:
        """The decision for a concrete state, without any session."""
        return self.decide_bits(self.predicates.evaluate(state))

    def _make_decision(self, bits: int) -> Decision:
        predicates = self.predicates
        abstract = predicates.as_context(bits)
        unsafe_now = predicates.is_unsafe(bits)
        index = self._index.get(bits)
        if index is None and not unsafe_now:
            action = self.policy.unseen_state
            message = (f"The current state ({predicates.describe(bits)}) never occurred in the runs this model "
                       f"was learned from, so its risk is unknown; the policy for unseen states is "
                       f"'{action.value}'.")
            return Decision(action, None, None, self.property, abstract, message, known=False)
        if index is None:  # unsafe but never observed: the risk is certain anyway
            p_unsafe, lower, upper = 1.0, 1.0, 1.0
        else:
            p_unsafe = self._values[index]
            lower = self._lower[index] if self._lower is not None else None
            upper = self._upper[index] if self._upper is not None else None
        p_safe = 1.0 - p_unsafe
        action, theta = self.policy.act(p_safe)
        message = "" if action is Action.ALLOW else self._risk_message(bits, p_unsafe, action, theta, unsafe_now)
        return Decision(action, p_unsafe, p_safe, self.property, abstract, message, lower=lower, upper=upper,
                        threshold=theta, known=index is not None, unsafe_now=unsafe_now)

    def _risk_message(self, bits: int, p_unsafe: float, action: Action, theta: float | None,
                      unsafe_now: bool) -> str:
        spec = self.model.spec
        state = self.predicates.describe(bits)
        if unsafe_now:
            return (f"Safety violation: the current state ({state}) satisfies the unsafe condition "
                    f"'{spec.unsafe}' of '{spec.name}'. Action: {action.value}.")
        return (f"Risk alert ({spec.name}): in the current state ({state}) the probability of eventually "
                f"reaching an unsafe state ('{spec.unsafe}', property {self.property}) is {p_unsafe:.1%}. "
                f"The probability of staying safe, {1 - p_unsafe:.1%}, is below the '{action.value}' "
                f"threshold {theta}. Revise the plan so that '{spec.unsafe}' never becomes true.")


@dataclass(frozen=True, slots=True)
class StepRecord:
    index: int
    abstract: int
    decision: Decision
    action: Any = None
    t: float | None = None


@dataclass
class Session:
    """One agent run under a guard. ``observe`` commits a step; ``preview`` does not."""

    guard: Guard
    history: list[StepRecord] = field(default_factory=list)

    def observe(self, state: Mapping[str, Any], *, action: Any = None, t: float | None = None) -> Decision:
        """Commit the agent's new state and decide on it."""
        bits = self.guard.predicates.evaluate(state)
        decision = self.guard.decide_bits(bits)
        self.history.append(StepRecord(len(self.history), bits, decision, action, t))
        return decision

    def preview(self, state: Mapping[str, Any]) -> Decision:
        """Decide on a state the agent might move to, committing nothing (look-ahead)."""
        return self.guard.decide_bits(self.guard.predicates.evaluate(state))

    @property
    def last(self) -> Decision | None:
        return self.history[-1].decision if self.history else None
