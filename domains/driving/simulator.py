"""1-D kinematics of the ego car through the junction, and the state a guard sees.

The car moves along its lane with acceleration bounded by the driver's comfort and the
tyre limit (:data:`~domains.driving.driver.MAX_DECEL`); speed never goes negative.
Time advances in sub-steps of at most ``dt`` seconds between the instants the state is
sampled, so irregular sampling does not change the physics. A collision happens when
the car's body overlaps the crosswalk while a pedestrian is on it, or the junction box
while a priority vehicle is in it; the car then stands still.
"""
from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from .driver import MAX_DECEL, Driver
from .junction import BOX, CLEAR_X, CROSSWALK, STOP_LINE, Crossing, World, occupies

_CROSSING_ZONE = (CROSSWALK[0], BOX[1])


class JunctionSim:
    """The ego car, its driver and the world of one run.

    Args:
        world: light cycle and crossings.
        driver: the driving agent.
        position: the front bumper's start position (m, negative: before the stop line).
        speed: start speed (m/s).
        dt: longest integration sub-step (s).
    """

    def __init__(self, world: World, driver: Driver, *, position: float, speed: float, dt: float = 0.1) -> None:
        if not dt > 0.0:
            raise ConfigError(f"dt={dt!r} must be > 0 seconds")
        self.world = world
        self.driver = driver
        self.t = 0.0
        self.position = position
        self.speed = speed
        self.accel = 0.0
        self.dt = dt
        self.collided_with: Crossing | None = None
        self.maneuver = "cruise"
        self._percept = world.percept(0.0)
        driver.see(self._percept)

    @property
    def collided(self) -> bool:
        return self.collided_with is not None

    @property
    def cleared(self) -> bool:
        """The rear bumper has left the junction box."""
        return self.position > CLEAR_X

    def advance(self, until: float, *, brake: bool = False) -> None:
        """Move time on to ``until``; ``brake`` overrides the driver with an emergency brake."""
        world, driver = self.world, self.driver
        while self.t < until - 1e-9:
            dt = min(self.dt, until - self.t)
            if self.collided:
                a = 0.0
            elif brake:
                a = -MAX_DECEL if self.speed > 0.0 else 0.0
                self.maneuver = "emergency_brake" if self.speed > 0.0 else "guard_hold"
            else:
                a = driver.accel(self.t, self.position, self.speed)
                self.maneuver = driver.maneuver
            v = self.speed
            v_next = v + a * dt
            if v_next < 0.0:  # comes to rest within the sub-step
                self.position += v * v / (2.0 * -a)
                v_next = 0.0
            else:
                self.position += (v + v_next) / 2.0 * dt
            self.speed, self.accel = v_next, a
            self.t += dt
            self._percept = world.percept(self.t)
            driver.see(self._percept)
            if not self.collided:
                hit = world.hit(self.t, self.position)
                if hit is not None:
                    self.collided_with = hit
                    self.speed = 0.0
                    self.maneuver = "collision"
        if self.t != until:
            self.t = until
            self._percept = world.percept(until)

    def state(self) -> dict[str, Any]:
        """The concrete state a guard observes (the spec's predicates read it)."""
        p = self._percept
        x = self.position
        # flat on purpose: CEL pays per map it is handed, and every predicate reads these
        return {
            "light": {"color": p.color, "elapsed": round(p.light_elapsed, 2)},
            "position": round(x, 3),
            "speed": round(self.speed, 3),
            "accel": round(self.accel, 2),
            "dist_to_line": round(STOP_LINE - x, 3),  # negative once over the line
            "crossed_line": x > STOP_LINE,
            "in_crossing": occupies(x, _CROSSING_ZONE),
            "priority_vehicle_ahead": p.priority_ahead,
            "pedestrian_ahead": p.pedestrian_ahead,
            "pedestrian_in_path": p.pedestrian_in_path,
            "collision": self.collided,
        }
