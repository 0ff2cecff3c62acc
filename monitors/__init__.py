"""Monitor automata for timing rules, and their product with a learned chain."""
from monitors.base import VIOL, Condition, Monitor, MonitorSemanticsError
from monitors.bounded_response import BoundedResponse
from monitors.build import build_monitor, build_monitors
from monitors.patterns import Pattern, PatternMonitor, Scope
from monitors.product import advance, build_product, initial_monitor_states

__all__ = [
    "VIOL",
    "BoundedResponse",
    "Condition",
    "Monitor",
    "MonitorSemanticsError",
    "Pattern",
    "PatternMonitor",
    "Scope",
    "advance",
    "build_monitor",
    "build_monitors",
    "build_product",
    "initial_monitor_states",
]
