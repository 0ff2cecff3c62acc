"""Forewarn: a proactive runtime guard for LLM agents.

Learn a DTMC from logged runs, check it with Storm, and act before the violation.
"""

if __name__ == 'guard':  # a source checkout imported by the pre-0.2 name: be forewarn.guard
    from forewarn._aliases import redirect

    redirect(__name__)

from forewarn.guard._version import __version__
from forewarn.guard.bundle import GuardBundle, learn_bundle
from forewarn.guard.bundle_guard import BundleGuard, load_guard
from forewarn.guard.errors import CheckError, ForewarnError, ModelFileError, PredicateError, SpecError, TraceError
from forewarn.guard.model import GuardModel
from forewarn.guard.pipeline import learn_model, learn_model_from_runs
from forewarn.guard.policy import Policy
from forewarn.guard.runtime import Decision, Guard, Session
from forewarn.guard.spec import Action, Spec, load_spec, parse_spec
from forewarn.guard.storm import Method

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
