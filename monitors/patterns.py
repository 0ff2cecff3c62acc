"""Dwyer's specification patterns as monitors, with their scopes.

Patterns (P, S are conditions):

* ``absence``       — P never holds in the scope;
* ``universality``  — P holds at every step of the scope;
* ``existence``     — P holds at some step of the scope, within its first K+1 steps
  when ``within: K`` is given;
* ``precedence``    — P holds only after S has held (S at the same step counts);
* ``response``      — every S is followed by P within K steps (at the same step counts).

Scopes (Q opens, R closes):

* ``globally``      — the whole run;
* ``before R``      — the steps before the first R (the whole run if R never holds);
* ``after Q``       — from the first Q (included) to the end of the run;
* ``between Q and R`` — from each Q (a step with Q and not R) up to the next R
  (excluded), or to the end of the run if R does not come. As in Dwyer's LTL mappings,
  *every* Q ∧ ¬R step opens its own obligation, also inside an open scope: existence
  needs a P after the latest opener that is not yet met (within K steps of it, with a
  bound), precedence needs an S again after each opener before a P.

``before`` and ``between`` are the variants a guard can act on: a P inside the scope is
a violation at once, whether or not R comes later (Dwyer's "after Q until R"). An
existence or response obligation still open when R closes the scope is a violation on
the R step; one still open when the run ends is not (weak finite-run semantics). So
``existence`` and ``response`` without a bound need a closing scope (``before`` or
``between``): on their own, no finite prefix of a run violates them.

The state space stays that of one scope: a new opener inside an open scope only needs
to know whether the open obligation is met. A pending existence obligation has the
earliest deadline and any P meeting it meets every later opener's too, so the monitor
restarts only from ``met``; a precedence obligation is met by the same S as every
earlier one, so it restarts to "not yet enabled". Absence, universality and response
read each step of the union of the open scopes, which a new opener does not change.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from .base import VIOL, Condition, Monitor, MonitorError, MonitorSemanticsError


class Pattern(str, Enum):
    ABSENCE = "absence"
    UNIVERSALITY = "universality"
    EXISTENCE = "existence"
    PRECEDENCE = "precedence"
    RESPONSE = "response"


class Scope(str, Enum):
    GLOBALLY = "globally"
    BEFORE = "before"
    AFTER = "after"
    BETWEEN = "between"


# Scope phases, stored in the low two bits of a monitor state.
_WAITING, _ACTIVE, _FINISHED = 0, 1, 2


@dataclass(frozen=True)
class _Inner:
    """The pattern inside one scope segment; inner states are small non-negative ints."""

    pattern: Pattern
    p: Condition
    s: Condition | None
    within: int | None

    def start(self) -> int:
        # existence: 0 = met, 1 + c = c steps seen without P; response: 0 idle, r pending
        return 1 if self.pattern is Pattern.EXISTENCE else 0

    def step(self, x: int, bits: int) -> int:
        pattern, within = self.pattern, self.within
        if pattern is Pattern.ABSENCE:
            return VIOL if self.p(bits) else 0
        if pattern is Pattern.UNIVERSALITY:
            return 0 if self.p(bits) else VIOL
        if pattern is Pattern.EXISTENCE:
            if x == 0 or self.p(bits):
                return 0
            if within is None:
                return 1
            seen = x  # steps seen without P, this one included
            return VIOL if seen >= within + 1 else seen + 1
        assert self.s is not None
        if pattern is Pattern.PRECEDENCE:
            if x == 1 or self.s(bits):
                return 1
            return VIOL if self.p(bits) else 0
        # response: S must be followed by P within K steps (same step counts)
        if self.p(bits):
            return 0
        if x == 0:
            if not self.s(bits):
                return 0
            if within is None:
                return 1
            return VIOL if within == 0 else within
        if within is None:
            return 1
        return VIOL if x == 1 else x - 1

    def step_array(self, x: np.ndarray, p: np.ndarray, s: np.ndarray) -> np.ndarray:
        """:meth:`step` on arrays (``p``, ``s``: the conditions' values at the step read)."""
        pattern, within = self.pattern, self.within
        if pattern is Pattern.ABSENCE:
            return np.where(p, VIOL, 0)
        if pattern is Pattern.UNIVERSALITY:
            return np.where(p, 0, VIOL)
        if pattern is Pattern.EXISTENCE:
            waiting = 1 if within is None else np.where(x >= within + 1, VIOL, x + 1)
            return np.where((x == 0) | p, 0, waiting)
        if pattern is Pattern.PRECEDENCE:
            return np.where((x == 1) | s, 1, np.where(p, VIOL, 0))
        fire = 1 if within is None else (VIOL if within == 0 else within)
        pending = 1 if within is None else np.where(x == 1, VIOL, x - 1)
        return np.where(p, 0, np.where(x == 0, np.where(s, fire, 0), pending))

    def max_state(self) -> int:
        if self.pattern is Pattern.EXISTENCE:
            return 1 if self.within is None else self.within + 1
        if self.pattern is Pattern.RESPONSE:
            return 1 if self.within is None else max(self.within, 1)
        return 1

    def reopen(self, x: int, bits: int) -> int:
        """Read a step that opens a new ``between`` obligation while the scope is already open.

        Dwyer: every Q ∧ ¬R step opens its own obligation. Existence restarts only when the
        open one is met (a pending one has the earliest deadline, and any P that meets it
        meets the new one too); precedence always restarts (the new obligation needs its
        own S). Absence, universality and response constrain each step of the union of the
        open scopes, so a new opener changes nothing for them.
        """
        if self.pattern is Pattern.PRECEDENCE or (self.pattern is Pattern.EXISTENCE and x == 0):
            return self.step(self.start(), bits)
        return self.step(x, bits)

    def reopen_array(self, x: np.ndarray, p: np.ndarray, s: np.ndarray) -> np.ndarray:
        """:meth:`reopen` on arrays."""
        if self.pattern is Pattern.PRECEDENCE:
            return self.step_array(np.full_like(x, self.start()), p, s)
        if self.pattern is Pattern.EXISTENCE:
            return self.step_array(np.where(x == 0, self.start(), x), p, s)
        return self.step_array(x, p, s)

    def close(self, x: int) -> int:
        """The scope closes (R): an open existence or response obligation is violated."""
        if self.pattern is Pattern.EXISTENCE and x != 0:
            return VIOL
        if self.pattern is Pattern.RESPONSE and x != 0:
            return VIOL
        return x

    def describe(self, x: int) -> str:
        if self.pattern is Pattern.EXISTENCE:
            return "met" if x == 0 else f"waiting({x - 1})"
        if self.pattern is Pattern.PRECEDENCE:
            return "enabled" if x == 1 else "not yet enabled"
        if self.pattern is Pattern.RESPONSE:
            if x == 0:
                return "idle"
            return "pending" if self.within is None else f"wait({x})"
        return "ok"


class PatternMonitor(Monitor):
    """A Dwyer pattern within a scope. State = inner * 4 + phase, or ``VIOL``."""

    def __init__(self, name: str, pattern: Pattern, p: Condition, *, s: Condition | None = None,
                 within: int | None = None, scope: Scope = Scope.GLOBALLY, q: Condition | None = None,
                 r: Condition | None = None) -> None:
        super().__init__(name)
        if within is not None and within < 0:
            raise MonitorError(f"monitor {name!r}: 'within' must be >= 0, got {within}")
        if pattern in (Pattern.PRECEDENCE, Pattern.RESPONSE) and s is None:
            raise MonitorError(f"monitor {name!r}: pattern {pattern.value!r} needs 's' "
                               f"({'the enabling condition' if pattern is Pattern.PRECEDENCE else 'the trigger'})")
        if pattern in (Pattern.ABSENCE, Pattern.UNIVERSALITY, Pattern.PRECEDENCE) and within is not None:
            raise MonitorError(f"monitor {name!r}: 'within' applies to existence and response only")
        if scope in (Scope.AFTER, Scope.BETWEEN) and q is None:
            raise MonitorError(f"monitor {name!r}: scope {scope.value!r} needs 'q' (the condition opening it)")
        if scope in (Scope.BEFORE, Scope.BETWEEN) and r is None:
            raise MonitorError(f"monitor {name!r}: scope {scope.value!r} needs 'r' (the condition closing it)")
        if pattern in (Pattern.EXISTENCE, Pattern.RESPONSE) and within is None \
                and scope in (Scope.GLOBALLY, Scope.AFTER):
            raise MonitorSemanticsError(
                f"monitor {name!r}: unbounded {pattern.value} {scope.value} cannot be monitored on finite runs: "
                "no finite prefix of a run violates 'eventually P' (an obligation still open when a run ends "
                "is not a violation). Give a bound ('within: K') or a closing scope ('before' or 'between').")
        self.pattern, self.scope, self.within = pattern, scope, within
        self.p, self.s, self.q, self.r = p, s, q, r
        self._inner = _Inner(pattern, p, s, within)

    @property
    def initial(self) -> int:
        if self.scope in (Scope.GLOBALLY, Scope.BEFORE):
            return self._inner.start() * 4 + _ACTIVE
        return _WAITING

    def step(self, q: int, bits: int) -> int:
        if q == VIOL:
            return VIOL
        phase, x = q & 3, q >> 2
        inner, scope = self._inner, self.scope
        if phase == _FINISHED:
            return q
        if phase == _WAITING:
            assert self.q is not None
            opens = self.q(bits) and (scope is Scope.AFTER or not self.r(bits))  # type: ignore[misc]
            if not opens:
                return q
            x = inner.step(inner.start(), bits)
            return VIOL if x == VIOL else x * 4 + _ACTIVE
        if scope in (Scope.BEFORE, Scope.BETWEEN) and self.r(bits):  # type: ignore[misc]
            x = inner.close(x)
            if x == VIOL:
                return VIOL
            return _FINISHED if scope is Scope.BEFORE else _WAITING
        if scope is Scope.BETWEEN and self.q(bits):  # type: ignore[misc]
            x = inner.reopen(x, bits)  # a new obligation (R does not hold here: handled above)
        else:
            x = inner.step(x, bits)
        return VIOL if x == VIOL else x * 4 + _ACTIVE

    @property
    def state_bound(self) -> int:
        return 4 * (self._inner.max_state() + 1)

    def prepare(self, states: Sequence[int]) -> dict[str, np.ndarray]:
        return {name: cond.table(states) for name, cond in
                (("p", self.p), ("s", self.s), ("q", self.q), ("r", self.r)) if cond is not None}

    def step_array(self, q: np.ndarray, at: np.ndarray, prepared: dict[str, np.ndarray]) -> np.ndarray:
        none = np.zeros(len(at), dtype=bool)
        p = prepared["p"][at]
        s = prepared["s"][at] if "s" in prepared else none
        opener = prepared["q"][at] if "q" in prepared else none
        closer = prepared["r"][at] if "r" in prepared else none
        inner, scope = self._inner, self.scope
        phase, x = q & 3, q >> 2

        def active(x_new: np.ndarray) -> np.ndarray:
            return np.where(x_new == VIOL, VIOL, x_new * 4 + _ACTIVE)

        # waiting: the scope may open on this step (and the step is then read in scope)
        opens = opener & (~closer if scope is not Scope.AFTER else True)
        from_waiting = np.where(opens, active(inner.step_array(np.full_like(x, inner.start()), p, s)), q)
        # active: the scope may close on this step (R), else the step is read in scope
        if scope is Scope.BETWEEN:
            stepped = active(np.where(opener, inner.reopen_array(x, p, s), inner.step_array(x, p, s)))
        else:
            stepped = active(inner.step_array(x, p, s))
        if scope in (Scope.BEFORE, Scope.BETWEEN):
            pending = (x != 0) if inner.pattern in (Pattern.EXISTENCE, Pattern.RESPONSE) else np.zeros_like(closer)
            after_close = np.where(pending, VIOL, _FINISHED if scope is Scope.BEFORE else _WAITING)
            stepped = np.where(closer, after_close, stepped)
        out = np.where(phase == _WAITING, from_waiting, np.where(phase == _ACTIVE, stepped, q))
        return np.where(q == VIOL, VIOL, out)

    def describe(self, q: int) -> str:
        if q == VIOL:
            return "viol"
        phase, x = q & 3, q >> 2
        if phase == _WAITING:
            return "out of scope"
        if phase == _FINISHED:
            return "scope over"
        return self._inner.describe(x)

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"name": self.name, "kind": self.pattern.value, "p": self.p.expression,
                               "scope": self.scope.value}
        for key, cond in (("s", self.s), ("q", self.q), ("r", self.r)):
            if cond is not None:
                doc[key] = cond.expression
        if self.within is not None:
            doc["within"] = self.within
        return doc
