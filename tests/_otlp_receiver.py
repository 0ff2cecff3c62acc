"""A minimal OTLP/HTTP trace receiver, run as a process of its own by the OpenTelemetry tests.

``python _otlp_receiver.py PORT OUT``: accepts ``POST /v1/traces`` (protobuf, as the OTLP HTTP exporter
sends it), decodes every span with the OpenTelemetry protocol package and appends one JSON line per
span to OUT: ``{"name", "trace_id", "span_id", "parent_span_id", "attributes"}``.
"""
from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def _value(value: dict[str, Any]) -> Any:
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in value:
            return value[kind]
    if "intValue" in value:
        return int(value["intValue"])
    return value


class Receiver(BaseHTTPRequestHandler):
    out = ""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        request = ExportTraceServiceRequest.FromString(body)
        with open(self.out, "a", encoding="utf-8") as out:
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        data = MessageToDict(span)
                        attributes = {a["key"]: _value(a["value"]) for a in data.get("attributes", [])}
                        out.write(json.dumps({"name": span.name, "trace_id": span.trace_id.hex(),
                                              "span_id": span.span_id.hex(),
                                              "parent_span_id": span.parent_span_id.hex(),
                                              "attributes": attributes}) + "\n")
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_: Any) -> None:
        pass


if __name__ == "__main__":
    Receiver.out = sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Receiver)
    print("ready", flush=True)
    server.serve_forever()
