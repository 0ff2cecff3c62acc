"""Action-only logs: high-level actions with success flags, turned into states.

Some agents record the plan they executed, not the world: a list of actions such as
``"find Egg"``, ``"put Microwave"``, each with whether the low-level controller
succeeded. Forewarn needs states, so this reader replays the actions in a *world* (an
:class:`ActionWorld`: a domain's simulator, such as the embodied domain's symbolic
household, ``forewarn.domains.embodied.HouseholdWorld``): a successful action is
applied, a failed one changes nothing but the agent's record of it. One run a record::

    {"id": "ep-3", "task": "unsafe-0002",
     "actions": ["find Egg", {"action": "pick Egg", "success": true, "t": 4.1}, ...],
     "success": [true, true, ...],        # optional per-action flags (or inside each action)
     "t": [3.2, 4.1, ...],                # optional: seconds at which each action finished
     "task_success": false,               # optional: the task was completed (→ meta.success)
     "meta": {...}}

``task`` names the world's task (its id, or its exact instruction; ``instruction`` may
be given instead); ``meta.task`` is read too. Without a flag an action counts as
succeeding when the world allows it. A logged success that the world makes impossible
is an error by default (``on_mismatch="error"``): the log and the simulator disagree,
and silently picking one would change the run. ``on_mismatch="simulator"`` keeps the
simulator's verdict.

This module knows no domain (the layers of docs/architecture.md): the world is passed in,
or set once for the process with :func:`use_world` (the ``forewarn`` command sets the
household's).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...errors import ConfigError, InputError, TraceError
from ..traces import Run
from ._documents import Record, kind_of, records
from .formats import LogFormat, Reading, not_an_object
from .worlds import ActionWorld, OnMismatch, default_world

OnRewrite = Callable[[str, str], None]


def read_actions(path: str | Path, world: ActionWorld | None = None, *, on_mismatch: OnMismatch = "error",
                 on_rewrite: OnRewrite | None = None) -> Iterator[Run]:
    """Yield the runs of an action-only log, with states from replaying them in ``world``.

    Args:
        path: JSON Lines (one run a line) or one JSON document (a run or a list of runs).
        world: where the actions are replayed; :func:`default_world` when None.
        on_mismatch: what to do when the log says an action succeeded that cannot.
        on_rewrite: called with (kind, place) for every logged success the simulator
            overrides (``on_mismatch="simulator"``), so the caller can count them.

    Raises:
        TraceError: naming the file, line (or list index) and field at fault.
    """
    if on_mismatch not in ("error", "simulator"):
        raise ConfigError(f"on_mismatch={on_mismatch!r}; expected 'error' or 'simulator'")
    resolved = world if world is not None else default_world()
    for record in records(path):
        yield parse_actions(record, resolved, on_mismatch=on_mismatch, on_rewrite=on_rewrite)


def _resolve_task(record: Record, doc: dict[str, Any], meta: dict[str, Any], world: ActionWorld) -> str:
    for field, value in (("task", doc.get("task")), ("meta.task", meta.get("task")),
                         ("instruction", doc.get("instruction"))):
        if value is None:
            continue
        if not isinstance(value, str):
            raise record.error(f"expected a task id or instruction (a string), got {kind_of(value)}", field)
        task = world.task(value)
        if task is not None:
            return task
        raise record.error(f"unknown task {value!r}: neither a task id (such as {world.example_task!r}) nor the "
                           "instruction of a known task", field)
    raise record.error(f"missing: which task (scene) the actions ran in; give 'task' (an id such as "
                       f"{world.example_task!r}) or 'instruction'", "task")


def parse_actions(record: Record, world: ActionWorld, *, on_mismatch: OnMismatch = "error",
                  on_rewrite: OnRewrite | None = None) -> Run:
    """One action-only run as a :class:`Run` whose states come from replaying its actions."""
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
    task = _resolve_task(record, doc, meta, world)
    sim = world.start(task)
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
            action = world.parse(text)
        except ValueError as exc:
            raise record.error(str(exc), where) from exc
        if flag is False:
            sim.fail(action)
        elif not sim.apply(action) and flag is True:
            if on_mismatch == "error":
                raise record.error(f"{str(action)!r} succeeded in the log but cannot succeed in {world.name} "
                                   f"of task {task} ({sim.where()}); the log and the simulator disagree", where)
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
    run_meta = {**meta, "task": task, "ingested_from": "actions"}
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


def check_on_mismatch(value: object) -> None:
    """``--on-mismatch`` is ``error`` or ``simulator``; anything else is a one-line error."""
    if value not in ("error", "simulator"):
        raise InputError(f"--on-mismatch: expected 'error' or 'simulator', got {value!r}")


def _why_not(record: Any) -> str | None:
    return not_an_object(record) or (None if "actions" in record else "no 'actions'")


def _read(path: Path, reading: Reading) -> Iterator[Run]:
    check_on_mismatch(reading.on_mismatch)
    world = reading.actions_world()
    for record in records(path, on_bad=reading.bad):
        try:
            yield parse_actions(record, world, on_mismatch=reading.on_mismatch, on_rewrite=reading.summary.mismatch)
        except TraceError as exc:
            reading.handle(exc)


FORMAT = LogFormat("actions", "action-only embodied logs, replayed in a world such as the household", _why_not, _read)
