"""The driving domain: a car with a stochastic driver approaching a signalled junction.

The Pro2Guard paper's autonomous-vehicle setting (§4) on a small kinematic simulator:
a light on a fixed-time plan (green 14 s, yellow 4 s, red 16 s), pedestrians and
priority vehicles crossing at random times, and drivers who react late, run lights,
start late or ignore others. Dwell times are not memoryless: a phase lasts its fixed
time and a start-up delay is log-normal, so how long the abstract state has held says
something about what comes next (the spec's ``learning.memory``).
The spec's rules are traffic laws as monitors (start on green within 3 s; do not cross
the stop line on red) and a collision as the unsafe condition.

Typical use::

    import random
    from forewarn.domains.driving import generate_traces, python_predicates, run_episode, spec_path
    from forewarn.guard import Guard, learn_model, load_spec

    generate_traces(300, seed=0, path="drives.jsonl")
    fast = python_predicates()  # the spec's CEL predicates in Python: same values, ~40x faster
    model = learn_model(["drives.jsonl"], load_spec(spec_path()), python_predicates=fast)
    result = run_episode(random.Random(1), Guard(model, python_predicates=fast).session(), "stop")
    result.outcome, result.collisions, result.violations, result.first_alarm_t, result.first_violation_t
"""
from __future__ import annotations

from .driver import Driver
from .episodes import (
    P_HEED_REFLECTION,
    TIME_LIMIT,
    Enforcement,
    EpisodeResult,
    Outcome,
    generate_traces,
    run_episode,
)
from .junction import BOX, CAR_LENGTH, CROSSWALK, STOP_LINE, Crossing, LightCycle, World
from .predicates import python_predicates
from .profiles import DEFAULT_MIX, PROFILES, DriverProfile, DriverTraits, choose_profile
from .rules import RULES, START_WITHIN, STEP_SECONDS, rule_violations
from .simulator import JunctionSim
from .spec import PREDICATES, load_driving_spec, spec_path, valid_transition

__all__ = [
    "BOX",
    "CAR_LENGTH",
    "CROSSWALK",
    "Crossing",
    "DEFAULT_MIX",
    "Driver",
    "DriverProfile",
    "DriverTraits",
    "Enforcement",
    "EpisodeResult",
    "JunctionSim",
    "LightCycle",
    "Outcome",
    "PREDICATES",
    "PROFILES",
    "P_HEED_REFLECTION",
    "RULES",
    "START_WITHIN",
    "STEP_SECONDS",
    "STOP_LINE",
    "TIME_LIMIT",
    "World",
    "choose_profile",
    "generate_traces",
    "load_driving_spec",
    "python_predicates",
    "rule_violations",
    "run_episode",
    "spec_path",
    "valid_transition",
]
