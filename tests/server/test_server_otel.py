"""The sidecar's own decisions as OpenTelemetry spans (``forewarn.decision``): observe (the fast path and
the routed one), preview, batch and proposals, each a child of the caller's span when the request
carries a W3C ``traceparent``; the SDK's in-memory exporter behind the global provider, a real uvicorn."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from _sidecar import ServerThread, auth, egg_state
from forewarn.guard.telemetry import SPAN_NAME

sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra (the OpenTelemetry SDK)")

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
PARENT_ID = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{TRACE_ID:032x}-{PARENT_ID:016x}-01"
RISKY = egg_state(in_microwave=True, toggled=True, closed=True)


@pytest.fixture
def spans() -> Iterator[Any]:
    """The application's telemetry set-up (the global provider can be set once per process: reuse an
    SDK one a test before set), exporting in memory while this test runs."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = trace.get_tracer_provider()
    if not isinstance(provider, sdk.TracerProvider):
        provider = sdk.TracerProvider()
        trace.set_tracer_provider(provider)
    memory = InMemorySpanExporter()
    processor = SimpleSpanProcessor(memory)
    provider.add_span_processor(processor)
    try:
        yield memory
    finally:
        processor.shutdown()  # later tests export nothing here


def _decisions(memory: Any) -> list[Any]:
    return [s for s in memory.get_finished_spans() if s.name == SPAN_NAME]


def test_each_sidecar_decision_is_a_span_under_the_callers_trace(server: ServerThread, http: httpx.Client,
                                                                 spans: Any) -> None:
    traced = {**auth("agent"), "traceparent": TRACEPARENT}
    session = http.post("/v1/sessions", json={"policy": {"thresholds": {"ask_human": 1.0, "reflect": None,
                                                                          "stop": None}}},
                        headers=auth("agent")).json()["id"]
    first = http.post(f"/v1/sessions/{session}/observe", json={"state": egg_state(), "action": {"tool": "pick"}},
                      headers=traced)  # the fast path
    assert first.status_code == 200
    routed = http.post(f"/v1/sessions/{session}/observe", content=orjson.dumps(
        {"state": egg_state(holding=True), "action": "pick_up"}),
        headers={**traced, "Content-Type": "text/plain"})  # not JSON's media type: FastAPI's route
    assert routed.status_code == 200, routed.text
    preview = http.post(f"/v1/sessions/{session}/preview", json={"state": RISKY}, headers=traced)
    proposal = http.post(f"/v1/sessions/{session}/proposals", json={"tool": "toggle", "arguments": {"on": True},
                                                                   "state": RISKY}, headers=traced)
    assert preview.status_code == 200 and proposal.status_code == 201
    batch = http.post("/v1/batch", json={"steps": [{"session": session, "state": RISKY, "op": "preview",
                                                     "action": {"tool": "toggle"}}]}, headers=traced)
    assert batch.status_code == 200
    found = _decisions(spans)
    assert [(s.attributes["forewarn.phase"], s.attributes.get("forewarn.tool")) for s in found] == [
        ("observed", "pick"), ("observed", "pick_up"), ("proposed", None), ("proposed", "toggle"),
        ("proposed", "toggle")]
    for span in found:  # every one sits in the agent's trace, under the span that sent the request
        assert span.context.trace_id == TRACE_ID
        assert span.parent is not None and span.parent.span_id == PARENT_ID and span.parent.is_remote
        assert span.attributes["forewarn.session"] == session
    answered = [first.json(), routed.json(), preview.json(), proposal.json()["decision"]]
    for span, decision in zip(found, answered):
        assert span.attributes["forewarn.decided"] == decision["action"]
        assert span.attributes["forewarn.p_unsafe"] == decision["p_unsafe"]
        assert span.attributes["forewarn.state"] == ",".join(sorted(k for k, v in decision["abstract_state"].items()
                                                                    if v))
    # the proposal's span says what the agent was told: a human decides
    assert proposal.json()["status"] == "pending" and found[3].attributes["forewarn.action"] == "ask_human"


def test_without_a_traceparent_the_span_is_a_root(server: ServerThread, http: httpx.Client, spans: Any) -> None:
    session = http.post("/v1/sessions", json={}, headers=auth("agent")).json()["id"]
    assert http.post(f"/v1/sessions/{session}/observe", json={"state": egg_state()},
                     headers=auth("agent")).status_code == 200
    (span,) = _decisions(spans)
    assert span.parent is None and span.attributes["forewarn.phase"] == "observed"
    assert span.attributes["forewarn.action"] == "allow"
