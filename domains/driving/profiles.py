"""Driver profiles: how the simulated driving agent reacts, chooses and errs.

A profile holds ranges and probabilities; :meth:`DriverProfile.sample` draws one run's
concrete driver from it (:class:`DriverTraits`). The built-in mix is mostly careful
drivers with a tail of aggressive, distracted and reckless ones, so an unguarded fleet
has mostly clean runs, some rule violations and a few collisions.
"""
from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from ...errors import ConfigError

Range = tuple[float, float]


@dataclass(frozen=True)
class DriverTraits:
    """One run's driver, drawn from a profile (all times in seconds, speeds in m/s).

    Attributes:
        profile: the profile's name.
        reaction: perception delay: the driver acts on the world as it was this long ago.
        desired_speed: cruising speed.
        max_accel: comfortable acceleration (m/s²).
        comfort_decel: comfortable deceleration (m/s²), the IDM's ``b``.
        headway: desired time gap (IDM ``T``) to the point the driver means to stop at.
        yellow_stop_decel: the driver stops for a yellow light when that needs at most
            this deceleration, and drives on otherwise.
        runs_red: this run, the driver drives on through a fresh red light it could stop for.
        p_late_start: per standstill, probability of starting late (distracted).
        late_start: range of the extra delay of a late start.
        yields_to_waiting_pedestrians: stops for a pedestrian at the kerb, not only for one
            already in the lane.
        ignores_pedestrians: this run, the driver does not yield to pedestrians at all.
        ignores_priority: this run, the driver does not yield to priority vehicles.
    """

    profile: str
    reaction: float
    desired_speed: float
    max_accel: float
    comfort_decel: float
    headway: float
    yellow_stop_decel: float
    runs_red: bool
    p_late_start: float
    late_start: Range
    yields_to_waiting_pedestrians: bool
    ignores_pedestrians: bool
    ignores_priority: bool


@dataclass(frozen=True)
class DriverProfile:
    """A population of drivers; :meth:`sample` draws one run's :class:`DriverTraits`."""

    name: str
    reaction: Range = (0.7, 1.2)
    desired_speed: Range = (12.0, 14.0)
    max_accel: float = 2.0
    comfort_decel: float = 3.0
    headway: float = 1.2
    yellow_stop_decel: float = 3.5
    p_runs_red: float = 0.0
    p_late_start: float = 0.03
    late_start: Range = (2.5, 5.0)
    yields_to_waiting_pedestrians: bool = True
    p_ignores_pedestrians: float = 0.0
    p_ignores_priority: float = 0.0

    def __post_init__(self) -> None:
        for field in ("p_runs_red", "p_late_start", "p_ignores_pedestrians", "p_ignores_priority"):
            value = getattr(self, field)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"DriverProfile {self.name!r}: {field}={value!r} must be a probability in [0, 1]")
        for field in ("reaction", "desired_speed", "late_start"):
            low, high = getattr(self, field)
            if not 0.0 <= low <= high:
                raise ConfigError(f"DriverProfile {self.name!r}: {field}=({low}, {high}) must be a range "
                                  "0 <= low <= high")

    def sample(self, rng: random.Random) -> DriverTraits:
        """One run's driver (draws a fixed number of values from ``rng``)."""
        return DriverTraits(
            profile=self.name,
            reaction=rng.uniform(*self.reaction),
            desired_speed=rng.uniform(*self.desired_speed),
            max_accel=self.max_accel,
            comfort_decel=self.comfort_decel,
            headway=self.headway,
            yellow_stop_decel=self.yellow_stop_decel,
            runs_red=rng.random() < self.p_runs_red,
            p_late_start=self.p_late_start,
            late_start=self.late_start,
            yields_to_waiting_pedestrians=self.yields_to_waiting_pedestrians,
            ignores_pedestrians=rng.random() < self.p_ignores_pedestrians,
            ignores_priority=rng.random() < self.p_ignores_priority,
        )


PROFILES: dict[str, DriverProfile] = {
    profile.name: profile
    for profile in (
        DriverProfile("cautious", reaction=(0.6, 1.0), desired_speed=(10.0, 12.0), comfort_decel=2.5,
                      headway=1.5, yellow_stop_decel=5.0, p_late_start=0.01),
        DriverProfile("normal"),
        # runs yellows it could stop for, gambles on fresh reds, yields only to pedestrians in the lane
        DriverProfile("aggressive", reaction=(0.5, 0.9), desired_speed=(14.0, 16.5), max_accel=3.0,
                      comfort_decel=4.0, headway=0.8, yellow_stop_decel=2.0, p_runs_red=0.6,
                      p_late_start=0.01, yields_to_waiting_pedestrians=False),
        # slow to perceive, often starts late on green (phone in hand)
        DriverProfile("distracted", reaction=(1.3, 2.3), desired_speed=(11.0, 14.0), p_late_start=0.6,
                      late_start=(2.0, 6.0)),
        DriverProfile("reckless", reaction=(0.5, 0.8), desired_speed=(15.0, 18.0), max_accel=3.5,
                      comfort_decel=5.0, headway=0.6, yellow_stop_decel=1.0, p_runs_red=0.8,
                      p_late_start=0.0, yields_to_waiting_pedestrians=False, p_ignores_pedestrians=0.6,
                      p_ignores_priority=0.6),
    )
}

DEFAULT_MIX: dict[str, float] = {"cautious": 0.12, "normal": 0.45, "aggressive": 0.18, "distracted": 0.15,
                                 "reckless": 0.10}


def resolve_mix(mix: Mapping[str, float] | None) -> list[tuple[DriverProfile, float]]:
    """A profile mix (name → weight) as (profile, weight) pairs; ``None`` is :data:`DEFAULT_MIX`.

    Raises:
        ConfigError: an unknown profile name, a negative weight or weights summing to zero.
    """
    mix = DEFAULT_MIX if mix is None else mix
    pairs = []
    for name, weight in mix.items():
        if name not in PROFILES:
            raise ConfigError(f"unknown driver profile {name!r} in profile_mix; known: {sorted(PROFILES)}")
        if not weight >= 0.0:
            raise ConfigError(f"profile_mix[{name!r}]={weight!r} must be a weight >= 0")
        pairs.append((PROFILES[name], float(weight)))
    if not pairs or sum(w for _, w in pairs) <= 0.0:
        raise ConfigError(f"profile_mix {dict(mix)!r} has no positive weight")
    return pairs


def choose_profile(rng: random.Random, mix: Mapping[str, float] | None = None) -> DriverProfile:
    """Draw a profile from a mix (one value from ``rng``)."""
    pairs = resolve_mix(mix)
    total = sum(w for _, w in pairs)
    u = rng.random() * total
    for profile, weight in pairs:
        u -= weight
        if u < 0.0:
            return profile
    return pairs[-1][0]
