"""A step's action as predicates read it: ``action`` in CEL, beside ``state`` and ``meta``.

A step's ``action`` is the action that led to its state, as logged: a string (a text
action such as ``"pick CellPhone"``), an object (a tool call ``{"tool": "send_email",
"args": {...}}``) or nothing. Predicates read one shape for all three, every field always
present, so a predicate never fails on a step that logged no action or the other form::

    action.present   true when the step logged an action
    action.raw       the action as logged (a string, an object, or null)
    action.name      a text action's words joined by single spaces ("pick CellPhone");
                     a tool call's tool name ("send_email")
    action.verb      a text action's first word ("pick"); a tool call's tool name
    action.object    a text action's second word ("CellPhone"), "" when it has none or is a call
    action.words     a text action's words (["pick", "CellPhone"]); [] for a tool call
    action.tool      a tool call's tool name; "" for a text action
    action.kind      a tool call's kind in the default tool table ("email_send", "http_get",
                     "other" for a tool it does not know); "" for a text action
    action.args      a tool call's arguments as logged (an object); {} for a text action
    action.classes   a tool call's argument classes (sorted strings, below); [] for a text action

A bare ``action`` (``action == "find Bowl"``, ``action.startsWith("find")``) is ``action.name``:
a text action compares as its text, a tool call as its tool name (:func:`guard._cel_fields.text_actions`
rewrites the expression when it is compiled; the view stays a map).

A missing action reads as ``present`` false, ``raw`` null, the strings empty and the
collections empty. An object without a tool name (``tool`` or ``name``) is a text action
when it has a string ``action`` or ``text``, else a call of no tool whose fields are ``args``.

The argument classes are what the default tool-state extractor (:mod:`guard.toolcalls`)
reads from a call's arguments alone — the call counted as proposed, so nothing only its
result could show: ``untrusted_source`` (fetches a web page, search results or an inbox),
``reads_secret``, ``destructive``, ``external`` (sends data outside the organisation),
``carries_secret``, ``payment``, ``over_limit`` (a payment above the default limit),
``message``, ``shell``, and ``unreadable`` for a known kind of tool whose arguments it
cannot read. They use the extractor's default tables (internal domain ``corp.example``,
payment limit 500); a deployment with its own tables writes its own predicates on ``args``.

:func:`action_class` is what ``learning.memory.actions`` remembers of an action.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from .toolcalls import ExtractionError, ToolStateExtractor, ToolStep
from .toolcalls.transcript import CallStatus

ActionClass = Literal["raw", "verb", "tool"]
ACTION_CLASSES: tuple[ActionClass, ...] = ("raw", "verb", "tool")

NO_ACTION: dict[str, Any] = {"present": False, "raw": None, "name": "", "verb": "", "object": "", "words": [],
                             "tool": "", "kind": "", "args": {}, "classes": []}  # never mutated: CEL only reads it
_VIEW_LIMIT = 4096  # text actions whose views are kept (an agent's vocabulary is small)
_views: dict[str, dict[str, Any]] = {}
_extractor = ToolStateExtractor()


def action_view(action: Any) -> dict[str, Any]:
    """The ``action`` a predicate reads for a step's logged action (see the module docstring).

    Never raises: an action of another type (a number, a list) reads as a call of no tool
    with no arguments, whose ``raw`` is that value.
    """
    if action is None:
        return NO_ACTION
    if action.__class__ is str:
        view = _views.get(action)
        if view is None:
            if len(_views) >= _VIEW_LIMIT:
                _views.clear()
            view = _views[action] = _text_view(action, action)
        return view
    if isinstance(action, Mapping):
        tool = action.get("tool", action.get("name"))
        if isinstance(tool, str):
            return _call_view(action, tool, _arguments(action))
        text = action.get("action", action.get("text"))
        if isinstance(text, str):
            return _text_view(text, action)
        return _call_view(action, "", dict(action))
    return _call_view(action, "", {})


def _text_view(text: str, raw: Any) -> dict[str, Any]:
    words = text.split()
    return {"present": True, "raw": raw, "name": " ".join(words), "verb": words[0] if words else "",
            "object": words[1] if len(words) > 1 else "", "words": words,
            "tool": "", "kind": "", "args": {}, "classes": []}


def _arguments(action: Mapping[str, Any]) -> dict[str, Any]:
    for key in ("args", "arguments", "input", "tool_input"):
        value = action.get(key)
        if isinstance(value, Mapping):
            return dict(value)
        if value is not None:
            return {"value": value}  # a single-input tool called with a bare value
    return {}


def _call_view(raw: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    kind = _extractor.kind_of(tool).value if tool else ""
    return {"present": True, "raw": raw, "name": tool, "verb": tool, "object": "", "words": [],
            "tool": tool, "kind": kind, "args": args, "classes": list(_classes(tool, args)) if tool else []}


def _classes(tool: str, args: dict[str, Any]) -> tuple[str, ...]:
    try:
        return _extractor.argument_classes(ToolStep(tool, args, CallStatus.PROPOSED))
    except ExtractionError:
        return ("unreadable",)
    except Exception:  # a classifier tripping on an odd value must not stop a decision
        return ("unreadable",)


def action_class(view: Mapping[str, Any], of: ActionClass) -> str:
    """What ``learning.memory.actions`` remembers of an action, from its view.

    ``raw``: a text action's words, or a tool call's name with its argument classes
    (``send_email[external]``); ``verb``: a text action's verb, or a tool call's name;
    ``tool``: a tool call's kind (``email_send``: mailers of any name alike), or a text
    action's verb. A step without an action is ``""``.
    """
    if of == "raw":
        classes = view["classes"]
        name: str = view["name"]
        return f"{name}[{','.join(classes)}]" if classes else name
    word: str = view["verb"] if of == "verb" or not view["tool"] else view["kind"]
    return word
