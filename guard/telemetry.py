"""Decisions as OpenTelemetry spans: one span ``forewarn.decision`` per decision an integration acts on.

As OpenTelemetry's own library instrumentations do, the span goes through the *global* tracer
provider the application configured (``opentelemetry.trace.set_tracer_provider``, or the
``opentelemetry-instrument`` launcher); with none set, or without ``opentelemetry-api``
installed, :func:`record_decision` returns at once and costs a function call. Nothing in
Forewarn turns it on or off: the application's telemetry setup does.

The span is a child of the span current where the decision is taken — the GenAI ``execute_tool
{tool}`` span of the tool call when the agent's instrumentation opened one — and carries:

========================  ===========================================================
``forewarn.action``        what the integration did: allow, reflect, ask_human, stop
``forewarn.p_unsafe``      the predicted probability of a violation (absent: unseen state)
``forewarn.ci_low/high``   its confidence interval (when the model has intervals)
``forewarn.rule``          the guarded property (rule) most at risk, by name
``forewarn.state``         the predicates that hold, comma-separated (sorted)
``forewarn.phase``         ``proposed`` (a look-ahead before the call) or ``observed`` (after it)
``forewarn.tool``          the tool called (also ``gen_ai.tool.name``); ``gen_ai.tool.call.id``
``forewarn.session``       the run or sidecar session id
``forewarn.visits``        departures observed from the state in the learned runs
``forewarn.threshold``     the threshold crossed; ``forewarn.decided``: the guard's own action
``forewarn.baseline_p_unsafe``  under the increase trigger, the run's risk before the call
========================  ===========================================================

Every decision is one span, whatever made it: a :class:`~guard.runtime.Session` records its own
(``observe``: phase ``observed``; ``preview``: ``proposed``), unless an integration that records a
richer one turned that off (``Session.traced``): the LangChain middleware, the MCP proxy and the
sidecar (``record_decision(decision,
tool=..., phase=..., session=..., call_id=..., action=..., carrier=...)``). The sidecar passes its
request's headers as ``carrier``: where no span is current (the server itself is not instrumented),
the span's parent is the caller's, read from the W3C ``traceparent`` header by the propagator the
application configured — so a decision the sidecar takes sits in the agent's own trace.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .decision import Decision
    from .spec import Action

_trace: Any
try:
    from opentelemetry import trace as _trace
except ModuleNotFoundError:  # opentelemetry-api absent: every call is a no-op
    _trace = None

__all__ = ["SPAN_NAME", "decision_attributes", "record_decision", "tracing"]

SPAN_NAME = "forewarn.decision"
_FROM_ENVIRONMENT = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ  # a provider the API loads by name
_TRACERS: dict[int, tuple[Any, Any]] = {}  # per provider: (the provider, its tracer for Forewarn)


def decision_attributes(decision: Decision, *, tool: str | None = None, phase: str | None = None,
                        session: str | None = None, call_id: str | None = None,
                        action: Action | str | None = None) -> dict[str, Any]:
    """The span's attributes (None values left out, as OpenTelemetry requires)."""
    acted = action if action is not None else decision.action
    rule = next((p.name for p in decision.properties if p.formula == decision.property), None)
    values: Mapping[str, Any] = {
        "forewarn.action": acted,
        "forewarn.decided": decision.action.value,
        "forewarn.p_unsafe": decision.p_unsafe, "forewarn.ci_low": decision.ci_low,
        "forewarn.ci_high": decision.ci_high, "forewarn.rule": rule or decision.property,
        "forewarn.property": decision.property,
        "forewarn.state": ",".join(sorted(k for k, v in decision.abstract_state.items() if v)),
        "forewarn.known": decision.known, "forewarn.unsafe_now": decision.unsafe_now,
        "forewarn.visits": decision.visits, "forewarn.threshold": decision.threshold,
        "forewarn.baseline_p_unsafe": decision.baseline_p_unsafe, "forewarn.phase": phase,
        "forewarn.tool": tool, "forewarn.session": session,
        "gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_id,
    }
    return {k: _plain(v) for k, v in values.items() if v is not None}


def _plain(value: Any) -> str | bool | int | float:
    """``value`` as the plain Python type OpenTelemetry stores: an enum as its value (an ``Action`` is a
    ``str`` whose ``str()`` is ``Action.ALLOW``, which an exporter would write), a numpy scalar as a number."""
    if isinstance(value, Enum):
        value = value.value
    if not isinstance(value, str | bool | int | float) and callable(getattr(value, "item", None)):
        value = value.item()  # a numpy scalar (np.float64, np.int64, np.bool_)
    if isinstance(value, bool):  # first: a bool is an int
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)  # a subclass's own text, not what its __str__ says
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    raise TypeError(f"a span attribute must be a str, bool, int or float, not {type(value).__name__}")


def tracing() -> bool:
    """Whether the application configured a tracer provider (else :func:`record_decision` does nothing):
    a caller checks it before building what only a span needs (the sidecar's header carrier)."""
    return _configured_provider() is not None


def _configured_provider() -> Any | None:
    """The tracer provider the application set, or None (OpenTelemetry absent or not configured).

    Read from the API's global as ``set_tracer_provider`` leaves it: ``get_tracer_provider`` looks
    the environment up on every call while none is set (2.2 µs here, a quarter of a decision); a
    provider named only by ``OTEL_PYTHON_TRACER_PROVIDER`` (read once, at import) goes through it.
    """
    if _trace is None:
        return None
    provider = getattr(_trace, "_TRACER_PROVIDER", None)
    if provider is None:
        if not _FROM_ENVIRONMENT:
            return None
        provider = _trace.get_tracer_provider()
    return None if isinstance(provider, _trace.ProxyTracerProvider | _trace.NoOpTracerProvider) else provider


def record_decision(decision: Decision, *, tool: str | None = None, phase: str | None = None,
                    session: str | None = None, call_id: str | None = None,
                    action: Action | str | None = None, carrier: Mapping[str, str] | None = None) -> None:
    """Emit one ``forewarn.decision`` span (see the module's doc); a no-op without a tracer provider.

    Args:
        carrier: a request's headers (lower-case names); when no span is current, the span's parent
            is the context they carry (``traceparent``), as the configured propagator reads it.
    """
    provider = _configured_provider()
    if provider is None:
        return  # nobody configured OpenTelemetry: not even a non-recording span
    parent = None
    if carrier is not None and not _trace.get_current_span().get_span_context().is_valid:
        from opentelemetry import propagate

        parent = propagate.extract(carrier)
    cached = _TRACERS.get(id(provider))
    if cached is None or cached[0] is not provider:
        cached = _TRACERS[id(provider)] = (provider, provider.get_tracer("forewarn", __version__))
    tracer = cached[1]
    span = tracer.start_span(SPAN_NAME, context=parent, attributes=decision_attributes(
        decision, tool=tool, phase=phase, session=session, call_id=call_id, action=action))
    span.end()
