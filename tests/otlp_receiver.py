"""An OpenTelemetry collector's OTLP/HTTP traces endpoint, for real: a threaded HTTP server in
the test process (``tests.http_double``) that takes ``POST /v1/traces``, decodes each
``ExportTraceServiceRequest`` with the protobuf messages the exporter itself is built on
(``opentelemetry-proto``) and keeps every span it received, from every process that exports
to it."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.http_double import HttpDouble, Reply, Request


def _value(any_value) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    kind: int  # the protobuf's: 1 internal, 2 server, 3 client, 4 producer, 5 consumer
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]  # (trace id, span id), hex
    service: str
    scope: str
    resource: dict[str, Any] = field(default_factory=dict)

    def linked_to(self, other: ReceivedSpan) -> bool:
        return (other.trace_id, other.span_id) in self.links

    def child_of(self, other: ReceivedSpan) -> bool:
        return self.trace_id == other.trace_id and self.parent_span_id == other.span_id


SERVER, PRODUCER, CONSUMER = 2, 4, 5


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.lock = threading.Lock()
        self.server = HttpDouble(self._answer)

    @property
    def url(self) -> str:
        return self.server.url

    def __enter__(self) -> OtlpReceiver:
        self.server.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.server.__exit__(*exc)

    def _answer(self, request: Request) -> Reply:
        if request.method != "POST" or request.route != "/v1/traces":
            return Reply(404, b"", content_type="text/plain")
        body = request.body
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        received = []
        for resource_spans in export.resource_spans:
            resource = {
                item.key: _value(item.value)
                for item in resource_spans.resource.attributes
            }
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={
                                item.key: _value(item.value) for item in span.attributes
                            },
                            links=tuple(
                                (link.trace_id.hex(), link.span_id.hex())
                                for link in span.links
                            ),
                            service=str(resource.get("service.name", "")),
                            scope=scope_spans.scope.name,
                            resource=resource,
                        )
                    )
        with self.lock:
            self.spans.extend(received)
        return Reply(
            200,
            ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def received(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.spans)

    def wait_for(
        self, predicate: Callable[[ReceivedSpan], bool], *, what: str, timeout=30.0
    ) -> ReceivedSpan:
        """The first span received that ``predicate`` holds for, waiting for it."""
        deadline = time.monotonic() + timeout
        while True:
            for span in self.received():
                if predicate(span):
                    return span
            if time.monotonic() > deadline:
                names = sorted({(s.name, s.kind) for s in self.received()})
                raise AssertionError(f"no span {what} within {timeout}s; got {names}")
            time.sleep(0.1)
