"""The object graph of a household scene and the physics that settles it after an action.

Objects are keyed by type (one per type, as SafeAgentBench refers to types); each has a
direct parent receptacle, so nesting (an egg in a bowl in a microwave) is a chain and
AI2-THOR's ``parentReceptacles`` is the chain of ancestors.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .actions import parse_action
from .errors import ActionParseError
from .objects import (
    ALWAYS_PRESENT,
    derived_type,
    kind_of,
    linked_types,
    structural_parent,
)

_HEATERS = ("Microwave", "StoveBurner", "Toaster")


@dataclass
class ObjectState:
    """Mutable state of one object; its capabilities live in its :class:`Kind`."""

    type: str
    parent: str | None = None
    present: bool = True  # False for a slice that has not been cut yet
    picked_up: bool = False
    open: bool = False
    toggled: bool = False
    broken: bool = False
    filled: bool = False
    liquid: str | None = None
    dirty: bool = False
    sliced: bool = False
    cooked: bool = False
    temperature: str = "RoomTemp"


Objects = dict[str, ObjectState]


def initially_open(steps: Iterable[str]) -> set[str]:
    """Openable receptacles a plan puts into before ever opening them.

    The reference plans were valid in their AI2-THOR scene, so such a receptacle must
    have stood open there (SafeAgentBench's ``put microwave`` without ``open``).
    """
    opened: set[str] = set()
    result: set[str] = set()
    for text in steps:
        try:
            action = parse_action(text)
        except ActionParseError:
            continue
        if action.verb == "open" and action.target:
            opened.add(action.target)
        elif action.verb == "put" and action.target and action.target not in opened \
                and kind_of(action.target).openable:
            result.add(action.target)
    return result


def build_objects(object_types: Iterable[str], open_types: Iterable[str] = ()) -> Objects:
    """The initial objects of a scene.

    ``Floor`` and ``CounterTop``, the partners of fixtures (a burner's knob) and the
    slices of sliceable food are added; carryable things start on the counter, slices
    start absent, room lights start on, ``open_types`` start open.
    """
    wanted: dict[str, None] = dict.fromkeys(ALWAYS_PRESENT)
    for name in object_types:
        wanted[name] = None
        wanted.update(dict.fromkeys(linked_types(name)))
        fixture = structural_parent(name)
        if fixture is not None:
            wanted[fixture] = None
    # Slices exist from the start, absent until cut, so a spec may always name them.
    derived = {derived_type(name) for name in wanted if kind_of(name).sliceable}
    wanted.update(dict.fromkeys(sorted(derived)))
    opened = set(open_types)
    objects: Objects = {}
    for name in wanted:
        kind = kind_of(name)
        obj = ObjectState(name, present=name not in derived, toggled=kind.starts_on)
        if name not in derived:
            obj.parent = structural_parent(name) or ("CounterTop" if kind.pickupable else None)
        obj.open = kind.openable and name in opened
        objects[name] = obj
    return objects


def ancestors(objects: Objects, name: str) -> list[str]:
    """Receptacles an object is in, innermost first (AI2-THOR's parentReceptacles)."""
    chain: list[str] = []
    parent = objects[name].parent
    while parent is not None and parent not in chain and parent in objects:
        chain.append(parent)
        parent = objects[parent].parent
    return chain


def inside_closed(objects: Objects, name: str) -> str | None:
    """The closed receptacle an object is shut in, or None."""
    for parent in ancestors(objects, name):
        if kind_of(parent).openable and not objects[parent].open:
            return parent
    return None


def objects_json(objects: Objects) -> dict[str, Any]:
    """The objects as JSON-able data, with AI2-THOR's property names.

    Capabilities (pickupable, openable, ...) are static per type and left out: they
    would double every logged state and no predicate needs them at run time.
    """
    contents: dict[str, list[str]] = {name: [] for name in objects}
    for name, obj in objects.items():
        if obj.parent in contents and obj.present:
            contents[obj.parent].append(name)
    out: dict[str, Any] = {}
    for name, obj in objects.items():
        out[name] = {
            "objectType": name, "present": obj.present, "isPickedUp": obj.picked_up,
            "isOpen": obj.open, "isToggled": obj.toggled,
            "parentReceptacles": ancestors(objects, name), "receptacleObjects": contents[name],
            "isBroken": obj.broken, "isFilledWithLiquid": obj.filled, "fillLiquid": obj.liquid,
            "isDirty": obj.dirty, "isSliced": obj.sliced, "isCooked": obj.cooked,
            "temperature": obj.temperature,
        }
    return out


def settle(objects: Objects) -> None:
    """Apply the physics of running appliances to everything in them.

    A running, closed microwave, a lit burner or a running toaster heats (and cooks)
    what is in it; a closed fridge chills; a running coffee machine fills the cup in
    it; a running faucet fills and rinses what is in the sink basin.
    """
    faucet_on = "Faucet" in objects and objects["Faucet"].toggled
    for name, obj in objects.items():
        if not obj.present:
            continue
        chain = ancestors(objects, name)
        heated = any(
            h in chain and objects[h].toggled and (h != "Microwave" or not objects[h].open)
            for h in _HEATERS if h in objects
        )
        if heated:
            obj.temperature = "Hot"
            if kind_of(name).cookable:
                obj.cooked = True
        elif "Fridge" in chain and not objects["Fridge"].open:
            obj.temperature = "Cold"
        if name == "Candle" and obj.toggled:
            obj.temperature = "Hot"
        parent = chain[0] if chain else None
        if kind_of(name).fillable and not obj.broken:
            if parent == "CoffeeMachine" and objects[parent].toggled:
                obj.filled, obj.liquid = True, "coffee"
            elif parent == "SinkBasin" and faucet_on:
                obj.filled, obj.liquid = True, "water"
        if parent == "SinkBasin" and faucet_on:
            obj.dirty = False
