"""Derive a Forewarn spec from a task's hazard (the paper's Algorithm 1, line 2).

One predicate per condition of the final state, in CEL over ``state``, plus
``holding_<object>`` for every pickupable object of the condition: holding the egg
comes before the egg is in the microwave, which gives the learned chain its
predictive structure. ``unsafe`` is the conjunction of the condition predicates.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from .conditions import LIST_PROPS
from .errors import EmbodiedError
from .objects import kind_of
from .tasks import Task

# (property, value) → name suffix; the rest fall back to "<prop>" / "not_<prop>".
_SUFFIXES: dict[tuple[str, Any], str] = {
    ("isToggled", True): "toggled", ("isToggled", False): "off",
    ("isOpen", True): "open", ("isOpen", False): "closed",
    ("isBroken", True): "broken", ("isBroken", False): "intact",
    ("isFilledWithLiquid", True): "filled", ("isFilledWithLiquid", False): "empty",
    ("isDirty", True): "dirty", ("isDirty", False): "clean",
    ("isSliced", True): "sliced", ("isSliced", False): "unsliced",
    ("isCooked", True): "cooked", ("isCooked", False): "uncooked",
    ("isPickedUp", False): "not_held",
}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake_case(name: str) -> str:
    """``CellPhone`` → ``cell_phone``, ``CD`` → ``cd``."""
    return _CAMEL.sub("_", name).lower()


def predicate_name(object_type: str, prop: str, value: Any) -> str:
    """The predicate name for one condition, e.g. ``microwave_closed``, ``egg_in_microwave``.

    For list properties ``value`` is one receptacle (or content) type.
    """
    obj = snake_case(object_type)
    if prop == "parentReceptacles":
        return f"{obj}_in_{snake_case(value)}"
    if prop == "receptacleObjectIds":
        return f"{obj}_holds_{snake_case(value)}"
    if prop == "isPickedUp" and value is True:
        return f"holding_{obj}"
    suffix = _SUFFIXES.get((prop, value))
    if suffix is None:
        base = snake_case(prop.removeprefix("is"))
        suffix = base if value is True else f"not_{base}" if value is False else f"{base}_{snake_case(str(value))}"
        suffix = re.sub(r"[^a-z0-9_]", "_", suffix)
    return f"{obj}_{suffix}"


def _cel(object_type: str, prop: str, value: Any) -> str:
    field = f"state.objects.{object_type}"
    if prop in LIST_PROPS:
        return f"{json.dumps(value)} in {field}.{LIST_PROPS[prop]}"
    if value is True:
        return f"{field}.{prop}"
    if value is False:
        return f"!{field}.{prop}"
    return f"{field}.{prop} == {json.dumps(value)}"


def derive_spec(task: Task) -> dict[str, Any]:
    """A spec document (plain data, as YAML would hold it) guarding a task's hazard.

    Args:
        task: a task with a final-state condition, ideally a supported one (every
            object it names then exists in every simulator state of the task).

    Returns:
        ``{"name", "description", "predicates": {name: CEL}, "unsafe": CEL, "guard", "learning"}``.

    Raises:
        EmbodiedError: when the task has no final-state condition (or one without properties).
    """
    if not task.final_state:
        raise EmbodiedError(f"task {task.id} has no final_state condition to derive a spec from")
    predicates: dict[str, str] = {}
    condition_names: list[str] = []
    holdable: list[str] = []
    for entry in task.final_state:
        object_type = entry["objectType"]
        if kind_of(object_type).pickupable and object_type not in holdable:
            holdable.append(object_type)
        for prop, value in entry.items():
            if prop == "objectType" or (prop in LIST_PROPS and value is None):
                continue
            for item in value if prop in LIST_PROPS else [value]:
                name = predicate_name(object_type, prop, item)
                predicates.setdefault(name, _cel(object_type, prop, item))
                if name not in condition_names:
                    condition_names.append(name)
    if not condition_names:
        raise EmbodiedError(f"task {task.id}: final_state names objects but no property to check")
    for object_type in holdable:
        predicates.setdefault(f"holding_{snake_case(object_type)}", f"state.objects.{object_type}.isPickedUp")
    return {
        "name": task.id,
        "description": f"{task.risk_category or 'Task'}: {task.instruction}",
        "predicates": predicates,
        "unsafe": " && ".join(condition_names),
        "guard": {"horizon": None, "thresholds": {"reflect": 0.5}, "unseen_state": "ask_human"},
        # the levers that beat counting on these tasks (bench/estimation_levers.py)
        "learning": {"memory": {"dwell": 64, "previous": True}, "shrink": "auto"},
    }


def write_spec(task: Task, path: str | Path) -> Path:
    """Write :func:`derive_spec` of a task as a YAML spec file; returns the path."""
    target = Path(path)
    target.write_text(yaml.safe_dump(derive_spec(task), sort_keys=False, allow_unicode=True), encoding="utf-8")
    return target
