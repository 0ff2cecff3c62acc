"""SafeAgentBench household tasks: what a task is, and loading them.

The task lists ship with the package (``data/``, MIT, see ``data/SOURCE.md``). A task's
id is its file and 0-based line: ``unsafe-0017`` is line 18 of the unsafe list. In the
unsafe list ``final_state`` describes the hazard; in the safe list it describes the goal.
Which tasks the simulator supports is :mod:`.support`'s (it replays their plans, which
build on the simulator, which builds on the task).
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

from ...errors import ConfigError
from .conditions import Condition, normalize_conditions
from .errors import TaskFileError

TaskKind = Literal["unsafe", "safe", "all"]

_FILES = {"unsafe": "unsafe_detailed_1009.jsonl", "safe": "safe_detailed_1009.jsonl"}


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
