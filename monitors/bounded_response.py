"""k-bounded response, ``G(trigger → F[0,K] response)`` (Pro2Guard Definition 6, counted right).

A trigger at step t is discharged by a response at any step t … t+K; otherwise the
monitor enters ``viol`` on reading step t+K (with K = 0, on step t itself). A step where
trigger and response both hold discharges at once.

Definition 6 as printed enters ``wait(K)`` on the trigger and only reaches ``viol`` from
``wait(0)``, i.e. on step t+K+1: it still accepts a response at t+K+1. Here the state
``wait(r)`` counts the r steps *still allowed* after the current one, so the trigger
step leads to ``wait(K)`` and ``viol`` comes on step t+K, as the formula says.

A new trigger while waiting does not restart the count: the earliest pending trigger
has the earliest deadline, and any response that meets it meets every later trigger
too, so tracking it alone is exact. With ``restart=True`` a new trigger while waiting
(without a response on that step) resets the deadline to K steps after itself — the
weaker rule "within K steps of the latest trigger".
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import VIOL, Condition, Monitor, MonitorError

IDLE = 0


class BoundedResponse(Monitor):
    """States: ``0`` idle, ``r`` in 1..K waiting with r steps left, ``VIOL``."""

    def __init__(self, name: str, trigger: Condition, response: Condition, within: int, *,
                 restart: bool = False) -> None:
        if within < 0:
            raise MonitorError(f"monitor {name!r}: 'within' must be >= 0, got {within}")
        super().__init__(name)
        self.trigger = trigger
        self.response = response
        self.within = within
        self.restart = restart

    @property
    def initial(self) -> int:
        return IDLE

    def step(self, q: int, bits: int) -> int:
        if q == VIOL:
            return VIOL
        if self.response(bits):
            return IDLE
        if q == IDLE or (self.restart and self.trigger(bits)):
            if not self.trigger(bits):
                return IDLE
            return VIOL if self.within == 0 else self.within
        return VIOL if q == 1 else q - 1

    @property
    def state_bound(self) -> int:
        return self.within + 1

    def prepare(self, states: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        return self.trigger.table(states), self.response.table(states)

    def step_array(self, q: np.ndarray, at: np.ndarray, prepared: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        trigger, response = prepared[0][at], prepared[1][at]
        fire = VIOL if self.within == 0 else self.within
        starting = (q == IDLE) | (self.restart & trigger & (q > 0))
        out = np.where(starting, np.where(trigger, fire, IDLE), np.where(q == 1, VIOL, q - 1))
        out = np.where(response, IDLE, out)
        return np.where(q == VIOL, VIOL, out)

    def describe(self, q: int) -> str:
        if q == VIOL:
            return "viol"
        if q == IDLE:
            return "idle"
        return f"wait({q})"

    def to_document(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "bounded_response", "trigger": self.trigger.expression,
                "response": self.response.expression, "within": self.within, "restart": self.restart}
