"""Monitor automata for timing rules, and their product with a learned chain.

Pure automata theory: nothing here imports the rest of Forewarn but its error family,
:mod:`forewarn.errors`, a leaf (an import contract in pyproject.toml holds it so). Building
monitors from a spec and the product as a learned chain are the core's:
:mod:`forewarn.guard.monitoring`.
"""

if __name__ == 'monitors':  # a source checkout imported by the pre-0.2 name: be forewarn.monitors
    from forewarn._aliases import redirect

    redirect(__name__)

from forewarn.monitors.base import VIOL, Condition, ConditionError, Monitor, MonitorError, MonitorSemanticsError
from forewarn.monitors.bounded_response import BoundedResponse
from forewarn.monitors.patterns import Pattern, PatternMonitor, Scope
from forewarn.monitors.product import (
    Chain,
    Product,
    ProductTooLargeError,
    advance,
    initial_monitor_states,
    reachable_product,
)

__all__ = [
    "VIOL",
    "BoundedResponse",
    "Chain",
    "Condition",
    "ConditionError",
    "Monitor",
    "MonitorError",
    "MonitorSemanticsError",
    "Pattern",
    "PatternMonitor",
    "Product",
    "ProductTooLargeError",
    "Scope",
    "advance",
    "initial_monitor_states",
    "reachable_product",
]
