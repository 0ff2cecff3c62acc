"""The symbolic household as a world that action-only logs are replayed in.

``forewarn ingest --input-format actions`` (and ``--extractor household``) hand each
logged action to :class:`HouseholdWorld`, an :class:`~forewarn.guard.ingest.worlds.ActionWorld`:
the task's scene is built, a successful action is applied, a failed one changes nothing
but the agent's ``last_action``/``last_action_success``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .actions import Action, parse_action
from .simulator import HouseholdSim
from .tasks import Task, load_tasks


class HouseholdReplay:
    """One run in a task's household scene."""

    def __init__(self, sim: HouseholdSim) -> None:
        self.sim = sim

    def state(self) -> dict[str, Any]:
        return self.sim.state()

    def apply(self, action: Action) -> bool:
        return self.sim.apply(action)

    def fail(self, action: Action) -> None:
        # the simulator's controller-failure path changes nothing but the agent's record
        saved = self.sim.p_fail
        self.sim.p_fail = 1.0
        try:
            self.sim.apply(action)
        finally:
            self.sim.p_fail = saved

    def where(self) -> str:
        return f"holding {self.sim.holding!r}, at {self.sim.found!r}"


class HouseholdWorld:
    """SafeAgentBench tasks (the packaged ones unless given) and their symbolic households."""

    name = "the symbolic household"
    example_task = "unsafe-0002"

    def __init__(self, tasks: Mapping[str, Task] | None = None) -> None:
        self.tasks = dict(tasks) if tasks is not None else {task.id: task for task in load_tasks("all")}

    def task(self, value: str) -> str | None:
        if value in self.tasks:
            return value
        wanted = value.strip().casefold()
        return next((task.id for task in self.tasks.values() if task.instruction.strip().casefold() == wanted), None)

    def parse(self, text: str) -> Action:
        return parse_action(text)  # ActionParseError is a ValueError naming what does not parse

    def start(self, task: str) -> HouseholdReplay:
        return HouseholdReplay(HouseholdSim.for_task(self.tasks[task]))
