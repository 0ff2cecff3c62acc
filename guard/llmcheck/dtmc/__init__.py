"""The explored chain as Storm models: labels, the DTMC, the bounds MDP, PRISM text; and the check."""
from __future__ import annotations

from .build import Labeling, Scope, build_bounds_mdp, build_dtmc, label_states, prism_text
from .check import CheckResult, check_explored

__all__ = ["Labeling", "Scope", "label_states", "build_dtmc", "build_bounds_mdp", "prism_text",
           "CheckResult", "check_explored"]
