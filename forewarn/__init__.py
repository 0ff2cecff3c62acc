"""Forewarn: a proactive runtime guard for LLM agents.

Learn a DTMC from logged runs, check it with Storm, and act before the violation.

The one installed name. Its parts keep the repository's folders: ``forewarn.guard`` (the
core and its integrations), ``forewarn.monitors`` (timing rules and the product),
``forewarn.server`` (the HTTP sidecar) and ``forewarn.domains`` (ready domains and demos).
The everyday names are re-exported here, loaded on first use so that ``import forewarn``
stays cheap::

    from forewarn import Guard
    guard = Guard.load("model.json")

``forewarn.predicate(NAME)`` registers a Python predicate a spec may name (``python: NAME``).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__ as __version__

# The everyday names are forewarn.guard's: its __all__ is the one list of them, and it says which of its
# modules defines each. Type checkers read them from there; at run time they are looked up there on first
# use (PEP 562), which imports forewarn.guard (the error family, no Storm, no scipy) only then.
if TYPE_CHECKING:
    from .guard import *  # noqa: F403
    from .guard import __all__ as __all__


def __getattr__(name: str) -> Any:
    guard = importlib.import_module("forewarn.guard")  # not `from . import guard`: it asks this hook for "guard"
    if name == "__all__" or name in guard.__all__:
        value = getattr(guard, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'forewarn' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(importlib.import_module("forewarn.guard").__all__))
