"""Which tool calls an extractor can *place*: fail closed on the calls it cannot.

A guard judges a call by the state the extractor makes of it. When the extractor cannot
place a call — it does not know what the tool does — the state it makes says nothing of
the call, and the guard's "allow" would be a guess. Such a call gets the integration's
``unknown_tools`` action instead (``ask_human`` by default), whatever form the extractor
takes. Precisely, a call to tool ``T`` is placed when, in this order:

1. the extractor has a ``knows(name)`` method: ``knows(T)`` (``ToolStateExtractor``
   knows the tools it has a kind for);
2. ``T`` is among the tools the user declared (``known_tools``): placed;
3. the model records the tools its training runs called (``provenance.tools``, written by
   ``forewarn learn`` from the runs' actions): placed exactly when ``T`` is among them — a
   tool never seen in training has no evidence behind its risk;
4. otherwise (a plain function, and a model without that record): placed when the
   extractor's output reflects a call to ``T`` — the state with the call differs from the
   state without it — for this call or an earlier one (a tool once reflected stays placed,
   so a repeated read that changes nothing is not asked about again).

The first unplaced call of each tool is named in one warning (:class:`UnknownToolWarning`).
Neutral ground: the LangChain middleware and the MCP proxy both use it.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any

__all__ = ["Placement", "trained_tools"]


def trained_tools(provenance: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The tools a model's training runs called (None when the model does not record them)."""
    tools = (provenance or {}).get("tools")
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        return None
    return frozenset(tools)


class Placement:
    """The placement rules above for one extractor and one model (thread-safe).

    Args:
        extractor: the state extractor (any callable; its ``knows`` is used when it has one).
        trained: the tools the model's training runs called (:func:`trained_tools`), or None.
        known_tools: tools the user declares placed whatever the other rules say.
    """

    def __init__(self, extractor: Any, *, trained: Collection[str] | None = None,
                 known_tools: Collection[str] | None = None) -> None:
        knows = getattr(extractor, "knows", None)
        self._knows: Callable[[str], Any] | None = knows if callable(knows) else None
        self.trained = None if trained is None else frozenset(trained)
        self.known_tools = frozenset(known_tools or ())
        self._reflected: set[str] = set()
        self._lock = threading.Lock()

    def static(self, tool: str) -> bool | None:
        """Rules 1–3: True or False, or None when only the extractor's output can tell (rule 4)."""
        if self._knows is not None:
            return bool(self._knows(tool))
        if tool in self.known_tools:
            return True
        if self.trained is not None:
            return tool in self.trained
        with self._lock:
            return True if tool in self._reflected else None

    def places(self, tool: str, with_call: Callable[[], Mapping[str, Any]],
               without_call: Callable[[], Mapping[str, Any]]) -> bool:
        """Whether a call is placed; ``with_call`` / ``without_call`` make the states (called only
        under rule 4, and only until the tool is reflected once)."""
        answer = self.static(tool)
        if answer is not None:
            return answer
        if dict(with_call()) == dict(without_call()):
            return False
        with self._lock:
            self._reflected.add(tool)
        return True
