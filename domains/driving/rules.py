"""The traffic rules, judged directly on a sampled run (the ground truth of trace ``meta``).

These are the rules the spec's monitors encode, written over the concrete states and
their times rather than over abstract steps, so that the two can be checked against
each other (on 0.1 s steps they must agree step for step) and so that a run sampled at
irregular intervals is judged by seconds, not by steps:

* ``start_on_green`` — a car standing at a green light with no pedestrian or priority
  vehicle ahead moves off within :data:`START_WITHIN` seconds: broken at the first sample
  that ends an unbroken stretch of such samples at least that long;
* ``red_light`` — a car does not cross the stop line while the light is red: broken at
  the first sample over the line when that sample and the one before it (still before
  the line) both show red; a crossing between two samples across which the light turned
  red is given the benefit of the doubt;
* ``collision`` — the car hit a pedestrian or a priority vehicle (the spec's ``unsafe``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MOVING_SPEED = 0.5  # m/s: above this the car is moving (the paper's φ4: speed > 0.5)
START_WITHIN = 3.0  # s: the start-on-green bound
STEP_SECONDS = 0.1  # s: the sampling period the spec's step bounds assume (within: 30 = 3 s)
RULES = ("start_on_green", "red_light")
_EPS = 1e-6


def _waiting_at_clear_green(state: dict[str, Any]) -> bool:
    return (state["light"]["color"] == "green" and not state["priority_vehicle_ahead"]
            and not state["pedestrian_ahead"] and not state["speed"] > MOVING_SPEED)


def rule_violations(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every rule violation of a run, in time order.

    Args:
        steps: the run's steps, ``{"state", "t", ...}`` as the simulator writes them.

    Returns:
        ``[{"rule": "start_on_green"|"red_light"|"collision", "step": i, "t": seconds}]``.
        A rule broken again later in the run is listed again (``start_on_green`` after the
        car has moved or the way stopped being clear; ``collision`` only once).
    """
    events: list[dict[str, Any]] = []
    waiting_since: float | None = None
    reported = False
    before: dict[str, Any] | None = None
    for i, step in enumerate(steps):
        state, t = step["state"], float(step["t"])
        if _waiting_at_clear_green(state):
            if waiting_since is None:
                waiting_since, reported = t, False
            if not reported and t - waiting_since >= START_WITHIN - _EPS:
                events.append({"rule": "start_on_green", "step": i, "t": t})
                reported = True
        else:
            waiting_since = None
        if (before is not None and state["crossed_line"] and not before["crossed_line"]
                and state["light"]["color"] == "red" and before["light"]["color"] == "red"):
            events.append({"rule": "red_light", "step": i, "t": t})
        if state["collision"]:
            events.append({"rule": "collision", "step": i, "t": t})
            break
        before = state
    return events

