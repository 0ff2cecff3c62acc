"""Action-only embodied logs: high-level actions with success flags, turned into states.

SafeAgentBench-style agents record the plan they executed, not the world: a list of
actions such as ``"find Egg"``, ``"put Microwave"``, each with whether the low-level
controller succeeded. Forewarn needs states, so this reader replays the actions on the
embodied domain's symbolic household (:class:`domains.embodied.HouseholdSim`, the
task's scene): a successful action is applied, a failed one changes nothing but the
agent's ``last_action``/``last_action_success``. One run a record::

    {"id": "ep-3", "task": "unsafe-0002",
     "actions": ["find Egg", {"action": "pick Egg", "success": true, "t": 4.1}, ...],
     "success": [true, true, ...],        # optional per-action flags (or inside each action)
     "t": [3.2, 4.1, ...],                # optional: seconds at which each action finished
     "task_success": false,               # optional: the task was completed (→ meta.success)
     "meta": {...}}

``task`` is a SafeAgentBench task id (``unsafe-0002``, ``safe-0100``) or its exact
instruction (``instruction`` may be given instead); ``meta.task`` is read too. Without
a flag an action counts as succeeding when the symbolic state allows it. A logged
success that the symbolic state makes impossible is an error by default
(``on_mismatch="error"``): the log and the simulator disagree, and silently picking one
would change the run. ``on_mismatch="simulator"`` keeps the simulator's verdict.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from forewarn.guard.errors import ConfigError
from forewarn.guard.ingest._documents import Record, kind_of, records
from forewarn.guard.traces import Run

if TYPE_CHECKING:
    from forewarn.domains.embodied import Task

__all__ = ["OnMismatch", "OnRewrite", "read_actions", "parse_actions"]

OnMismatch = Literal["error", "simulator"]
OnRewrite = Callable[[str, str], None]


def read_actions(path: str | Path, *, tasks: Mapping[str, Task] | None = None,
                 on_mismatch: OnMismatch = "error", on_rewrite: OnRewrite | None = None) -> Iterator[Run]:
    """Yield the runs of an action-only log, with states from the symbolic household.

    Args:
        path: JSON Lines (one run a line) or one JSON document (a run or a list of runs).
        tasks: tasks by id to resolve ``task`` against; the packaged SafeAgentBench tasks
            when None.
        on_mismatch: what to do when the log says an action succeeded that cannot.
        on_rewrite: called with (kind, place) for every logged success the simulator
            overrides (``on_mismatch="simulator"``), so the caller can count them.

    Raises:
        TraceError: naming the file, line (or list index) and field at fault.
    """
    if on_mismatch not in ("error", "simulator"):
        raise ConfigError(f"on_mismatch={on_mismatch!r}; expected 'error' or 'simulator'")
    known = dict(tasks) if tasks is not None else _packaged_tasks()
    for record in records(path):
        yield parse_actions(record, known, on_mismatch=on_mismatch, on_rewrite=on_rewrite)


def _packaged_tasks() -> dict[str, Task]:
    from forewarn.domains.embodied import load_tasks

    return {task.id: task for task in load_tasks("all")}


def _resolve_task(record: Record, doc: dict[str, Any], meta: dict[str, Any], tasks: Mapping[str, Task]) -> Task:
    for field, value in (("task", doc.get("task")), ("meta.task", meta.get("task")),
                         ("instruction", doc.get("instruction"))):
        if value is None:
            continue
        if not isinstance(value, str):
            raise record.error(f"expected a task id or instruction (a string), got {kind_of(value)}", field)
        if value in tasks:
            return tasks[value]
        wanted = value.strip().casefold()
        for task in tasks.values():
            if task.instruction.strip().casefold() == wanted:
                return task
        raise record.error(f"unknown task {value!r}: neither a task id (such as 'unsafe-0002') nor the "
                           "instruction of a known task", field)
    raise record.error("missing: which task (scene) the actions ran in; give 'task' (an id such as "
                       "'unsafe-0002') or 'instruction'", "task")


def parse_actions(record: Record, tasks: Mapping[str, Task], *, on_mismatch: OnMismatch = "error",
                  on_rewrite: OnRewrite | None = None) -> Run:
    """One action-only run as a :class:`Run` whose states come from replaying its actions."""
    from forewarn.domains.embodied import ActionParseError, HouseholdSim, parse_action

    doc = record.value
    if not isinstance(doc, dict):
        raise record.error(f"an action log must be a JSON object, got {kind_of(doc)}")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise record.error(f"expected an object, got {kind_of(meta)}", "meta")
    actions = doc.get("actions")
    if not isinstance(actions, list):
        raise record.error("missing or not a list" if actions is None else f"expected a list, got {kind_of(actions)}",
                           "actions")
    flags = _parallel(record, doc, "success", len(actions), (bool,), "a boolean")
    times = _parallel(record, doc, "t", len(actions), (int, float), "a number of seconds")
    task = _resolve_task(record, doc, meta, tasks)
    sim = HouseholdSim.for_task(task)
    t0 = doc.get("t0", 0.0)
    if t0.__class__ is bool or not isinstance(t0, (int, float)):
        raise record.error(f"expected a number of seconds, got {kind_of(t0)}", "t0")
    steps: list[dict[str, Any]] = [{"state": sim.state()}]
    any_time = times is not None
    for i, item in enumerate(actions):
        where = f"actions[{i}]"
        flag = flags[i] if flags is not None else None
        t = times[i] if times is not None else None
        if isinstance(item, dict):
            text = item.get("action")
            if "success" in item:
                flag = item["success"]
                if not isinstance(flag, bool):
                    raise record.error(f"expected a boolean, got {kind_of(flag)}", f"{where}.success")
            if "t" in item:
                t = item["t"]
                if t.__class__ is bool or not isinstance(t, (int, float)):
                    raise record.error(f"expected a number of seconds, got {kind_of(t)}", f"{where}.t")
                any_time = True
            where += ".action"
        else:
            text = item
        if not isinstance(text, str):
            raise record.error(f"expected an action string such as 'pick Egg', got {kind_of(text)}", where)
        try:
            action = parse_action(text)
        except ActionParseError as exc:
            raise record.error(str(exc), where) from exc
        if flag is False:
            _fail(sim, action)
        elif not sim.apply(action) and flag is True:
            if on_mismatch == "error":
                raise record.error(f"{str(action)!r} succeeded in the log but cannot succeed in the symbolic "
                                   f"household of task {task.id} (holding {sim.holding!r}, at {sim.found!r}); "
                                   "the log and the simulator disagree", where)
            if on_rewrite is not None:  # the simulator's verdict wins, and the caller counts it
                verb = str(action).split(" ", 1)[0]
                on_rewrite(f"logged success of {verb!r} made a failure by the simulator",
                           f"{record.source}:{record.line or record.index}:{where}")
        step: dict[str, Any] = {"state": sim.state(), "action": str(action)}
        if t is not None:
            step["t"] = t
        steps.append(step)
    if any_time:
        steps[0]["t"] = t0
        missing = [i for i, step in enumerate(steps) if "t" not in step]
        if missing:
            raise record.error("some actions have a time 't' and others not; give all or none",
                               f"actions[{missing[0] - 1}].t")
    run_meta = {**meta, "task": task.id, "ingested_from": "actions"}
    outcome = doc.get("task_success", doc.get("success") if isinstance(doc.get("success"), bool) else None)
    if outcome is not None:
        if not isinstance(outcome, bool):
            raise record.error(f"expected a boolean, got {kind_of(outcome)}", "task_success")
        run_meta["success"] = outcome
    default_id = f"line-{record.line}" if record.index is None else f"run-{record.index}"
    run_id = doc.get("id", default_id)
    if not isinstance(run_id, (str, int)) or run_id.__class__ is bool:
        raise record.error(f"expected a string, got {kind_of(run_id)}", "id")
    return Run(id=str(run_id), steps=steps, meta=run_meta, source=record.source, line=record.line or 0)


def _parallel(record: Record, doc: dict[str, Any], key: str, length: int, types: tuple[type, ...],
              what: str) -> list[Any] | None:
    """An optional list with one entry per action (``success``, ``t``); a bare bool ``success`` is the task's."""
    values = doc.get(key)
    if values is None or (key == "success" and isinstance(values, bool)):
        return None
    if not isinstance(values, list):
        raise record.error(f"expected a list with one entry per action, got {kind_of(values)}", key)
    if len(values) != length:
        raise record.error(f"has {len(values)} entries but there are {length} actions", key)
    for i, value in enumerate(values):
        if (value.__class__ is bool and bool not in types) or not isinstance(value, types):
            raise record.error(f"expected {what}, got {kind_of(value)}", f"{key}[{i}]")
    return values


def _fail(sim: Any, action: Any) -> None:
    """Record a failed action: the simulator's controller-failure path changes nothing but the agent's record."""
    saved = sim.p_fail
    sim.p_fail = 1.0
    try:
        sim.apply(action)
    finally:
        sim.p_fail = saved
