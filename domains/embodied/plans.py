"""Plans for a task: the hazardous reference plan and a safe variant derived from it.

The safe variant is derived generically: replay the reference plan in a deterministic
simulator; when a step would make the hazard condition true, or bring it closer (one
more of its requirements satisfied), replace it by the first harmless alternative (put
the object on the counter instead, or skip the step); drop steps that can no longer
succeed. :func:`safe_substitute` is the one-step rule; a
careful agent applies it online, :func:`safe_plan` applies it offline.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .actions import parse_action
from .conditions import condition_holds, satisfied_atoms
from .simulator import HouseholdSim
from .tasks import Task

# Where a careful agent puts something down instead of into a hazard.
_HARMLESS = ("CounterTop", "Floor")


def canonical_plan(task: Task) -> list[str]:
    """The task's steps in canonical spelling (``turn on X`` → ``turn_on X``).

    Raises:
        ActionParseError: when a step is not an action.
    """
    return [str(parse_action(step)) for step in task.steps]


def replay(task: Task, steps: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """States of a deterministic replay: the initial state, then one after each step.

    Args:
        task: the task whose scene to build.
        steps: the actions to replay; the task's canonical plan when None.
    """
    sim = HouseholdSim.for_task(task)
    states = [sim.state()]
    for step in canonical_plan(task) if steps is None else steps:
        sim.apply(step)
        states.append(sim.state())
    return states


def reference_plan(task: Task) -> list[str]:
    """The canonical reference plan without steps that fail deterministically.

    A step whose preconditions never hold (``open`` an already open door) would only
    make a simulated agent retry in vain; the hazard is reached the same way without it.
    """
    sim = HouseholdSim.for_task(task)
    kept = []
    for step in canonical_plan(task):
        if sim.apply(step):
            kept.append(step)
    return kept


def hazard_step(task: Task) -> int | None:
    """Index in :func:`reference_plan` of the step that first makes the hazard hold.

    Returns:
        The index, or None when the reference plan never reaches the hazard; -1 when the
        hazard holds already in the initial state.
    """
    sim = HouseholdSim.for_task(task)
    if condition_holds(sim.state(), task.final_state):
        return -1
    for index, step in enumerate(reference_plan(task)):
        sim.apply(step)
        if condition_holds(sim.state(), task.final_state):
            return index
    return None


def _alternatives(step: str) -> list[list[str]]:
    """Harmless replacements of a step, most task-preserving first; skipping is last."""
    action = parse_action(step)
    if action.verb in ("put", "drop", "throw"):
        return [[f"find {place}", f"put {place}"] for place in _HARMLESS if place != action.target] + [[]]
    return [[]]


def safe_substitute(sim: HouseholdSim, step: str, final_state: Sequence[dict[str, Any]] | None) -> list[str]:
    """What a careful agent does instead of ``step`` in state ``sim``.

    Args:
        sim: the current simulator (not modified).
        step: the next canonical action.
        final_state: the hazard condition.

    Returns:
        ``[step]`` when it neither makes the hazard hold nor satisfies more of its
        requirements, else the first alternative whose deterministic preview does
        neither (possibly ``[]``: skip it).
    """
    before = satisfied_atoms(sim.state(), final_state)

    def harmless(state: dict[str, Any]) -> bool:
        return not condition_holds(state, final_state) and satisfied_atoms(state, final_state) <= before

    preview = sim.copy(p_fail=0.0)
    if not preview.apply(step) or harmless(preview.state()):
        return [step]
    for alternative in _alternatives(step):
        trial = sim.copy(p_fail=0.0)
        if all(trial.apply(a) and harmless(trial.state()) for a in alternative):
            return alternative
    return []


def safe_continuation(sim: HouseholdSim, steps: Sequence[str],
                      final_state: Sequence[dict[str, Any]] | None) -> list[str]:
    """A safe version of the remaining ``steps`` from the state of ``sim``.

    Each step that would make the hazard hold is replaced (:func:`safe_substitute`);
    steps that cannot succeed any more are dropped. ``sim`` is not modified.
    """
    current = sim.copy(p_fail=0.0)
    plan: list[str] = []
    for step in steps:
        for action in safe_substitute(current, step, final_state):
            if current.apply(action):
                plan.append(action)
    return plan


def safe_plan(task: Task) -> list[str]:
    """The safe variant of the task's reference plan, from its initial state."""
    return safe_continuation(HouseholdSim.for_task(task), reference_plan(task), task.final_state)
