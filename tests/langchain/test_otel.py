"""Decisions as OpenTelemetry spans, through the application's global tracer provider: the SDK's
in-memory exporter, and a real OTLP/HTTP receiver process (tests/_otlp_receiver.py)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from _lc_support import ToolLog, run_of, thresholds
from _sidecar import free_port
from forewarn.guard import Guard
from forewarn.guard.langchain import ForewarnMiddleware
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls
from forewarn.guard.telemetry import SPAN_NAME, record_decision

TESTS = Path(__file__).resolve().parents[1]
RM_HOME = ("shell", {"command": "rm -rf ~/*"})


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real OTLP/HTTP receiver process on a free loopback port; what it received, one JSON line a span."""
    out = tmp_path_factory.mktemp("otlp") / "spans.jsonl"
    port = free_port()
    process = subprocess.Popen([sys.executable, str(TESTS / "_otlp_receiver.py"), str(port), str(out)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        yield f"http://127.0.0.1:{port}/v1/traces", out
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


class _WhileThisModuleRuns(SpanProcessor):
    """A processor that hands spans on only until the module's tests are done: the global provider
    outlives them (it can be set once per process), the receiver does not."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner, self.active = inner, True

    def on_end(self, span: ReadableSpan) -> None:
        if self.active:
            self.inner.on_end(span)

    def shutdown(self) -> None:
        self.active = False
        self.inner.shutdown()


@pytest.fixture(scope="module")
def exporter(receiver: tuple[str, Path]) -> Iterator[InMemorySpanExporter]:
    """The application's telemetry set-up: one global provider, exporting in memory and over OTLP/HTTP."""
    memory = InMemorySpanExporter()
    processors = [_WhileThisModuleRuns(SimpleSpanProcessor(memory)),
                  _WhileThisModuleRuns(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver[0])))]
    provider = TracerProvider()
    for processor in processors:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)  # once per process, as an application does
    yield memory
    for processor in processors:  # before the receiver stops: later tests export nothing
        processor.shutdown()


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    exporter.clear()
    return exporter


def _decisions(exporter: InMemorySpanExporter) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == SPAN_NAME]


def test_one_span_per_decision_with_its_figures(tool_guard: Guard, log: ToolLog, spans: InMemorySpanExporter) -> None:
    model = ScriptedChatModel(script=[tool_calls(("read_file", {"path": "README.md"})), tool_calls(RM_HOME),
                                      "Stopped."])
    mw = ForewarnMiddleware(tool_guard, policy=thresholds(reflect=0.05))
    create_agent(model, log.tools(), middleware=[mw]).invoke({"messages": [HumanMessage("Free some disk space.")]})
    found = _decisions(spans)
    phases = [(s.attributes["forewarn.phase"], s.attributes["forewarn.tool"], s.attributes["forewarn.action"])
              for s in found]
    # read_file: judged before it runs, then committed; rm -rf ~: held back before it could run
    assert phases == [("proposed", "read_file", "allow"), ("observed", "read_file", "allow"),
                      ("proposed", "shell", "reflect")]
    held = found[-1].attributes
    decision = run_of(mw).interventions[-1].decision
    assert held["forewarn.p_unsafe"] == decision.p_unsafe and held["forewarn.rule"] == "unsafe"
    assert held["forewarn.ci_low"] == decision.ci_low and held["forewarn.ci_high"] == decision.ci_high
    assert held["forewarn.state"] == ",".join(sorted(k for k, v in decision.abstract_state.items() if v))
    assert "destructive_command" in held["forewarn.state"].split(",")
    assert held["gen_ai.tool.name"] == "shell" and held["forewarn.session"] == run_of(mw).id


def test_the_execute_tool_span_is_the_parent(tool_guard: Guard, spans: InMemorySpanExporter,
                                             receiver: tuple[str, Path]) -> None:
    decision = tool_guard.decide(tool_guard_state(tool_guard))
    tracer = trace.get_tracer("an-agent-instrumentation")
    with tracer.start_as_current_span("execute_tool send_email",
                                      attributes={"gen_ai.operation.name": "execute_tool",
                                                  "gen_ai.tool.name": "send_email"}) as tool_span:
        record_decision(decision, tool="send_email", phase="proposed", call_id="call_9")
    (span,) = _decisions(spans)
    assert span.parent is not None and span.parent.span_id == tool_span.get_span_context().span_id
    assert span.attributes["gen_ai.tool.call.id"] == "call_9" and span.attributes["forewarn.action"] == "allow"
    # the same spans reached the real receiver process over OTLP/HTTP
    received = _received(receiver[1], span.context.span_id)
    assert received["name"] == SPAN_NAME and received["parent_span_id"] == f"{tool_span.get_span_context().span_id:016x}"
    assert received["attributes"]["forewarn.tool"] == "send_email"
    assert received["attributes"]["forewarn.state"] == span.attributes["forewarn.state"]


def test_every_attribute_is_a_plain_value(tool_guard: Guard, spans: InMemorySpanExporter,
                                          receiver: tuple[str, Path]) -> None:
    """Issue 36: ``forewarn.action`` was the ``Action`` enum the integration passed, whose text is
    ``Action.REFLECT``; every attribute is now a plain str, bool, int or float (numpy scalars too)."""
    import dataclasses

    import numpy as np

    from forewarn.guard.spec import Action

    decision = tool_guard.decide(tool_guard_state(tool_guard))
    record_decision(decision, tool="send_email", phase="proposed", session="s1", action=Action.REFLECT)
    numpy_figures: dict[str, Any] = {"p_unsafe": np.float64(0.25), "visits": np.int64(7),
                                     "threshold": np.float32(0.5), "known": np.bool_(True)}
    record_decision(dataclasses.replace(decision, **numpy_figures), tool="t")
    first, second = _decisions(spans)
    for span in (first, second):
        attributes = dict(span.attributes or {})
        assert {k: type(v).__name__ for k, v in attributes.items() if type(v) not in (str, bool, int, float)} == {}
    assert f"{first.attributes['forewarn.action']}" == "reflect"
    assert f"{first.attributes['forewarn.decided']}" == decision.action.value
    assert second.attributes["forewarn.p_unsafe"] == 0.25 and second.attributes["forewarn.visits"] == 7
    assert second.attributes["forewarn.threshold"] == 0.5 and second.attributes["forewarn.known"] is True
    assert _received(receiver[1], first.context.span_id)["attributes"]["forewarn.action"] == "reflect"


def tool_guard_state(guard: Guard) -> dict[str, Any]:
    from forewarn.domains.tools import ToolStateExtractor, Transcript

    return ToolStateExtractor()(Transcript.of("Write the notes."))


def _received(out: Path, span_id: int) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if out.exists():
            for line in out.read_text().splitlines():
                entry = json.loads(line)
                if entry["span_id"] == f"{span_id:016x}":
                    return dict(entry)
        time.sleep(0.02)
    raise AssertionError(f"the receiver never got span {span_id:016x}")


def test_a_no_op_without_a_provider_or_without_the_api(tmp_path: Path) -> None:
    """In a fresh interpreter: no provider set, then opentelemetry-api missing altogether."""
    script = (
        "import sys\n"
        "from forewarn.guard.runtime import Decision\n"
        "from forewarn.guard.spec import Action\n"
        "d = Decision(Action.ALLOW, 0.1, 0.9, 'F \"unsafe\"', {'a': True}, '')\n"
        "from forewarn.guard import telemetry\n"
        "telemetry.record_decision(d, tool='t')\n"
        "from opentelemetry import trace\n"
        "assert type(trace.get_tracer_provider()).__name__ == 'ProxyTracerProvider'\n"
        "for name in [m for m in sys.modules if m.startswith(('opentelemetry', 'forewarn.guard.telemetry'))]:\n"
        "    del sys.modules[name]\n"
        "sys.modules['opentelemetry'] = None\n"
        "import importlib\n"
        "again = importlib.import_module('forewarn.guard.telemetry')\n"
        "assert again._trace is None\n"
        "again.record_decision(d, tool='t')\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_session_used_directly_records_each_decision(tool_guard: Guard, spans: InMemorySpanExporter) -> None:
    """A custom agent guarding itself through ``Session.observe``/``preview`` (the in-process glue) gets the
    same span per decision the integrations record, and an integration's session records none of its own."""
    from forewarn.domains.tools import ToolStateExtractor, Transcript

    extract = ToolStateExtractor()
    session = tool_guard.session()
    start = extract(Transcript.of("Free some disk space."))
    observed = session.observe(start)
    rm = extract(Transcript.of("Free some disk space.", [{"name": "shell", "args": {"command": "rm -rf ~/*"},
                                                          "status": "proposed"}]))
    previewed = session.preview(rm, action={"tool": "shell", "args": {"command": "rm -rf ~/*"}})
    found = _decisions(spans)
    assert [(s.attributes["forewarn.phase"], s.attributes["forewarn.action"]) for s in found] == [
        ("observed", observed.action.value), ("proposed", previewed.action.value)]
    assert found[1].attributes["forewarn.p_unsafe"] == previewed.p_unsafe
    spans.clear()
    quiet = tool_guard.session()
    quiet.traced = False  # what the middleware, the MCP proxy and the sidecar do: they record their own
    quiet.observe(start)
    assert _decisions(spans) == []
