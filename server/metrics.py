"""Prometheus metrics of one server (its own registry, so several apps can share a process)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["CONTENT_TYPE_LATEST"]  # names other modules import through this one

# Steps take tens of microseconds to a few milliseconds; the default buckets start at 5 ms.
_STEP_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Metrics:
    """The server's metrics. Gauges read live counters at scrape time, so they are never stale."""

    def __init__(self, *, sessions_open: Callable[[], float], sessions_cached: Callable[[], float],
                 approvals_pending: Callable[[], float], models_loaded: Callable[[], float],
                 cache_bytes: Callable[[], float] = lambda: 0.0, limits: Mapping[str, Any] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.decisions = Counter("forewarn_decisions_total", "Decisions answered, by action and operation "
                                 "(observe, preview, batch steps, propose: ask_human when a human is asked)",
                                 ["action", "op"], registry=self.registry)
        self.step_seconds = Histogram("forewarn_step_seconds",
                                      "Server-side time of a step, from parsed body to answer "
                                      "(includes waiting for the commit of observe)",
                                      ["op"], buckets=_STEP_BUCKETS, registry=self.registry)
        self.commit_seconds = Histogram("forewarn_commit_wait_seconds",
                                        "Time a step waited for its decision to be committed (its turn on the event loop "
                                        "included: commits are grouped per loop iteration)",
                                        buckets=_STEP_BUCKETS, registry=self.registry)
        self.approvals_resolved = Counter("forewarn_approvals_resolved_total", "Approvals and proposals resolved, by outcome "
                                          "(approved, rejected, edited, expired, cancelled)",
                                          ["status"], registry=self.registry)
        self.errors = Counter("forewarn_request_errors_total", "Requests answered with an error, by status",
                              ["status"], registry=self.registry)
        self.model_loads = Counter("forewarn_model_loads_total", "Models loaded or replaced", ["model"],
                                   registry=self.registry)
        Gauge("forewarn_sessions_open", "Sessions not closed", registry=self.registry).set_function(sessions_open)
        Gauge("forewarn_sessions_in_memory", "Sessions held in memory (the rest resume from the database)",
              registry=self.registry).set_function(sessions_cached)
        Gauge("forewarn_approvals_pending", "Approvals waiting for a human",
              registry=self.registry).set_function(approvals_pending)
        Gauge("forewarn_models_loaded", "Model names served", registry=self.registry).set_function(models_loaded)
        Gauge("forewarn_cache_bytes", "Bytes held by the predicates' memo tables of every model version loaded "
              "(bounded by limits.memo_bytes each)", registry=self.registry).set_function(cache_bytes)
        # The configured bounds (limits.*), so a dashboard shows what a request is held to; an unset one is absent.
        limit = Gauge("forewarn_limit", "A configured bound of the server (limits.NAME)", ["name"], registry=self.registry)
        for name, value in (limits or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                limit.labels(name).set(value)
        self._exceeded = Counter("forewarn_limit_exceeded_total", "Requests or steps that met a configured bound "
                                 "(limits.NAME) and were refused or, for predicate_cpu_seconds, answered with the "
                                 "unseen-state action", ["name"], registry=self.registry)
        # Bound children: .labels() looks up a dict each call; the step path should not.
        self._decision_children: dict[tuple[str, str], Counter] = {}
        self.observe_seconds = self.step_seconds.labels("observe")
        self.preview_seconds = self.step_seconds.labels("preview")
        self.batch_seconds = self.step_seconds.labels("batch")

    def decision(self, action: str, op: str) -> None:
        child = self._decision_children.get((action, op))
        if child is None:
            child = self._decision_children[(action, op)] = self.decisions.labels(action, op)
        child.inc()

    def limit_exceeded(self, name: str) -> None:
        self._exceeded.labels(name).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
