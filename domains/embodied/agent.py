"""A noisy simulated LLM agent that works through a household task.

Per episode the agent either intends the hazardous reference plan or acts carefully:
a careful agent previews each step and, when it would complete the hazard, does the
harmless alternative instead (:func:`~domains.embodied.plans.safe_substitute`), which
replays exactly the safe variant of the plan when nothing goes wrong. Like a real agent,
it plans ahead: it does not walk to a place only to do something harmful there (with
the phone in hand it does not find the bowl of water it would drop it into), so its
actions reveal its plan before the hazard, as a real agent's do. On top of that:
random deviations (find/open/close/pick of scene objects), controller failures that it
retries, small repairs a ReAct agent makes (walk back to its target, open the door it
must put through, put down what it picked up by mistake) and, rarely, giving up.
A reflection prompt is heeded with probability ``p_heed_reflection``: the agent turns
careful for the rest of the episode.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from ...errors import ConfigError
from .actions import parse_action
from .objects import kind_of
from .plans import reference_plan, safe_substitute
from .simulator import HouseholdSim
from .tasks import Task


@dataclass(frozen=True)
class AgentProfile:
    """How the simulated agent behaves; the defaults give an unguarded unsafe rate near 40%.

    Attributes:
        p_hazard_intent: probability that an episode follows the hazardous plan.
        p_deviation: per step, probability of an unplanned find/open/close/pick.
        p_fail: per action, probability that the controller fails (the agent retries).
        p_heed_reflection: probability of heeding a reflection prompt.
        p_give_up_on_reflection: probability that an agent which heeds a prompt gives
            up the task rather than carrying on carefully (the cost of a false alarm).
        max_steps: actions per episode before it counts as failed.
        max_retries: retries of an action that keeps failing before the agent gives up.
        p_abandon: per step, probability that the agent gives up on the task.
    """

    p_hazard_intent: float = 0.42
    p_deviation: float = 0.08
    p_fail: float = 0.05
    p_heed_reflection: float = 0.7
    p_give_up_on_reflection: float = 0.2
    max_steps: int = 40
    max_retries: int = 3
    p_abandon: float = 0.004

    def __post_init__(self) -> None:
        for name in ("p_hazard_intent", "p_deviation", "p_fail", "p_heed_reflection", "p_abandon",
                     "p_give_up_on_reflection"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"AgentProfile.{name}={value!r} must be a probability in [0, 1]")
        if self.max_steps < 1:
            raise ConfigError(f"AgentProfile.max_steps={self.max_steps!r} must be at least 1")
        if self.max_retries < 0:
            raise ConfigError(f"AgentProfile.max_retries={self.max_retries!r} must be at least 0")


@dataclass
class _Item:
    action: str
    source: str  # "plan", "prep" (a repair before a plan step) or "safe" (a substitute)
    preps: int = 0  # rounds of repairs already made for this plan step


_MAX_PREP_ROUNDS = 3


class SimulatedAgent:
    """The agent's plan queue and its habits.

    Args:
        task: the task to carry out.
        profile: behaviour parameters.
        rng: randomness for intent, deviations and giving up.
        hazard_intent: force the intent; drawn with ``profile.p_hazard_intent`` when None.
    """

    def __init__(self, task: Task, profile: AgentProfile, rng: random.Random, *,
                 hazard_intent: bool | None = None) -> None:
        self.task = task
        self.profile = profile
        self.rng = rng
        self.hazard_intent = rng.random() < profile.p_hazard_intent if hazard_intent is None else hazard_intent
        self.careful = not self.hazard_intent
        self.abandoned = False
        self._queue: deque[_Item] = deque(_Item(step, "plan") for step in reference_plan(task))
        self._current: _Item | None = None
        self._retries = 0
        self._destination: str | None = None  # what the plan last walked to

    def heed(self) -> None:
        """Take a reflection prompt to heart: act carefully from now on."""
        self.careful = True

    def avoid(self, action: str) -> None:
        """Take a block of ``action`` to heart (the shield, docs/shield.md): act carefully from now on, and drop
        the blocked step if it is the plan's next one rather than propose it again."""
        self.careful = True
        if self._queue and self._queue[0].action == action:
            self._queue.popleft()
            self._retries = 0

    def next_action(self, sim: HouseholdSim) -> str | None:
        """The next action to execute in ``sim``, or None when done or given up."""
        self._current = None
        if self.abandoned or not self._queue:
            return None
        if self.rng.random() < self.profile.p_abandon:
            self.abandoned = True
            return None
        if self.rng.random() < self.profile.p_deviation:
            deviation = self._deviation(sim)
            if deviation is not None:
                return deviation
        while self._queue:
            head = self._queue[0]
            if head.source == "plan" and head.preps < _MAX_PREP_ROUNDS:
                repairs = self._repairs(sim, head.action)
                if repairs:
                    head.preps += 1
                    self._queue.extendleft(_Item(a, "prep") for a in reversed(repairs))
                    head = self._queue[0]
            if self.careful and head.source == "plan" and len(self._queue) > 1:
                errand = self._errand_to_hazard(sim, head.action, self._queue[1].action)
                if errand is not None:  # skip the walk and what it was for: go where it is harmless
                    self._queue.popleft()
                    self._queue.popleft()
                    self._queue.extendleft(_Item(a, "safe") for a in reversed(errand))
                    continue
            if self.careful:
                instead = safe_substitute(sim, head.action, self.task.final_state)
                if instead != [head.action]:
                    self._queue.popleft()
                    self._queue.extendleft(_Item(a, "safe") for a in reversed(instead))
                    continue
            self._current = head
            return head.action
        return None

    def record(self, action: str, success: bool, sim: HouseholdSim) -> None:
        """Learn the outcome of the action just executed in ``sim``."""
        item = self._current
        if item is None or item.action != action:
            return  # a deviation: nothing in the plan depends on it
        if success:
            self._queue.popleft()
            self._retries = 0
            parsed = parse_action(action)
            if parsed.verb == "find":
                self._destination = parsed.target
            return
        if not sim.would_succeed(action):
            # It cannot work from here (the door is already shut, ...): move on.
            self._queue.popleft()
            self._retries = 0
            return
        self._retries += 1
        if self._retries > self.profile.max_retries:
            self.abandoned = True

    def _errand_to_hazard(self, sim: HouseholdSim, step: str, following: str) -> list[str] | None:
        """When ``step`` walks to a place only for ``following`` to complete the hazard there, what a
        careful agent does instead of both (the harmless alternative of ``following``); else None."""
        action = parse_action(step)
        if action.verb != "find" or parse_action(following).verb == "find":
            return None
        there = sim.copy(p_fail=0.0)
        if not there.apply(step):
            return None
        instead = safe_substitute(there, following, self.task.final_state)
        return None if instead == [following] else instead

    def _deviation(self, sim: HouseholdSim) -> str | None:
        present = [t for t in sim.types if sim.has(t)]
        choices = [f"find {t}" for t in present]
        for t in present:
            kind = kind_of(t)
            if kind.openable:
                choices.append(f"{'close' if sim.is_open(t) else 'open'} {t}")
            if kind.pickupable and sim.holding is None:
                choices.append(f"pick {t}")
        return self.rng.choice(choices) if choices else None

    def _repairs(self, sim: HouseholdSim, step: str) -> list[str]:
        """Actions that make ``step`` possible again after a deviation, if any work."""
        action = parse_action(step)
        wanted: list[str] = []
        if action.verb == "pick" and action.target:
            if sim.holding is not None and sim.holding != action.target:
                wanted += ["find CounterTop", "put CounterTop"]  # put the stray thing down
            container = sim.inside_closed(action.target)
            if container is not None:
                wanted += [f"find {container}", f"open {container}"]
        if action.verb in ("drop", "throw", "pour") and action.target is None:
            if self._destination is not None and sim.found != self._destination:
                wanted.append(f"find {self._destination}")
        elif action.target is not None and action.verb != "find":
            if not sim.reachable(action.target):
                wanted.append(f"find {action.target}")
            if action.verb == "put" and kind_of(action.target).openable and not sim.is_open(action.target):
                wanted.append(f"open {action.target}")
        if not wanted:
            return []
        preview = sim.copy(p_fail=0.0)
        return [a for a in wanted if preview.apply(a)]
