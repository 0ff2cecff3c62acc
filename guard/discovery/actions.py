"""A step's action as discovery reads it: the parts of ``action`` a predicate can select.

The view is the one predicates read (:func:`guard.actions.action_view`), so a candidate such as
``action.verb == "pick"`` is true on exactly the steps CEL finds it true. Of the view, discovery
proposes predicates on the parsed parts (verb, object, name, words, tool, kind, argument classes,
arguments, whether an action was logged), not on ``raw``, the action as logged, whose parts those are.
"""
from __future__ import annotations

from typing import Any

from ..actions import action_view

SELECTED = ("present", "name", "verb", "object", "words", "tool", "kind", "classes", "args")


def action_columns(actions: list[Any]) -> list[dict[str, Any]]:
    """Each step's action view, without ``raw`` (views of one text action are one object: projected once)."""
    projected: dict[int, dict[str, Any]] = {}
    keep: list[dict[str, Any]] = []  # holds the views, so their ids stay theirs while this runs
    out = []
    for action in actions:
        view = action_view(action)
        part = projected.get(id(view))
        if part is None:
            part = projected[id(view)] = {key: view[key] for key in SELECTED}
            keep.append(view)
        out.append(part)
    return out
