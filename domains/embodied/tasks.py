"""SafeAgentBench household tasks: loading, and which ones the simulator supports.

The task lists ship with the package (``data/``, MIT, see ``data/SOURCE.md``). A task's
id is its file and 0-based line: ``unsafe-0017`` is line 18 of the unsafe list. In the
unsafe list ``final_state`` describes the hazard; in the safe list it describes the goal.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

from ...errors import ConfigError
from .actions import parse_action
from .conditions import Condition, condition_holds, normalize_conditions
from .errors import ActionParseError, TaskFileError
from .objects import canonical_type
from .plans import hazard_step, replay, safe_plan

__all__ = ["Task", "TaskKind", "load_tasks", "parse_tasks", "supported_tasks", "support_problem",
           "hazard_tasks", "DEFAULT_APPLIANCES"]

TaskKind = Literal["unsafe", "safe", "all"]

_FILES = {"unsafe": "unsafe_detailed_1009.jsonl", "safe": "safe_detailed_1009.jsonl"}
DEFAULT_APPLIANCES = ("Microwave", "StoveKnob", "StoveBurner", "Sink", "SinkBasin")


@dataclass(frozen=True)
class Task:
    """One household task.

    Attributes:
        id: ``"<kind>-<line index, 4 digits>"``, e.g. ``"unsafe-0002"``.
        instruction: the natural-language instruction.
        steps: reference high-level actions, as written in the data.
        objects: objects the data lists as involved (often incomplete; informative only).
        risk_category: e.g. ``"Fire Hazard"``; empty for safe tasks.
        scene: the AI2-THOR floor plan, e.g. ``"FloorPlan3"``.
        final_state: condition list with canonical type names, or None.
    """

    id: str
    instruction: str
    steps: tuple[str, ...]
    objects: tuple[str, ...] = ()
    risk_category: str = ""
    scene: str = ""
    final_state: list[Condition] | None = field(default=None, compare=False)

    @property
    def kind(self) -> str:
        """``"unsafe"`` or ``"safe"``: which list the task comes from."""
        return self.id.split("-", 1)[0]

    @property
    def condition_object_types(self) -> list[str]:
        """Object types of the final-state entries (not their receptacles), in order."""
        return [entry["objectType"] for entry in self.final_state or ()]


def _task_from_record(record: Any, task_id: str, source: str, line: int) -> Task:
    if not isinstance(record, dict):
        raise TaskFileError(source, line, f"expected a JSON object, got {type(record).__name__}")
    steps = record.get("step")
    if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
        raise TaskFileError(source, line, "field 'step' must be a list of strings")
    if not isinstance(record.get("instruction"), str):
        raise TaskFileError(source, line, "field 'instruction' must be a string")
    raw_final = record.get("final_state")
    try:
        final_state = None if not raw_final else normalize_conditions(raw_final)
    except (ValueError, TypeError) as exc:
        raise TaskFileError(source, line, f"field 'final_state': {exc}") from exc
    objects = record.get("objects") or record.get("involved_objects") or []
    return Task(
        id=task_id,
        instruction=record["instruction"],
        steps=tuple(steps),
        objects=tuple(str(o) for o in objects),
        risk_category=str(record.get("risk_category") or ""),
        scene=str(record.get("scene_name") or ""),
        final_state=final_state,
    )


def parse_tasks(lines: Iterable[str], *, kind: str, source: str = "<tasks>") -> list[Task]:
    """Parse SafeAgentBench JSONL lines into tasks (blank lines are skipped).

    Args:
        lines: the file's lines.
        kind: id prefix, ``"unsafe"`` or ``"safe"``.
        source: file name used in error messages.

    Raises:
        TaskFileError: naming the file and 1-based line of a bad record.
    """
    tasks = []
    for index, text in enumerate(lines):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TaskFileError(source, index + 1, f"not valid JSON: {exc.msg}") from exc
        tasks.append(_task_from_record(record, f"{kind}-{index:04d}", source, index + 1))
    return tasks


@cache
def _load_kind(kind: str) -> tuple[Task, ...]:
    data = resources.files("forewarn.domains.embodied").joinpath("data").joinpath(_FILES[kind])
    text = data.read_text(encoding="utf-8")
    return tuple(parse_tasks(text.splitlines(), kind=kind, source=_FILES[kind]))


def _kinds(kind: str) -> tuple[str, ...]:
    if kind == "all":
        return ("unsafe", "safe")
    if kind not in _FILES:
        raise ConfigError(f"kind={kind!r}; expected 'unsafe', 'safe' or 'all'")
    return (kind,)


def load_tasks(kind: TaskKind = "unsafe") -> list[Task]:
    """The packaged SafeAgentBench tasks (300 unsafe, 300 safe).

    Args:
        kind: ``"unsafe"``, ``"safe"`` or ``"all"`` (unsafe first).
    """
    return [task for k in _kinds(kind) for task in _load_kind(k)]


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
