"""A stochastic symbolic household simulator, faithful enough to AI2-THOR's object states.

One object per type (SafeAgentBench names objects by type). An action either succeeds
and changes the state, or fails and changes nothing but the agent's ``last_action`` /
``last_action_success``. Failures come from unmet preconditions (you cannot put into a
closed fridge) or, with probability ``p_fail``, from the low-level controller.

Simple physics runs after every successful action: a running, closed microwave, a lit
burner or a running toaster heats and cooks what is in it; a closed fridge chills its
contents; a coffee machine fills the cup standing in it; a running faucet fills and
rinses what is in the sink basin; the stove's knob and burner switch together.
"""
from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...errors import ConfigError
from .actions import Action, parse_action
from .conditions import condition_holds, condition_types
from .errors import ActionParseError
from .objects import derived_type, fixture_group, kind_of, put_target
from .scene import (
    Objects,
    ObjectState,
    ancestors,
    build_objects,
    initially_open,
    inside_closed,
    objects_json,
    settle,
)
from .tasks import Task

__all__ = ["condition_holds", "initially_open"]  # names other modules import through this one

_STOVE = ("StoveBurner", "StoveKnob")


class HouseholdSim:
    """The household: objects keyed by type, the agent's hand and what it has found.

    Args:
        object_types: types present in the scene; ``Floor`` and ``CounterTop``, the
            partners of fixtures (a burner's knob) and the slices of sliceable food are
            added.
        rng: source of controller failures; only drawn from when ``p_fail > 0``.
        p_fail: probability that any action fails although its preconditions hold.
        open_types: openable types that start open.
    """

    def __init__(self, object_types: Iterable[str], *, rng: random.Random | None = None,
                 p_fail: float = 0.0, open_types: Iterable[str] = ()) -> None:
        if not 0.0 <= p_fail <= 1.0:
            raise ConfigError(f"p_fail={p_fail!r} must be a probability in [0, 1]")
        self.rng = rng if rng is not None else random.Random()
        self.p_fail = p_fail
        self._objects: Objects = build_objects(object_types, open_types)
        self._holding: str | None = None
        self._found: str | None = None
        self._last_action: str | None = None
        self._last_success = True

    @classmethod
    def for_task(cls, task: Task, *, rng: random.Random | None = None, p_fail: float = 0.0) -> HouseholdSim:
        """The scene of a task: every type its steps and final state mention.

        Steps that do not parse are ignored here (such a task is not supported anyway).
        """
        types: dict[str, None] = {}
        for text in task.steps:
            try:
                action = parse_action(text)
            except ActionParseError:
                continue
            if action.target:
                types[action.target] = None
        types.update(dict.fromkeys(condition_types(task.final_state or ())))
        return cls(types, rng=rng, p_fail=p_fail, open_types=initially_open(task.steps))

    # ----------------------------------------------------------------- queries

    @property
    def types(self) -> list[str]:
        """Object types in the scene (including slices not cut yet)."""
        return list(self._objects)

    @property
    def holding(self) -> str | None:
        """The type the agent holds, or None."""
        return self._holding

    @property
    def found(self) -> str | None:
        """The type the agent last navigated to, or None."""
        return self._found

    def has(self, object_type: str) -> bool:
        """Whether an object of this type is in the scene now."""
        obj = self._objects.get(object_type)
        return obj is not None and obj.present

    def is_open(self, object_type: str) -> bool:
        """Whether an object of this type is open (False for types not in the scene)."""
        obj = self._objects.get(object_type)
        return obj is not None and obj.open

    def ancestors(self, object_type: str) -> list[str]:
        """Receptacles an object is in, innermost first (AI2-THOR's parentReceptacles)."""
        return ancestors(self._objects, object_type)

    def inside_closed(self, object_type: str) -> str | None:
        """The closed receptacle an object is shut in, or None."""
        return inside_closed(self._objects, object_type)

    def reachable(self, object_type: str) -> bool:
        """Whether the agent can act on an object: held, found, or next to what it found."""
        if object_type == self._holding:
            return True
        if self._holding is not None and self._holding in self.ancestors(object_type):
            return True
        found = self._found
        if found is None or not self.has(object_type):
            return False
        if object_type == found or object_type == derived_type(found) or found == derived_type(object_type):
            return True  # slices lie where the whole was cut
        group = fixture_group(object_type)
        if group is not None and group == fixture_group(found):
            return True
        return found in self.ancestors(object_type) or object_type in self.ancestors(found)

    def hazard(self, final_state: Sequence[Mapping[str, Any]] | None) -> bool:
        """Whether the state satisfies a final-state condition list."""
        return condition_holds(self.state(), final_state)

    def state(self) -> dict[str, Any]:
        """The concrete state as JSON-able data (objects keyed by type, then the agent)."""
        objects = objects_json(self._objects)
        agent = {"holding": self._holding, "found": self._found,
                 "last_action": self._last_action, "last_action_success": self._last_success}
        return {"objects": objects, "agent": agent}

    def copy(self, *, p_fail: float | None = None) -> HouseholdSim:
        """An independent copy for previews; ``p_fail=0.0`` makes it deterministic.

        The copy shares the random generator (it draws only when its ``p_fail > 0``).
        """
        twin = HouseholdSim.__new__(HouseholdSim)
        twin.rng = self.rng
        twin.p_fail = self.p_fail if p_fail is None else p_fail
        twin._objects = {name: replace(obj) for name, obj in self._objects.items()}
        twin._holding, twin._found = self._holding, self._found
        twin._last_action, twin._last_success = self._last_action, self._last_success
        return twin

    def would_succeed(self, action: str | Action) -> bool:
        """Whether an action's preconditions hold now (ignoring controller failures)."""
        return self.copy(p_fail=0.0).apply(action)

    # ----------------------------------------------------------------- actions

    def apply(self, action: str | Action) -> bool:
        """Execute one high-level action.

        Args:
            action: e.g. ``"pick Fork"``, ``"put Microwave"``, ``"turn on StoveKnob"``.

        Returns:
            Whether it succeeded; a failed action leaves the objects unchanged.

        Raises:
            ActionParseError: when the text is not an action at all.
        """
        parsed = action if isinstance(action, Action) else parse_action(action)
        self._last_action = str(parsed)
        ok = not (self.p_fail > 0.0 and self.rng.random() < self.p_fail)
        if ok:
            target = parsed.target
            if target is not None and parsed.verb not in ("drop", "throw") and not self.has(target):
                ok = False
            else:
                ok = getattr(self, f"_do_{parsed.verb.lower()}")(parsed)
        if ok:
            settle(self._objects)
        self._last_success = ok
        return ok

    def _obj(self, name: str) -> ObjectState:
        return self._objects[name]

    def _do_find(self, a: Action) -> bool:
        self._found = a.target
        return True

    def _do_pick(self, a: Action) -> bool:
        name = a.target or ""
        if self._holding is not None or not kind_of(name).pickupable or not self.reachable(name):
            return False
        if self.inside_closed(name) is not None:
            return False
        obj = self._obj(name)
        obj.parent, obj.picked_up, self._holding = None, True, name
        return True

    def _accepts(self, receptacle: str, held: str) -> bool:
        """Whether ``held`` can go into ``receptacle`` (open, not inside ``held`` itself)."""
        if not kind_of(receptacle).receptacle or receptacle == held or not self.has(receptacle):
            return False
        if held in self.ancestors(receptacle):
            return False
        if kind_of(receptacle).openable and not self._obj(receptacle).open:
            return False
        return self.inside_closed(receptacle) is None

    def _release(self, name: str, destination: str) -> None:
        obj = self._obj(name)
        obj.parent, obj.picked_up, self._holding = destination, False, None

    def _do_put(self, a: Action) -> bool:
        held, receptacle = self._holding, a.target or ""
        if held is None or not self.reachable(receptacle) or not self._accepts(receptacle, held):
            return False
        destination = put_target(receptacle)
        if destination != receptacle and not self._accepts(destination, held):
            return False
        self._release(held, destination)
        return True

    def _do_open(self, a: Action) -> bool:
        return self._set_open(a.target or "", True)

    def _do_close(self, a: Action) -> bool:
        return self._set_open(a.target or "", False)

    def _set_open(self, name: str, value: bool) -> bool:
        obj = self._obj(name)
        if not kind_of(name).openable or obj.open == value or not self.reachable(name):
            return False
        obj.open = value
        return True

    def _do_turn_on(self, a: Action) -> bool:
        return self._set_toggled(a.target or "", True)

    def _do_turn_off(self, a: Action) -> bool:
        return self._set_toggled(a.target or "", False)

    def _set_toggled(self, name: str, value: bool) -> bool:
        obj = self._obj(name)
        if not kind_of(name).toggleable and name != "StoveBurner":
            return False
        if obj.toggled == value or not self.reachable(name) or (value and obj.broken):
            return False
        # The knob drives the burner: turning either switches both.
        for part in (_STOVE if name in _STOVE else (name,)):
            if part in self._objects:
                self._objects[part].toggled = value
        return True

    def _do_slice(self, a: Action) -> bool:
        name = a.target or ""
        obj = self._obj(name)
        if not kind_of(name).sliceable or obj.sliced or name == self._holding or not self.reachable(name):
            return False
        obj.sliced = True
        self._spawn_derived(name)
        return True

    def _spawn_derived(self, name: str) -> None:
        piece = self._objects.get(derived_type(name))
        if piece is not None and not piece.present:
            source = self._obj(name)
            piece.present, piece.parent, piece.temperature = True, source.parent, source.temperature
            piece.cooked = source.cooked

    def _do_break(self, a: Action) -> bool:
        name = a.target or ""
        obj = self._obj(name)
        if not kind_of(name).breakable or obj.broken or not self.reachable(name):
            return False
        if name == self._holding:
            self._release(name, "Floor")  # shards do not stay in the hand
        self._shatter(name)
        return True

    def _shatter(self, name: str) -> None:
        obj = self._obj(name)
        obj.broken, obj.filled, obj.liquid = True, False, None
        if name == "Egg":
            self._spawn_derived(name)

    def _do_fillliquid(self, a: Action) -> bool:
        name = a.target or ""
        obj = self._obj(name)
        if not kind_of(name).fillable or obj.broken or not self.reachable(name):
            return False
        obj.filled, obj.liquid = True, a.liquid
        return True

    def _do_emptyliquid(self, a: Action) -> bool:
        name = a.target or ""
        obj = self._obj(name)
        if not obj.filled or not self.reachable(name):
            return False
        obj.filled, obj.liquid = False, None
        return True

    def _do_pour(self, a: Action) -> bool:
        held = self._holding
        if held is None or not self._obj(held).filled:
            return False
        target = a.target or self._found
        if a.target is not None and not self.reachable(a.target):
            return False
        source = self._obj(held)
        if target is not None and target != held and self.has(target):
            receiver = self._obj(target)
            if kind_of(target).fillable and not receiver.broken:
                receiver.filled, receiver.liquid = True, source.liquid
        source.filled, source.liquid = False, None
        return True

    def _do_dirty(self, a: Action) -> bool:
        return self._set_dirty(a.target or "", True)

    def _do_clean(self, a: Action) -> bool:
        return self._set_dirty(a.target or "", False)

    def _set_dirty(self, name: str, value: bool) -> bool:
        obj = self._obj(name)
        if not kind_of(name).dirtyable or obj.dirty == value or not self.reachable(name):
            return False
        obj.dirty = value
        return True

    def _do_cook(self, a: Action) -> bool:
        name = a.target or ""
        obj = self._obj(name)
        if not kind_of(name).cookable or obj.cooked or not self.reachable(name):
            return False
        obj.cooked, obj.temperature = True, "Hot"
        return True

    def _do_drop(self, a: Action) -> bool:
        held = self._holding
        if held is None or (a.target is not None and a.target != held):
            return False
        found = self._found
        # It lands in what the agent stands over if that can take it, else on the floor.
        if found is not None and found != held and self._accepts(found, held):
            destination = put_target(found)
            if destination != found and not self._accepts(destination, held):
                destination = "Floor"
        else:
            destination = "Floor"
        self._release(held, destination)
        if destination == "Floor" and kind_of(held).fragile:
            self._shatter(held)
        return True

    def _do_throw(self, a: Action) -> bool:
        held = self._holding
        if held is None or (a.target is not None and a.target != held):
            return False
        self._release(held, "Floor")
        if kind_of(held).breakable:
            self._shatter(held)
        return True
