"""Runs of the driving agent through the junction, optionally under a guard, and trace files.

:func:`run_episode` follows the paper's Algorithm 2: the guard session observes every
sampled state, the first included. What a non-``allow`` decision does depends on
``enforcement``:

* ``"stop"`` — the guard takes the controls from the driver and applies the emergency
  brake (8 m/s²), holding the car at a standstill for as long as the decision stays
  non-``allow``; then the driver drives on. Braking is not always the safe reaction, so
  the guard leaves the driver alone (1) when the car can no longer stop short of the
  crosswalk: a car braked to a standstill on the crosswalk or in the junction box is in
  the path of the people it should avoid, and clearing the crossing is safer; (2) when
  the risk is mostly that of a rule which demands moving (``start_on_green``: the alarm
  means "you are about to stand too long at a clear green"), since holding the car could
  only make that violation certain. "Mostly" means: that rule's failure probability is
  above every other specific property's (the aggregate ``unsafe`` is not compared). In
  a state the model never saw there is no risk figure to weigh: the guard brakes while
  the car is moving (faster than 0.5 m/s) but does not hold it (a hold might never end).
* ``"reflect"`` — the driver gets a risk-alert prompt at the start of every alarm (a
  non-``allow`` decision after an ``allow`` one) and heeds it with probability
  ``p_heed_reflection`` (:data:`P_HEED_REFLECTION` by default); a driver who heeds drives
  cautiously for the rest of the run (:meth:`~domains.driving.driver.Driver.heed`: slows
  down, stops for yellow and red when it still can, yields to everyone, moves off
  promptly on a clear green).

The trace format is Forewarn's JSONL contract: ``{"id", "steps": [{"state", "action",
"t"}], "meta": {"driver", "outcome", "violations"}}``.
"""
from __future__ import annotations

import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson

from ...errors import ConfigError
from .driver import MAX_DECEL, Driver
from .junction import CROSSWALK, World
from .profiles import DriverProfile, choose_profile
from .rules import MOVING_SPEED, RULES, STEP_SECONDS, rule_violations
from .simulator import JunctionSim

Outcome = Literal["collision", "violation", "cleared", "timeout"]
Enforcement = Literal["stop", "reflect"]

P_HEED_REFLECTION = 0.7  # probability that the driver heeds a reflection prompt
TIME_LIMIT = 60.0  # s
IRREGULAR_STEP = (0.05, 0.2)  # s: range of sampling intervals with irregular=True
START_POSITION = (60.0, 130.0)  # m before the stop line
STOP_EXEMPT = ("start_on_green",)  # properties whose alarms 'stop' does not brake for


class _PropertyValue(Protocol):
    name: str
    p_unsafe: float | None


class _Decision(Protocol):
    @property
    def action(self) -> str: ...


class _Session(Protocol):
    def observe(self, state: dict[str, Any]) -> _Decision: ...


@dataclass
class EpisodeResult:
    """One run through the junction.

    Attributes:
        steps: ``{"state", "t"}`` for the first sample, then ``{"state", "action", "t"}``
            (``action``: the manoeuvre during the interval that led to the state).
        outcome: ``"collision"``, ``"violation"`` (a rule broken, no collision),
            ``"timeout"`` (no violation, junction not cleared within the time limit) or
            ``"cleared"``.
        driver: the driver profile's name.
        events: every violation, ``{"rule", "step", "t"}`` (see :mod:`domains.driving.rules`).
        violations: per rule of :data:`~domains.driving.rules.RULES`, how often it was broken.
        collision_t: time of the collision, if any.
        first_violation_t / first_violation_step: the first violation of anything (a rule
            or a collision).
        first_alarm_t / first_alarm_step: the first non-``allow`` decision, if guarded.
        alarms: samples with a non-``allow`` decision.
        braking_steps: samples after which the guard braked or held the car (``stop``).
        prompts: reflection prompts sent (``reflect``); heeded: whether one was heeded.
        p_heed_reflection: the probability the driver heeded each prompt with.
        sessions: guard sessions used (more than one after restarts on violations).
    """

    steps: list[dict[str, Any]]
    outcome: Outcome
    driver: str
    events: list[dict[str, Any]] = field(default_factory=list)
    violations: dict[str, int] = field(default_factory=dict)
    collision_t: float | None = None
    first_violation_t: float | None = None
    first_violation_step: int | None = None
    first_alarm_t: float | None = None
    first_alarm_step: int | None = None
    alarms: int = 0
    braking_steps: int = 0
    prompts: int = 0
    heeded: bool = False
    p_heed_reflection: float = P_HEED_REFLECTION
    sessions: int = 0

    @property
    def collisions(self) -> int:
        return int(self.collision_t is not None)

    @property
    def duration(self) -> float:
        return float(self.steps[-1]["t"])

    @property
    def advance_warning(self) -> float | None:
        """Seconds between the first alarm and the first violation, when the alarm came strictly first."""
        if self.first_alarm_step is None or self.first_violation_step is None:
            return None
        if self.first_alarm_step >= self.first_violation_step:
            return None
        assert self.first_alarm_t is not None and self.first_violation_t is not None
        return self.first_violation_t - self.first_alarm_t


def _guard_brakes(decision: Any, sim: JunctionSim, exempt: Collection[str]) -> bool:
    """Whether 'stop' brakes for a non-allow decision (see the module docstring)."""
    stopping_point = sim.position + sim.speed * sim.speed / (2.0 * MAX_DECEL)
    if stopping_point >= CROSSWALK[0]:
        return False  # cannot stop short of the crossing: standing in it is worse than clearing it
    if getattr(decision, "p_unsafe", 0.0) is None:
        return sim.speed > MOVING_SPEED  # an unseen state: no risk figure; slow down, do not hold
    values: list[_PropertyValue] = list(getattr(decision, "properties", ()) or ())
    risks = {v.name: v.p_unsafe for v in values if v.p_unsafe is not None}
    exempt_risks = [risks[name] for name in exempt if name in risks]
    if not exempt_risks:
        return True  # no per-rule figures: brake
    formulas = {v.name: getattr(v, "formula", "") for v in values}
    others = [p for name, p in risks.items() if name not in exempt and '"unsafe"' not in formulas[name]]
    return not others or max(others) >= max(exempt_risks)


def run_episode(rng: random.Random, session: _Session | None = None, enforcement: Enforcement | None = None, *,
                profile: DriverProfile | None = None, profile_mix: Mapping[str, float] | None = None,
                irregular: bool = False, time_limit: float = TIME_LIMIT,
                p_heed_reflection: float = P_HEED_REFLECTION,
                stop_exempt: Collection[str] = STOP_EXEMPT, restart_after_violation: bool = True) -> EpisodeResult:
    """Drive one car through the junction, optionally guarded.

    The world (light cycle, pedestrians, priority vehicles), the driver and the start are
    drawn first, from streams of their own, so the same ``rng`` seed gives the same
    situation with or without a guard (a paired comparison).

    Args:
        rng: all randomness of the run.
        session: anything with ``observe(state) -> decision``, ``decision.action`` being
            ``"allow"``, ``"reflect"``, ``"ask_human"`` or ``"stop"`` (a Forewarn
            :class:`~guard.runtime.Session`); without ``enforcement`` its decisions are
            only recorded.
        enforcement: ``"stop"`` or ``"reflect"`` (module docstring); any non-``allow``
            action triggers it.
        profile: the driver profile; drawn from ``profile_mix`` when None.
        profile_mix: profile name → weight (:data:`~domains.driving.profiles.DEFAULT_MIX`).
        irregular: sample at uniformly random intervals of 0.05–0.2 s instead of 0.1 s.
        time_limit: seconds before the run ends as a timeout.
        p_heed_reflection: probability of heeding each reflection prompt.
        stop_exempt: properties whose alarms ``stop`` does not brake for.
        restart_after_violation: after a decision reporting a violation that has
            happened (``unsafe_now``), go on with a fresh session of the same guard
            (``session.guard.session()``, when the session has one) instead of the
            absorbed one. Decisions reporting a past violation never trigger enforcement.

    Raises:
        ConfigError: an unknown ``enforcement``, a probability outside [0, 1], a
            non-positive time limit or an unknown profile name in ``profile_mix``.
    """
    if enforcement not in (None, "stop", "reflect"):
        raise ConfigError(f"enforcement={enforcement!r}; expected None, 'stop' or 'reflect'")
    if not 0.0 <= p_heed_reflection <= 1.0:
        raise ConfigError(f"p_heed_reflection={p_heed_reflection!r} must be a probability in [0, 1]")
    if not time_limit > 0.0:
        raise ConfigError(f"time_limit={time_limit!r} must be > 0 seconds")
    chosen = profile if profile is not None else choose_profile(rng, profile_mix)
    world_rng, driver_rng, clock_rng, heed_rng = (random.Random(rng.getrandbits(64)) for _ in range(4))
    traits = chosen.sample(driver_rng)
    world = World.draw(world_rng, time_limit + 5.0)
    driver = Driver(traits, driver_rng)
    sim = JunctionSim(world, driver, position=-world_rng.uniform(*START_POSITION),
                      speed=traits.desired_speed * world_rng.uniform(0.85, 1.0))

    steps: list[dict[str, Any]] = []
    t = 0.0
    k = 0
    alarms = braking = prompts = restarts = 0
    heeded = alarmed_before = False
    first_alarm: tuple[int, float] | None = None
    timed_out = False
    while True:
        state = sim.state()
        step: dict[str, Any] = {"state": state, "t": round(t, 4)}
        if steps:
            step["action"] = sim.maneuver
        steps.append(step)
        decision = session.observe(state) if session is not None else None
        alarm = decision is not None and decision.action != "allow"
        if alarm:
            alarms += 1
            if first_alarm is None:
                first_alarm = (len(steps) - 1, step["t"])
        if sim.collided or sim.cleared:
            break
        if t >= time_limit - 1e-9:
            timed_out = True
            break
        if alarm and getattr(decision, "unsafe_now", False):
            # A rule has just been broken: nothing left to prevent, and the session's
            # product is absorbed in viol (it would say "stop" for ever). Monitoring
            # goes on with a fresh session, as a deployed guard would after reporting.
            alarm = False
            restart = getattr(getattr(session, "guard", None), "session", None)
            if restart_after_violation and restart is not None:
                session = restart()
                restarts += 1
        brake = False
        if alarm and enforcement == "stop":
            brake = _guard_brakes(decision, sim, stop_exempt)
            braking += brake
        elif alarm and enforcement == "reflect" and not alarmed_before:
            prompts += 1
            if not heeded and heed_rng.random() < p_heed_reflection:
                heeded = True
                driver.heed(t)
        alarmed_before = alarm
        k += 1
        t = k * STEP_SECONDS if not irregular else t + clock_rng.uniform(*IRREGULAR_STEP)
        sim.advance(t, brake=brake)

    events = rule_violations(steps)
    counts = {rule: sum(e["rule"] == rule for e in events) for rule in RULES}
    collision = next((e for e in events if e["rule"] == "collision"), None)
    outcome: Outcome
    if collision is not None:
        outcome = "collision"
    elif events:
        outcome = "violation"
    elif timed_out:
        outcome = "timeout"
    else:
        outcome = "cleared"
    first = events[0] if events else None
    return EpisodeResult(
        steps=steps, outcome=outcome, driver=chosen.name, events=events, violations=counts,
        collision_t=collision["t"] if collision else None,
        first_violation_t=first["t"] if first else None, first_violation_step=first["step"] if first else None,
        first_alarm_t=first_alarm[1] if first_alarm else None, first_alarm_step=first_alarm[0] if first_alarm else None,
        alarms=alarms, braking_steps=braking, prompts=prompts, heeded=heeded, p_heed_reflection=p_heed_reflection,
        sessions=restarts + (session is not None))


def generate_traces(n_runs: int, seed: int, path: str | Path, *, irregular: bool = False,
                    profile_mix: Mapping[str, float] | None = None) -> int:
    """Write unguarded runs as a Forewarn trace file (JSONL, one run a line, streamed).

    Run ``n`` is seeded from ``(seed, n)`` alone, so it does not change with ``n_runs``.

    Args:
        n_runs: runs to write (at least 1).
        seed: base seed.
        path: the file to (over)write.
        irregular: sample at random 0.05–0.2 s intervals (resample before learning).
        profile_mix: driver profile name → weight; the default mix when None.

    Returns:
        The number of runs written. Each line is ``{"id": "drive-<seed>-<n>", "steps":
        [...], "meta": {"driver", "outcome", "violations": [{"rule", "step", "t"}],
        "seed"}}``.
    """
    if n_runs < 1:
        raise ConfigError(f"n_runs={n_runs!r} must be at least 1")
    written = 0
    with open(path, "wb") as out:
        for n in range(n_runs):
            result = run_episode(random.Random(f"driving:{seed}:{n}"), irregular=irregular,
                                 profile_mix=profile_mix)
            record = {"id": f"drive-{seed}-{n}", "steps": result.steps,
                      "meta": {"driver": result.driver, "outcome": result.outcome, "violations": result.events,
                               "seed": seed}}
            out.write(orjson.dumps(record))
            out.write(b"\n")
            written += 1
    return written
