"""The signalled junction: geometry along the ego lane, the light cycle, who crosses when.

Positions are metres along the ego lane, measured at the car's front bumper: the stop
line is at 0, the crosswalk covers 1–5 m and the junction box (the cross road) 6–18 m.
The world is drawn once per run, before the car moves, so the same seed gives the same
light cycle, pedestrians and priority vehicles whatever the driver (or a guard) does.
"""
from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from typing import Literal, NamedTuple

STOP_LINE = 0.0
CROSSWALK = (1.0, 5.0)
BOX = (6.0, 18.0)
CAR_LENGTH = 4.5
CLEAR_X = BOX[1] + CAR_LENGTH  # front position at which the rear bumper leaves the box
ALL_RED = 1.5  # seconds after our red before cross traffic gets green

Color = Literal["green", "yellow", "red"]
CrossingKind = Literal["pedestrian", "cross_traffic", "emergency"]
_NEXT: dict[str, Color] = {"green": "yellow", "yellow": "red", "red": "green"}


def occupies(front: float, zone: tuple[float, float]) -> bool:
    """Whether a car whose front bumper is at ``front`` overlaps ``zone``."""
    return front > zone[0] and front - CAR_LENGTH < zone[1]


@dataclass(frozen=True)
class LightCycle:
    """The ego lane's signal: phases ``(start, end, colour)`` back to back from t = 0."""

    starts: tuple[float, ...]
    colors: tuple[Color, ...]
    ends: tuple[float, ...]

    @classmethod
    def draw(cls, rng: random.Random, horizon: float, *, green: tuple[float, float] = (14.0, 14.0),
             yellow: tuple[float, float] = (4.0, 4.0), red: tuple[float, float] = (16.0, 16.0)) -> LightCycle:
        """A cycle with phase durations uniform in the given ranges, entered at a uniformly random moment.

        By default a fixed-time plan (green 14 s, yellow 4 s, red 16 s), as most signals
        run: how long the light has shown a colour then says when it changes.
        """
        ranges = {"green": green, "yellow": yellow, "red": red}
        means = {c: (lo + hi) / 2 for c, (lo, hi) in ranges.items()}
        u = rng.random() * sum(means.values())
        color: Color = "green"
        for c in ("green", "yellow", "red"):
            if u < means[c]:
                color = c
                break
            u -= means[c]
        first = rng.uniform(*ranges[color])
        t = -rng.uniform(0.0, first)  # how far into its first phase the run starts
        starts: list[float] = []
        colors: list[Color] = []
        ends: list[float] = []
        duration = first
        while t < horizon:
            starts.append(t)
            colors.append(color)
            ends.append(t + duration)
            t += duration
            color = _NEXT[color]
            duration = rng.uniform(*ranges[color])
        return cls(tuple(starts), tuple(colors), tuple(ends))

    def phase(self, t: float) -> int:
        """Index of the phase at time ``t``."""
        return max(0, bisect.bisect_right(self.starts, t) - 1)

    def color(self, t: float) -> Color:
        return self.colors[self.phase(t)]

    def elapsed(self, t: float) -> float:
        """Seconds since the current phase began (may exceed t for the first phase)."""
        return t - self.starts[self.phase(t)]


@dataclass(frozen=True)
class Crossing:
    """Someone crossing the ego lane: seen from ``visible``, in the ego's path ``enter``–``leave``.

    A pedestrian's path is the crosswalk, a vehicle's the junction box. A crossing
    counts as *ahead* of the ego from ``visible`` until it has left.
    """

    kind: CrossingKind
    visible: float
    enter: float
    leave: float

    @property
    def zone(self) -> tuple[float, float]:
        return CROSSWALK if self.kind == "pedestrian" else BOX


class Percept(NamedTuple):
    """What the driver sees at one instant (read back after its reaction delay)."""

    t: float
    color: Color
    phase: int
    light_elapsed: float
    pedestrian_ahead: bool
    pedestrian_in_path: bool
    priority_ahead: bool


@dataclass(frozen=True)
class World:
    """Everything outside the ego car for one run."""

    light: LightCycle
    crossings: tuple[Crossing, ...]

    @classmethod
    def draw(cls, rng: random.Random, horizon: float, *, p_emergency: float = 0.2,
             jaywalk_rate: float = 1 / 150, p_walkers: float = 0.5, cross_gap: float = 3.5) -> World:
        """Draw a run's world.

        Args:
            rng: the world's randomness.
            horizon: seconds to cover.
            p_emergency: probability of one emergency vehicle (siren) crossing during the run.
            jaywalk_rate: pedestrians per second crossing outside the walk phase.
            p_walkers: per red phase of the ego lane (the walk phase), probability of
                pedestrians on the crosswalk.
            cross_gap: mean seconds between cross-traffic vehicles while they have green.
        """
        light = LightCycle.draw(rng, horizon)
        crossings: list[Crossing] = []
        for start, color, end in zip(light.starts, light.colors, light.ends):
            if color != "red":
                continue
            # cross traffic: green for it from ALL_RED after our red until ~3 s before our green
            t = max(start, 0.0) + ALL_RED + rng.uniform(1.0, 2.5)
            while t < end - 3.0:
                occupy = rng.uniform(1.2, 2.2)
                leave = min(t + occupy, end - 0.8)
                crossings.append(Crossing("cross_traffic", max(start + 0.5, t - rng.uniform(2.0, 3.5)), t, leave))
                t = leave + rng.expovariate(1.0 / cross_gap)
            if rng.random() < p_walkers and end - start > 8.0:
                for _ in range(rng.choice((1, 1, 2))):
                    enter = max(start, 0.0) + rng.uniform(1.0, max(1.5, end - max(start, 0.0) - 6.0))
                    crossings.append(Crossing("pedestrian", enter - rng.uniform(0.5, 2.0), enter,
                                              enter + rng.uniform(2.5, 5.0)))
        t = rng.expovariate(jaywalk_rate)
        while t < horizon:
            crossings.append(Crossing("pedestrian", t - rng.uniform(2.0, 4.0), t, t + rng.uniform(2.0, 4.0)))
            t += rng.expovariate(jaywalk_rate)
        if rng.random() < p_emergency:
            enter = rng.uniform(4.0, min(40.0, horizon))
            crossings.append(Crossing("emergency", enter - rng.uniform(4.0, 7.0), enter, enter + rng.uniform(1.5, 2.5)))
        return cls(light, tuple(sorted(crossings, key=lambda c: c.visible)))

    def percept(self, t: float) -> Percept:
        """The world at time ``t`` as a driver (or a sensor) sees it."""
        phase = self.light.phase(t)
        ped_ahead = ped_in_path = prio_ahead = False
        for c in self.crossings:
            if c.visible > t:
                break
            if t >= c.leave:
                continue
            if c.kind == "pedestrian":
                ped_ahead = True
                ped_in_path = ped_in_path or t >= c.enter
            else:
                prio_ahead = True
        return Percept(t, self.light.colors[phase], phase, t - self.light.starts[phase], ped_ahead, ped_in_path,
                       prio_ahead)

    def hit(self, t: float, front: float) -> Crossing | None:
        """The crossing the ego car (front bumper at ``front``) collides with at time ``t``, if any."""
        if front <= CROSSWALK[0] or front - CAR_LENGTH >= BOX[1]:
            return None
        for c in self.crossings:
            if c.visible > t:
                break
            if c.enter <= t < c.leave and occupies(front, c.zone):
                return c
        return None
