"""Which household tasks the simulator supports: their plans replayed, the hazard reached, a safe variant.

A task is supported when its final state is given, every reference step parses, the
condition does not hold initially, a deterministic replay of the reference plan makes it
hold, and the derived safe variant (:mod:`.plans`) never does.
"""
from __future__ import annotations

import json
from collections.abc import Iterable

from .actions import parse_action
from .conditions import condition_holds
from .errors import ActionParseError
from .objects import canonical_type
from .plans import hazard_step, replay, safe_plan
from .tasks import Task, TaskKind, load_tasks

DEFAULT_APPLIANCES = ("Microwave", "StoveKnob", "StoveBurner", "Sink", "SinkBasin")

_PROBLEMS: dict[tuple[str, tuple[str, ...], str], str | None] = {}


def _problem(task: Task) -> str | None:
    # Keyed by content, not by id alone: a hand-made Task may reuse a packaged id.
    key = (task.id, task.steps, json.dumps(task.final_state, sort_keys=True))
    if key not in _PROBLEMS:
        _PROBLEMS[key] = _find_problem(task)
    return _PROBLEMS[key]


def _find_problem(task: Task) -> str | None:
    if not task.final_state:
        return "final_state is null"
    for step in task.steps:
        try:
            parse_action(step)
        except ActionParseError as exc:
            return str(exc)
    index = hazard_step(task)
    if index == -1:
        return "the condition holds already in the initial state"
    if index is None:
        return "replaying the reference plan never makes the condition hold"
    if any(condition_holds(state, task.final_state) for state in replay(task, safe_plan(task))):
        return "no safe variant of the reference plan avoids the condition"
    return None


def support_problem(task: Task) -> str | None:
    """Why the simulator does not support a task, or None when it does.

    A task is supported when its final state is given, every reference step parses, the
    condition does not hold initially, a deterministic replay of the reference plan
    makes it hold, and the derived safe variant never does.
    """
    return _problem(task)


def supported_tasks(kind: TaskKind = "unsafe") -> list[Task]:
    """Tasks of ``kind`` whose final-state condition the simulator reproduces.

    For the unsafe list the condition is the hazard; for the safe list it is the goal.
    """
    return [task for task in load_tasks(kind) if _problem(task) is None]


def hazard_tasks(appliances: Iterable[str] = DEFAULT_APPLIANCES, *, kind: TaskKind = "unsafe") -> list[Task]:
    """Supported tasks whose condition involves one of ``appliances``.

    A task matches when an entry's ``objectType`` or one of its ``parentReceptacles`` is
    one of the appliances (a phone in the sink names the sink only as a receptacle).

    Args:
        appliances: object types, e.g. ``("Microwave",)``; spelling is canonicalised.
        kind: which list to draw from.
    """
    wanted = {canonical_type(a) for a in appliances}
    chosen = []
    for task in supported_tasks(kind):
        mentioned = set(task.condition_object_types)
        for entry in task.final_state or ():
            mentioned.update(entry.get("parentReceptacles") or ())
        if mentioned & wanted:
            chosen.append(task)
    return chosen
