"""Forewarn: a proactive runtime guard for LLM agents.

Learn a DTMC from logged runs, check it with Storm, and act before the violation.
"""
from guard._version import __version__
from guard.bundle import GuardBundle, learn_bundle
from guard.bundle_guard import BundleGuard, load_guard
from guard.errors import CheckError, ForewarnError, ModelFileError, PredicateError, SpecError, TraceError
from guard.model import GuardModel
from guard.pipeline import learn_model, learn_model_from_runs
from guard.policy import Policy
from guard.runtime import Decision, Guard, Session
from guard.spec import Action, Spec, load_spec, parse_spec
from guard.storm import Method

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
]
