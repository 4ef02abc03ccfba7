"""A real OTLP/HTTP trace receiver for the tracing tests: a plain HTTP server on a free loopback
port that takes ``POST /v1/traces`` (protobuf, gzip or not), decodes each
``ExportTraceServiceRequest`` with opentelemetry-proto and keeps the spans, flattened."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

KINDS = {Span.SPAN_KIND_INTERNAL: "internal", Span.SPAN_KIND_SERVER: "server"}
KINDS |= {Span.SPAN_KIND_CLIENT: "client"}


@dataclass(frozen=True)
class Received:
    """One span as the receiver decoded it (ids in hex, as a ``traceparent`` writes them)."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    attributes: dict[str, Any]
    resource: dict[str, Any]
    error: bool  # its status is ERROR

    def children(self, spans: list[Received]) -> list[Received]:
        return [s for s in spans if s.parent_id == self.span_id]


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


class OTLPReceiver:
    """``with OTLPReceiver() as receiver``: ``receiver.url`` is the OTLP endpoint's base (the
    exporter adds ``/v1/traces``); ``receiver.spans`` everything exported so far."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.posts = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver.take(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def take(self, request: ExportTraceServiceRequest) -> None:
        found = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        Received(
                            name=span.name,
                            kind=KINDS.get(span.kind, str(span.kind)),
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            attributes=_attributes(span.attributes),
                            resource=resource,
                            error=span.status.code == span.status.STATUS_CODE_ERROR,
                        )
                    )
        with self._lock:
            self.posts += 1
            self.spans += found

    def named(self, name: str) -> list[Received]:
        return [s for s in self.spans if s.name == name]

    def __enter__(self) -> OTLPReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
