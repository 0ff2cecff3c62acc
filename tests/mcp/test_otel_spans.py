"""The proxy's decisions as OpenTelemetry spans (``forewarn.decision``), through the application's global
tracer provider, as the LangChain middleware's: the SDK's in-memory exporter, a real mcp-server-time."""
from __future__ import annotations

from typing import Any

import anyio
import pytest
from _mcp_support import TIME_SERVER, connected, proxy_for

from forewarn.guard import Guard, GuardModel
from forewarn.guard.mcp import UpstreamSpec
from forewarn.guard.telemetry import SPAN_NAME

pytestmark = pytest.mark.mcp
sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra (the OpenTelemetry SDK)")


def test_each_judged_call_is_one_decision_span(mcp_model: GuardModel) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    processor = SimpleSpanProcessor(memory)
    provider = trace.get_tracer_provider()
    if not isinstance(provider, sdk.TracerProvider):  # the global provider can be set once per process
        provider = sdk.TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(processor)
    try:
        async def scenario() -> Any:
            proxy = proxy_for(Guard(mcp_model), UpstreamSpec("time", command=TIME_SERVER))
            async with proxy.running() as server, connected(server) as client:
                return await client.call_tool("get_current_time", {"timezone": "UTC"})

        result = anyio.run(scenario)
    finally:
        processor.shutdown()  # later tests export nothing here
    spans = [s for s in memory.get_finished_spans() if s.name == SPAN_NAME]
    assert not result.is_error
    assert len(spans) == 1, [s.name for s in memory.get_finished_spans()]
    attributes = spans[0].attributes or {}
    assert attributes["forewarn.tool"] == "get_current_time" and attributes["forewarn.action"] == "allow"
    assert attributes["forewarn.phase"] == "proposed" and "forewarn.p_unsafe" in attributes
