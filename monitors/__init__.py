"""Monitor automata for timing rules, and their product with a learned chain."""

if __name__ == 'monitors':  # a source checkout imported by the pre-0.2 name: be forewarn.monitors
    from forewarn._aliases import redirect

    redirect(__name__)

from forewarn.monitors.base import VIOL, Condition, ConditionError, Monitor, MonitorError, MonitorSemanticsError
from forewarn.monitors.bounded_response import BoundedResponse
from forewarn.monitors.build import build_monitor, build_monitors
from forewarn.monitors.patterns import Pattern, PatternMonitor, Scope
from forewarn.monitors.product import ProductTooLargeError, advance, build_product, initial_monitor_states

__all__ = [
    "VIOL",
    "BoundedResponse",
    "Condition",
    "ConditionError",
    "Monitor",
    "MonitorError",
    "MonitorSemanticsError",
    "Pattern",
    "PatternMonitor",
    "ProductTooLargeError",
    "Scope",
    "advance",
    "build_monitor",
    "build_monitors",
    "build_product",
    "initial_monitor_states",
]
