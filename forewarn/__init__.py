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

from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .guard import (
        Action,
        BundleGuard,
        CheckError,
        Decision,
        ForewarnError,
        Guard,
        GuardBundle,
        GuardModel,
        Method,
        ModelFileError,
        Policy,
        PredicateError,
        Session,
        Spec,
        SpecError,
        TraceError,
        learn_bundle,
        learn_model,
        learn_model_from_runs,
        load_guard,
        load_spec,
        parse_spec,
        predicate,
    )

__all__ = [
    "__version__",
    "Action",
    "BundleGuard",
    "CheckError",
    "Decision",
    "ForewarnError",
    "Guard",
    "GuardBundle",
    "GuardModel",
    "Method",
    "ModelFileError",
    "Policy",
    "PredicateError",
    "Session",
    "Spec",
    "SpecError",
    "TraceError",
    "learn_bundle",
    "learn_model",
    "learn_model_from_runs",
    "load_guard",
    "load_spec",
    "parse_spec",
    "predicate",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import guard as core

        value = getattr(core, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'forewarn' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
