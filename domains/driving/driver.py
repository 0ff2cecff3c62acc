"""The simulated driving agent: delayed perception, a go/stop plan, IDM car following.

The driver acts on the world as it was ``reaction`` seconds ago. It keeps a plan per
light phase (stop at the line, or drive on) and yields to pedestrians and priority
vehicles unless its traits say otherwise. Speed follows the Intelligent Driver Model
(Treiber et al.) towards the desired speed, with a standing "obstacle" at the point it
means to stop at, which gives smooth, human-like braking that turns hard when the driver
decided late. A guard's reflection prompt makes the driver cautious (:meth:`Driver.heed`).
"""
from __future__ import annotations

import bisect
import math
import random
from dataclasses import replace

from .junction import BOX, CROSSWALK, STOP_LINE, Percept
from .profiles import DriverTraits

MAX_DECEL = 8.0  # m/s², tyre limit: emergency braking
HARD_DECEL = 6.0  # m/s², the most a driver brakes by choice for a light it had meant to pass
STANDSTILL_GAP = 1.0  # m, IDM s0: the car stops this far before the point it stops at
_FRESH_RED = 3.0  # s: a red younger than this tempts a red-light runner
START_MEDIAN = 0.4  # s: median start-up delay of an attentive driver (log-normal)
START_SIGMA = 0.5


class Driver:
    """One run's driver.

    Args:
        traits: the drawn driver.
        rng: randomness of the driver's own choices during the run (late starts).
    """

    def __init__(self, traits: DriverTraits, rng: random.Random) -> None:
        self.traits = traits
        self.rng = rng
        self.cautious = False
        self._times: list[float] = []
        self._percepts: list[Percept] = []
        self._plan_phase = -1
        self._plan_stop = False
        self._ready_at: float | None = None  # a standing driver moves off from this time on
        self.maneuver = "cruise"

    # -- perception ---------------------------------------------------------------

    def see(self, percept: Percept) -> None:
        """Record what can be seen now (perception is read back after the reaction delay)."""
        self._times.append(percept.t)
        self._percepts.append(percept)

    def _perceived(self, t: float) -> Percept:
        i = bisect.bisect_right(self._times, t - self.traits.reaction + 1e-9) - 1
        return self._percepts[max(i, 0)]

    # -- reflection -----------------------------------------------------------------

    def heed(self, now: float) -> None:
        """Take a risk alert to heart: from now on drive cautiously.

        Attentive (short reaction, no late starts), slower, stop for every yellow and red
        that can still be stopped for with hard braking, yield to everyone; a driver
        waiting at a clear green moves off at once.
        """
        if self.cautious:
            return
        self.cautious = True
        t = self.traits
        self.traits = replace(t, reaction=min(t.reaction, 0.6), desired_speed=min(t.desired_speed, 10.0),
                              yellow_stop_decel=HARD_DECEL, runs_red=False, p_late_start=0.0,
                              yields_to_waiting_pedestrians=True, ignores_pedestrians=False,
                              ignores_priority=False)
        self._plan_phase = -1  # re-plan the current light
        if self._ready_at is not None:
            self._ready_at = min(self._ready_at, now + 0.3)

    # -- control --------------------------------------------------------------------

    def accel(self, t: float, front: float, speed: float) -> float:
        """The driver's acceleration command (m/s²) at time ``t``; sets :attr:`maneuver`."""
        p = self._perceived(t)
        target = self._stop_target(p, front, speed)
        tr = self.traits
        free = tr.max_accel * (1.0 - (speed / tr.desired_speed) ** 4)
        if target is None:
            a = free
        else:
            gap = max(target - front, 0.05)
            braking = speed * speed / (2.0 * math.sqrt(tr.max_accel * tr.comfort_decel))
            s_star = STANDSTILL_GAP + speed * tr.headway + braking  # the IDM's desired gap
            a = free - tr.max_accel * (s_star / gap) ** 2
        a = max(-MAX_DECEL, min(a, tr.max_accel))
        if speed < 0.1 and target is not None:
            # standing with a reason to stand: no creeping towards the line
            self.maneuver = "hold"
            return min(a, 0.0)
        if speed < 0.1 and a > 0.0:
            # moving off: a standing driver needs a moment, and sometimes a long one
            if self._ready_at is None:
                # Start-up delays are right-skewed, not memoryless: log-normal, as measured at
                # signalised junctions (median about 0.4 s after the perceived change here, the
                # perception delay coming on top); a distracted start is log-normal about the
                # geometric middle of the profile's late-start range.
                delay = min(self.rng.lognormvariate(math.log(START_MEDIAN), START_SIGMA), 2.0)
                if self.rng.random() < tr.p_late_start:
                    low, high = tr.late_start
                    delay = min(max(self.rng.lognormvariate(math.log(math.sqrt(low * high)), 0.3), low), high)
                self._ready_at = t + delay
            if t < self._ready_at:
                self.maneuver = "wait"
                return 0.0
            self.maneuver = "start"
            return a
        if speed >= 0.1:
            self._ready_at = None
        if a < -0.5:
            self.maneuver = "brake"
        elif a > 0.3:
            self.maneuver = "accelerate"
        else:
            self.maneuver = "cruise"
        return a

    def _stop_target(self, p: Percept, front: float, speed: float) -> float | None:
        """Where the driver means to stop (a position), or ``None`` to drive on."""
        tr = self.traits
        targets = []
        before_line = front < STOP_LINE - 0.3
        if before_line:
            if self._light_says_stop(p, front, speed):
                targets.append(STOP_LINE)
            if p.pedestrian_ahead and not tr.ignores_pedestrians and (
                    tr.yields_to_waiting_pedestrians or p.pedestrian_in_path):
                targets.append(STOP_LINE)
            if p.priority_ahead and not tr.ignores_priority:
                targets.append(STOP_LINE)
        else:
            if speed < 0.5 and front < CROSSWALK[0] and p.color == "red":
                targets.append(front)  # standing just over the line at red: stay put
            # over the line: stop short of a pedestrian in the lane or a priority vehicle
            if p.pedestrian_in_path and not tr.ignores_pedestrians and front < CROSSWALK[0]:
                targets.append(CROSSWALK[0])
            if p.priority_ahead and not tr.ignores_priority and front < BOX[0]:
                targets.append(BOX[0])
        return min(targets) if targets else None

    def _light_says_stop(self, p: Percept, front: float, speed: float) -> bool:
        """The go/stop plan for the perceived light, made once per phase (before the line)."""
        if p.color == "green":
            return False
        if p.color == "red" and speed < 0.5:
            return True  # nobody runs a red from a standstill: the gamble is not braking
        if p.phase != self._plan_phase:
            tr = self.traits
            distance = max(STOP_LINE - STANDSTILL_GAP - front, 0.1)
            needed = speed * speed / (2.0 * distance)  # deceleration to stop at the line
            if p.color == "yellow":
                stop = needed <= tr.yellow_stop_decel
            elif self._plan_phase == p.phase - 1:
                # the red after a yellow already planned for: keep stopping, or, having meant
                # to pass, brake hard if that still works (a red-light runner does not)
                stop = self._plan_stop or (needed <= HARD_DECEL and not tr.runs_red)
            else:
                gamble = tr.runs_red and p.light_elapsed < _FRESH_RED and needed > 1.0
                stop = not gamble and needed <= MAX_DECEL
            self._plan_phase, self._plan_stop = p.phase, stop
        return self._plan_stop
