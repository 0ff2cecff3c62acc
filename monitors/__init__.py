"""Monitor automata for timing rules, and their product with a learned chain.

Pure automata theory: nothing here imports the rest of Forewarn but its error family,
:mod:`forewarn.errors`, a leaf (an import contract in pyproject.toml holds it so). Building
monitors from a spec and the product as a learned chain are the core's:
:mod:`forewarn.guard.monitoring`.
"""

from .base import VIOL, Condition, ConditionError, Monitor, MonitorError, MonitorSemanticsError
from .bounded_response import BoundedResponse
from .patterns import Pattern, PatternMonitor, Scope
from .product import (
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
