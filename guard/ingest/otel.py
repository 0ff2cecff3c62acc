"""OpenTelemetry GenAI spans exported as OTLP JSON: one run per trace.

The OTLP JSON shape (``resourceSpans[].scopeSpans[].spans[]``; the file exporter and
the collector write one such object a line, or one document) with the GenAI semantic
conventions (Development status, so both older and newer attribute sets are read):

* a tool call is a span with ``gen_ai.operation.name = execute_tool`` (or, without the
  attribute, a span named ``execute_tool {tool}``); its tool is ``gen_ai.tool.name``
  (else the span name's second word), its id ``gen_ai.tool.call.id``, its arguments
  ``gen_ai.tool.call.arguments`` (opt-in; older: ``gen_ai.tool.arguments``,
  OpenInference ``input.value``) and its result ``gen_ai.tool.call.result`` (older
  ``gen_ai.tool.result``, ``output.value``). A span whose status is error (or that has
  ``error.type``) is a failed call. Arguments given as JSON text are decoded.
* the user's words come from ``gen_ai.input.messages`` (newer: ``[{"role": "user",
  "parts": [{"type": "text", "content": ...}]}]``) on ``invoke_agent`` and ``chat``
  spans, or older ``gen_ai.prompt`` / indexed ``gen_ai.prompt.N.role|content``
  attributes, or ``gen_ai.user.message`` events; each distinct text once, in order.

Spans are grouped by ``traceId`` over the whole file, tool calls ordered by start
time; a step's ``t`` is the call's end, in seconds since the trace's first span began.
Spans of other operations only supply the user's words and the run's ``meta``
(``service.name``, ``gen_ai.agent.name``, ``gen_ai.conversation.id``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ...errors import TraceError
from ..traces import Run
from ._documents import Record, kind_of, records
from .agents import AgentLog, Call, agent_runs
from .formats import LogFormat, Reading, not_an_object

_ARGS = ("gen_ai.tool.call.arguments", "gen_ai.tool.arguments", "input.value", "tool.parameters")
_RESULT = ("gen_ai.tool.call.result", "gen_ai.tool.result", "output.value")
_ERROR_CODES = (2, "2", "STATUS_CODE_ERROR", "ERROR")


def is_otlp(value: Any) -> bool:
    return isinstance(value, dict) and "resourceSpans" in value


@dataclass
class _Trace:
    id: str
    source: str
    line: int | None
    start: int | None = None
    tools: list[tuple[int, int | None, Call]] = field(default_factory=list)
    user: list[tuple[int, list[str]]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    error: TraceError | None = None


def read_otel_logs(records: Iterator[Record], on_bad: Callable[[TraceError], None]) -> Iterator[AgentLog]:
    """The runs (one per trace id) of OTLP JSON records; ``on_bad`` gets what cannot be read.

    A span that cannot be read spoils its trace (reported once, with the first fault);
    a record that cannot be read at all is reported on its own.
    """
    traces: dict[str, _Trace] = {}
    for record in records:
        try:
            _collect(record, traces)
        except TraceError as exc:
            on_bad(exc)
    for trace in traces.values():
        if trace.error is not None:
            on_bad(trace.error)
            continue
        if not trace.tools and not trace.user:
            continue  # a trace of other spans (an HTTP server, a database): not an agent run
        trace.tools.sort(key=lambda item: item[0])
        start = trace.start or 0
        calls = []
        for _, end, call in trace.tools:
            t = None if end is None else max(0.0, (end - start) / 1e9)
            calls.append(Call(call.name, call.args, call.error, call.result, call.id, t, call.field))
        user: list[str] = []
        for _, texts in sorted(trace.user, key=lambda item: item[0]):
            user.extend(text for text in texts if text not in user)
        yield AgentLog(id=trace.id, source=trace.source, line=trace.line, user=user, calls=calls, meta=trace.meta)


def _collect(record: Record, traces: dict[str, _Trace]) -> None:
    doc = record.value
    if not isinstance(doc, dict):
        raise record.error(f"an OTLP export must be a JSON object, got {kind_of(doc)}")
    if not any(key in doc for key in ("resourceSpans", "resourceLogs", "resourceMetrics")):
        # e.g. --input-format otel on the contract's JSONL: say so, instead of reading no run from it
        keys = ", ".join(sorted(map(str, doc))[:6]) or "none"
        raise record.error(f"not an OpenTelemetry (OTLP JSON) export: no resourceSpans (its keys: {keys})")
    resource_spans = _list(record, doc.get("resourceSpans"), "resourceSpans")
    for r, resource in enumerate(resource_spans):
        where = f"resourceSpans[{r}]"
        if not isinstance(resource, dict):
            raise record.error(f"expected an object, got {kind_of(resource)}", where)
        resource_attrs = _attributes(record, (resource.get("resource") or {}).get("attributes"),
                                     f"{where}.resource.attributes")
        service = resource_attrs.get("service.name")
        scopes = _list(record, resource.get("scopeSpans", resource.get("instrumentationLibrarySpans")),
                       f"{where}.scopeSpans")
        for s, scope in enumerate(scopes):
            if not isinstance(scope, dict):
                raise record.error(f"expected an object, got {kind_of(scope)}", f"{where}.scopeSpans[{s}]")
            spans = _list(record, scope.get("spans"), f"{where}.scopeSpans[{s}].spans")
            for n, span in enumerate(spans):
                span_where = f"{where}.scopeSpans[{s}].spans[{n}]"
                trace_id = span.get("traceId") if isinstance(span, dict) else None
                if not isinstance(trace_id, str) or not trace_id:
                    raise record.error("missing: every span needs its traceId" if trace_id is None
                                       else f"expected a trace id (hex text), got {kind_of(trace_id)}",
                                       f"{span_where}.traceId")
                trace = traces.get(trace_id)
                if trace is None:
                    trace = traces[trace_id] = _Trace(trace_id, record.source, record.line)
                if trace.error is not None:
                    continue
                try:
                    _span(record, span, span_where, trace, service)
                except TraceError as exc:
                    trace.error = exc


def _span(record: Record, span: dict[str, Any], where: str, trace: _Trace, service: Any) -> None:
    start = _nanos(record, span.get("startTimeUnixNano"), f"{where}.startTimeUnixNano")
    end = _nanos(record, span.get("endTimeUnixNano"), f"{where}.endTimeUnixNano")
    if start is not None and (trace.start is None or start < trace.start):
        trace.start = start
    attrs = _attributes(record, span.get("attributes"), f"{where}.attributes")
    name = span.get("name", "")
    if not isinstance(name, str):
        raise record.error(f"expected text, got {kind_of(name)}", f"{where}.name")
    operation = attrs.get("gen_ai.operation.name")
    if isinstance(service, str):
        trace.meta.setdefault("service", service)
    for key, meta_key in (("gen_ai.agent.name", "agent"), ("gen_ai.conversation.id", "conversation")):
        if isinstance(attrs.get(key), str):
            trace.meta.setdefault(meta_key, attrs[key])
    order = start if start is not None else 0
    texts = _user_texts(attrs, span.get("events"))
    if texts:
        trace.user.append((order, texts))
    if operation == "execute_tool" or (operation is None and name.startswith("execute_tool ")):
        tool = attrs.get("gen_ai.tool.name") or attrs.get("tool.name") or name.partition(" ")[2].strip()
        if not isinstance(tool, str) or not tool:
            raise record.error("a tool span without a tool name (neither gen_ai.tool.name nor 'execute_tool NAME')",
                               f"{where}.attributes")
        args = _decoded(next((attrs[k] for k in _ARGS if k in attrs), {}))
        result = next((attrs[k] for k in _RESULT if k in attrs), None)
        if result is not None and not isinstance(result, str):
            result = orjson.dumps(result, default=str).decode()
        status = span.get("status") or {}
        error = (isinstance(status, dict) and status.get("code") in _ERROR_CODES) or "error.type" in attrs
        call_id = attrs.get("gen_ai.tool.call.id")
        trace.tools.append((order, end, Call(tool, args, bool(error), result,
                                             call_id if isinstance(call_id, str) else None, field=where)))


def _list(record: Record, value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise record.error(f"expected a list, got {kind_of(value)}", where)
    return value


def _nanos(record: Record, value: Any, where: str) -> int | None:
    """OTLP JSON writes 64-bit integers as text (proto3 JSON mapping); numbers are accepted too."""
    if value is None:
        return None
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, int) and value.__class__ is not bool and value >= 0:
        return value
    raise record.error(f"expected nanoseconds since 1970 (digits), got {kind_of(value)}", where)


def _attributes(record: Record, value: Any, where: str) -> dict[str, Any]:
    """OTLP ``[{"key", "value": {"stringValue": ...}}]`` as a plain dict."""
    out: dict[str, Any] = {}
    for i, item in enumerate(_list(record, value, where)):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise record.error("expected {\"key\": ..., \"value\": {...}}", f"{where}[{i}]")
        out[item["key"]] = _value(record, item.get("value"), f"{where}[{i}].value")
    return out


def _value(record: Record, value: Any, where: str, depth: int = 0) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict) or depth > 32:
        raise record.error(f"expected an OTLP AnyValue object, got {kind_of(value)}", where)
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return value["boolValue"]
    if "intValue" in value:
        raw = value["intValue"]
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise record.error(f"expected an integer, got {kind_of(raw)}", f"{where}.intValue") from None
    if "doubleValue" in value:
        return value["doubleValue"]
    if "arrayValue" in value:
        items = (value["arrayValue"] or {}).get("values", [])
        return [_value(record, v, f"{where}.arrayValue.values[{i}]", depth + 1)
                for i, v in enumerate(_list(record, items, f"{where}.arrayValue.values"))]
    if "kvlistValue" in value:
        return _attributes(record, (value["kvlistValue"] or {}).get("values"), f"{where}.kvlistValue.values")
    if "bytesValue" in value:
        return value["bytesValue"]
    return None  # an empty AnyValue


def _decoded(value: Any) -> Any:
    """Arguments recorded as JSON text are decoded; other text stays as it is."""
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def _user_texts(attrs: dict[str, Any], events: Any) -> list[str]:
    texts: list[str] = []
    for key in ("gen_ai.input.messages", "gen_ai.prompt"):
        if key in attrs:
            texts += _messages_user(_decoded(attrs[key]))
    index = 0
    while f"gen_ai.prompt.{index}.content" in attrs:  # the indexed form of older instrumentations
        if attrs.get(f"gen_ai.prompt.{index}.role") == "user":
            texts.append(str(attrs[f"gen_ai.prompt.{index}.content"]))
        index += 1
    if isinstance(events, list):
        for event in events:
            if not isinstance(event, dict) or event.get("name") != "gen_ai.user.message":
                continue
            attributes = event.get("attributes")
            for item in attributes if isinstance(attributes, list) else []:
                if isinstance(item, dict) and item.get("key") == "content" and isinstance(item.get("value"), dict) \
                        and isinstance(item["value"].get("stringValue"), str):
                    texts.append(item["value"]["stringValue"])
    return texts


def _messages_user(messages: Any) -> list[str]:
    if isinstance(messages, str):
        return [messages]
    if isinstance(messages, dict):
        messages = [messages]
    if not isinstance(messages, list):
        return []
    out = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("user", "human"):
            continue
        if isinstance(message.get("content"), str):
            out.append(message["content"])
        parts = message.get("parts")
        if isinstance(parts, list):
            text = "\n".join(p["content"] for p in parts if isinstance(p, dict)
                             and p.get("type", "text") == "text" and isinstance(p.get("content"), str))
            if text:
                out.append(text)
    return out


def _why_not(record: Any) -> str | None:
    return not_an_object(record) or (None if "resourceSpans" in record else "no 'resourceSpans'")


def _read(path: Path, reading: Reading) -> Iterator[Run]:
    return agent_runs(read_otel_logs(records(path, on_bad=reading.bad), reading.bad), reading, "otel")


FORMAT = LogFormat("otel", "OpenTelemetry GenAI spans as OTLP JSON, one run per trace", _why_not, _read,
                   agent=True)
