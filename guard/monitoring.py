"""Where the core meets the monitors: a spec's ``monitors:`` entries become monitor
objects (errors name the spec line), and a learned chain times monitors becomes the
chain that is checked.

:mod:`forewarn.monitors` is automata theory only and imports nothing of Forewarn; this
module is the one place that knows both a :class:`~forewarn.guard.spec.Spec` and a
:class:`~forewarn.guard.learning.LearnedDTMC` and the monitors' own types.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..monitors.base import Condition, ConditionError, Monitor, MonitorSemanticsError
from ..monitors.bounded_response import BoundedResponse
from ..monitors.patterns import Pattern, PatternMonitor, Scope
from ..monitors.product import reachable_product
from .chain import END, LearnedDTMC
from .spec import MonitorDef, Spec

__all__ = ["build_monitors", "build_monitor", "build_product"]


def build_product(chain: LearnedDTMC, monitors: Sequence[Monitor], *,
                  max_states: int | None = 5_000_000) -> LearnedDTMC:
    """The reachable product of ``chain`` with ``monitors`` (the chain itself when there are none).

    Raises:
        ProductTooLargeError: more than ``max_states`` reachable product states.
    """
    if not monitors:
        return chain
    product = reachable_product(chain, monitors, max_states=max_states)
    return LearnedDTMC(
        predicates=list(chain.predicates),
        states=[chain.states[i] for i in product.base.tolist()] + [END],
        unsafe=product.unsafe,
        initial=product.initial,
        counts=product.counts,
        matrix=product.matrix,
        alpha=chain.alpha,
        invalid_observed=chain.invalid_observed,
        monitors=[mon.name for mon in monitors],
        monitor_states=product.monitor_states,
        pseudo=product.pseudo,
        actions=chain.actions,
    )


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
