"""From a spec's ``monitors:`` entries to monitor objects; errors name the spec line."""
from __future__ import annotations

from forewarn.guard.spec import MonitorDef, Spec
from forewarn.monitors.base import Condition, ConditionError, Monitor, MonitorSemanticsError
from forewarn.monitors.bounded_response import BoundedResponse
from forewarn.monitors.patterns import Pattern, PatternMonitor, Scope

__all__ = ["build_monitors", "build_monitor"]


def build_monitors(spec: Spec) -> list[Monitor]:
    """The spec's monitors, in order.

    Raises:
        SpecError: a condition that does not parse or names an unknown predicate, or a rule
            that cannot be monitored on finite runs; naming the spec line.
    """
    return [build_monitor(spec, index, definition) for index, definition in enumerate(spec.monitors)]


def build_monitor(spec: Spec, index: int, definition: MonitorDef) -> Monitor:
    names = spec.predicate_names

    def condition(field: str) -> Condition | None:
        expression = getattr(definition, field)
        if expression is None:
            return None
        try:
            return Condition(expression, names)
        except ConditionError as exc:
            raise spec.error(f"monitor {definition.name!r}, {field}: {exc}", "monitors", index, field) from exc

    try:
        if definition.kind == "bounded_response":
            trigger, response = condition("trigger"), condition("response")
            assert trigger is not None and response is not None and definition.within is not None
            return BoundedResponse(definition.name, trigger, response, definition.within,
                                   restart=definition.restart)
        p = condition("p")
        assert p is not None
        return PatternMonitor(definition.name, Pattern(definition.kind), p, s=condition("s"),
                              within=definition.within, scope=Scope(definition.scope), q=condition("q"),
                              r=condition("r"))
    except (MonitorSemanticsError, ValueError) as exc:
        if hasattr(exc, "line"):  # already a SpecError
            raise
        raise spec.error(str(exc), "monitors", index) from exc
