"""Forewarn: a proactive runtime guard for LLM agents.

Learn a DTMC from logged runs, check it with Storm, and act before the violation.

The names below are loaded on first use (PEP 562): ``from forewarn.guard import Guard``
imports the runtime and the model file reader only, not Storm, scipy or the learner.
``__all__`` is the one list of the everyday names: ``forewarn`` re-exports it as it is.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import CheckError, ForewarnError, ModelFileError, PredicateError, SpecError, TraceError
from ._version import __version__

if TYPE_CHECKING:
    from .bundle import GuardBundle, learn_bundle
    from .bundle_guard import BundleGuard, load_guard
    from .model import GuardModel
    from .pipeline import learn_model, learn_model_from_runs
    from .policy import Policy
    from .results import Method
    from .runtime import Decision, Guard, Session
    from .spec import Action, Spec, load_spec, parse_spec
    from .trust import predicate

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

# name → the module that defines it (imported when the name is first asked for)
_LAZY = {
    "Action": "spec", "Spec": "spec", "load_spec": "spec", "parse_spec": "spec",
    "BundleGuard": "bundle_guard", "load_guard": "bundle_guard",
    "Decision": "runtime", "Guard": "runtime", "Session": "runtime",
    "GuardBundle": "bundle", "learn_bundle": "bundle",
    "GuardModel": "model",
    "Method": "results",
    "Policy": "policy",
    "predicate": "trust",
    "learn_model": "pipeline", "learn_model_from_runs": "pipeline",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
