"""What every monitor is: a deterministic automaton over abstract states.

A monitor reads one abstract state (a predicate bit mask) per step and moves between
integer states; ``VIOL`` is absorbing and means the rule is broken. Conditions are CEL
expressions over predicate names, compiled once and memoised per bit mask.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import cel
import numpy as np

from ..errors import MonitorError

__all__ = ["MonitorError"]  # names other modules import through this one

VIOL = -1


class ConditionError(MonitorError):
    """A monitor condition that does not parse or names an unknown predicate."""


class MonitorSemanticsError(MonitorError):
    """A rule that no monitor can decide on finite runs (say why)."""


class Condition:
    """A CEL expression over predicate names, evaluated on abstract states (bit masks)."""

    def __init__(self, expression: str, predicate_names: Sequence[str]) -> None:
        self.expression = expression
        self.names = list(predicate_names)
        try:
            self._program = cel.compile(expression)
        except ValueError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "syntax error"
            raise ConditionError(f"{expression!r} does not parse as CEL: {first}") from exc
        unknown = sorted(set(self._program.variables()) - set(self.names))
        if unknown:
            raise ConditionError(f"{expression!r} names unknown predicate(s) {unknown}; known: {self.names}")
        self._memo: dict[int, bool] = {}

    def __call__(self, bits: int) -> bool:
        value = self._memo.get(bits)
        if value is None:
            context = {name: bool(bits >> i & 1) for i, name in enumerate(self.names)}
            result = self._program.execute(context)
            if result.__class__ is not bool:
                raise ConditionError(f"{self.expression!r} evaluates to {type(result).__name__} {result!r}, "
                                     "expected a bool")
            value = self._memo[bits] = result
        return value

    def table(self, states: Sequence[int]) -> np.ndarray:
        """The condition's truth value for each of the given abstract states."""
        return np.fromiter((self(bits) for bits in states), dtype=bool, count=len(states))

    def __repr__(self) -> str:
        return f"Condition({self.expression!r})"


class Monitor(ABC):
    """A deterministic monitor automaton; states are small integers, ``VIOL`` absorbing.

    Timing (see docs/monitors.md): the monitor reads a state when the run enters it,
    the first state included (``q1 = step(initial, L(s0))``); it stops when the run
    ends, so an obligation still pending at the end is not a violation.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    @abstractmethod
    def initial(self) -> int:
        """The state before the first step is read."""

    @abstractmethod
    def step(self, q: int, bits: int) -> int:
        """The state after reading abstract state ``bits`` in state ``q``."""

    @abstractmethod
    def describe(self, q: int) -> str:
        """A monitor state in words, for decisions and reports."""

    @abstractmethod
    def to_document(self) -> dict[str, Any]:
        """The monitor's definition as spec data."""

    @property
    def state_bound(self) -> int | None:
        """An exclusive upper bound on state values (``None``: unknown); lets the product pack states."""
        return None

    def prepare(self, states: Sequence[int]) -> Any:
        """Per-chain data for :meth:`step_array` (by default the abstract states themselves)."""
        return list(states)

    def step_array(self, q: np.ndarray, at: np.ndarray, prepared: Any) -> np.ndarray:
        """:meth:`step` for many (state, chain state index) pairs at once.

        Subclasses vectorise this; the default calls :meth:`step` once per distinct pair.
        """
        memo: dict[tuple[int, int], int] = {}
        out = np.empty_like(q)
        for k, (qk, j) in enumerate(zip(q.tolist(), at.tolist())):
            value = memo.get((qk, j))
            if value is None:
                value = memo[(qk, j)] = self.step(qk, prepared[j])
            out[k] = value
        return out

    def run(self, trace: Sequence[int]) -> list[int]:
        """States after each step of a trace of bit masks."""
        q = self.initial
        out = []
        for bits in trace:
            q = self.step(q, bits)
            out.append(q)
        return out

    def first_violation(self, trace: Sequence[int]) -> int | None:
        """Index of the step on which the monitor enters ``VIOL``, if it does."""
        for index, q in enumerate(self.run(trace)):
            if q == VIOL:
                return index
        return None
