"""PAC reports: how far the learned chain's risks may be from the true chain's, at confidence 1 − δ.

Five bounds, one concept module each, all reported side by side (docs/method.md, "PAC"). The per-state ones
are a table (:mod:`.registry`): a new one is a module defining its ``BOUND`` and one ``register`` line below.

* :mod:`.paper` — the paper's sample-size requirement per state (Pro2Guard, Algorithm 1 line 11), and
  :func:`pac_report`, which carries it beside the registered bounds;
* :mod:`.tight` — a per-state bound ε̂ = (I − Q̂)⁻¹ r on |learned − true| P(F unsafe) (Hoeffding/Bernstein
  on the reach values, one radius per row);
* :mod:`.empirical` — the same with each row's radius from the spread of the risks over its successors
  (empirical Bernstein);
* :mod:`.joint` — one Bernstein bound per state over *all* rows' samples at once, weighted by the
  fundamental matrix (bounded from the data), so that independent rows' errors are not all at their
  worst together;
* :mod:`.outcome` — each state's risk against a Clopper–Pearson interval on what the runs that visited it
  went on to do (first visits): no fundamental matrix, an exact binomial tail.
"""
from __future__ import annotations

from ..results import PACReport, StatePAC, TightPAC, TightStatePAC
from . import empirical, joint, outcome, tight
from ._solve import solve_nonnegative
from ._spread import chain_spread
from .empirical import EMPIRICAL_SHARE, empirical_bound
from .joint import JOINT_SHARE, JOINT_STATES, joint_bound
from .outcome import outcome_bound
from .paper import amplification_factor, pac_report
from .registry import BoundInputs, PACBound, bounds, register, unregister
from .tight import tight_bound

# The per-state bounds, loosest first (the order learn, check and evaluate list them in).
register(tight.BOUND)
register(empirical.BOUND)
register(joint.BOUND)
register(outcome.BOUND)

__all__ = ["EMPIRICAL_SHARE", "JOINT_SHARE", "JOINT_STATES", "StatePAC", "PACReport", "TightStatePAC", "TightPAC",
           "amplification_factor", "chain_spread", "empirical_bound", "joint_bound", "outcome_bound", "pac_report", "solve_nonnegative",
           "tight_bound", "BoundInputs", "PACBound", "bounds", "register", "unregister"]
