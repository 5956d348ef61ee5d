"""Tracing with OpenTelemetry, off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set
(docs/operations.md, "Tracing"; docs/architecture.md, "A trace across the outbox").

Off, nothing of OpenTelemetry is imported: the product's paths ask ``tracing_enabled()`` (one
settings read) and go on as before, and no column of a row gets a trace context. On, each
process starts its own tracer provider after it was forked (``tracing_start``: gunicorn's
workers from ``config/wsgi.py``, Celery's pool processes on ``worker_process_init``, the relay
in the worker's main process), with the instrumentations that fit it, and exports its spans
over OTLP/HTTP through the SDK's ``BatchSpanProcessor``; ``tracing_shutdown`` flushes them
before the process ends.

A row written by a request keeps that request's W3C ``traceparent`` (``traceparent_current``);
whoever takes many such rows at once (a relay's message, a worker's batch) links to them
(``links_from``) rather than pretending one of them is its parent. The attribute rules live
here too: an idempotency key is recorded as a SHA-256 prefix unless the setting asks for the
raw key; no body, secret, signature or token is ever an attribute.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.conf import settings

if TYPE_CHECKING:
    from opentelemetry.trace import Link, Span

logger = logging.getLogger(__name__)

# The name of the product's own spans' instrumentation scope.
TRACER_NAME = "retrysafe"
# A span links to at most this many rows' contexts (a relay's message carries up to
# INBOX_BATCH_SIZE rows, a bulk replay's chunk many more): enough to follow a sample of the
# requests back, bounded whatever the batch.
MAX_LINKS = 32
# How an idempotency key is recorded: its SHA-256 hex digest's first characters.
KEY_HASH_PREFIX = 16
TRACEPARENT_MAX_LENGTH = 55  # "00-" 32 hex "-" 16 hex "-" 2 hex

# The processes and the instrumentations each takes. The relay's main process takes no
# psycopg instrumentation: its idle polling would make a root span of every probe.
PROCESS_INSTRUMENTATIONS = {
    "web": ("django", "psycopg", "httpx"),
    "worker": ("celery", "psycopg", "httpx"),
    "relay": ("celery",),
}

_lock = threading.Lock()
_started_pid: int | None = None


# --- settings -------------------------------------------------------------------------------


def tracing_enabled() -> bool:
    """Whether this product traces: ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set."""
    return bool(settings.OTEL_EXPORTER_OTLP_ENDPOINT)


def traces_url() -> str:
    """Where spans go: the endpoint's ``/v1/traces``, as the OTLP/HTTP exporter's variable
    says (the signal's path appended to the base)."""
    return settings.OTEL_EXPORTER_OTLP_ENDPOINT.rstrip("/") + "/v1/traces"


# --- the provider ---------------------------------------------------------------------------


def tracing_start(*, process: str) -> bool:
    """Starts this process's tracer provider and the instrumentations of its kind of process
    (``PROCESS_INSTRUMENTATIONS``), once per process: call it after the fork. A process
    forked from one that had started (a pool process Celery replaced) inherits the provider,
    whose batch processor the SDK starts again in the child; it adds its own
    instrumentations. Returns whether tracing is on."""
    global _started_pid
    if not tracing_enabled():
        return False
    with _lock:
        if _started_pid == os.getpid():
            return True
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter,
        )
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        if not isinstance(trace.get_tracer_provider(), TracerProvider):
            provider = TracerProvider(
                resource=Resource.create({"service.name": settings.OTEL_SERVICE_NAME})
            )
            provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url()))
            )
            trace.set_tracer_provider(provider)
        _instrument(
            name
            for name in PROCESS_INSTRUMENTATIONS[process]
            if name not in settings.OTEL_PYTHON_DISABLED_INSTRUMENTATIONS
        )
        _started_pid = os.getpid()
    logger.info(
        "tracing.started", extra={"traced_process": process, "endpoint": traces_url()}
    )
    return True


def _instrument(names: Iterable[str]) -> None:
    # Each instrumentor is a singleton that instruments once per process.
    for name in names:
        if name == "django":
            from opentelemetry.instrumentation.django import DjangoInstrumentor

            # Instrumented before the WSGI handler loads the middleware (config/wsgi.py).
            DjangoInstrumentor().instrument()
            _django_middleware_place()
        elif name == "celery":
            from opentelemetry.instrumentation.celery import CeleryInstrumentor

            CeleryInstrumentor().instrument()
        elif name == "psycopg":
            from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

            # No SQL comments: a statement's text stays the one psycopg prepares once.
            PsycopgInstrumentor().instrument(enable_commenter=False)
        elif name == "httpx":
            from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

            HTTPXClientInstrumentor().instrument()


def _django_middleware_place() -> None:
    """The Django instrumentation puts its middleware first; it goes right after
    ``TRACING_MIDDLEWARE_AFTER`` instead (the webhook's fast lane), whose requests have a
    server span of their own (``server_span``): the instrumentation's per-request work
    doubled what a delivery cost the web process, an explicit span a fraction of it
    (docs/bench-log/2026-12-06.md, "What tracing costs ingest")."""
    after = settings.TRACING_MIDDLEWARE_AFTER
    middleware = list(settings.MIDDLEWARE)
    if after not in middleware:
        return
    instrumentation = [m for m in middleware if m.startswith("opentelemetry.")]
    rest = [m for m in middleware if m not in instrumentation]
    at = rest.index(after) + 1
    settings.MIDDLEWARE = [*rest[:at], *instrumentation, *rest[at:]]


def server_span(request: Any, *, route: str):
    """A server span of a request answered before the Django instrumentation's middleware
    (the webhook's fast lane), a child of the caller's ``traceparent`` when it sent one, with
    the HTTP semantic conventions' attributes; the caller sets
    ``http.response.status_code``. Call only when tracing is on."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import (
        TraceContextTextMapPropagator,
    )

    meta = request.META
    carrier = {
        name: meta[key]
        for name, key in (
            ("traceparent", "HTTP_TRACEPARENT"),
            ("tracestate", "HTTP_TRACESTATE"),
        )
        if key in meta
    }
    parent = TraceContextTextMapPropagator().extract(carrier) if carrier else None
    return trace.get_tracer(TRACER_NAME).start_as_current_span(
        f"{request.method} {route}",
        context=parent,
        kind=trace.SpanKind.SERVER,
        attributes={
            "http.request.method": request.method,
            "http.route": route,
            "url.path": request.path,
            "url.scheme": request.scheme,
        },
    )


def tracing_shutdown() -> None:
    """Exports what this process's batch processor still holds and stops it: before a
    pool process is recycled or a web worker exits. Nothing when tracing never started
    here."""
    global _started_pid
    if _started_pid != os.getpid():
        return
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.force_flush()
        provider.shutdown()
    _started_pid = None


# --- contexts and links ---------------------------------------------------------------------


def traceparent_current() -> str:
    """The W3C ``traceparent`` of the current span, for a row written now; ``""`` when
    tracing is off or no span is recording."""
    if not tracing_enabled():
        return ""
    from opentelemetry.trace.propagation.tracecontext import (
        TraceContextTextMapPropagator,
    )

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent", "")


def headers_inject(headers: dict[str, str]) -> None:
    """Adds the current span's ``traceparent`` (and ``tracestate``) to an outbound request's
    headers, in place; nothing when tracing is off."""
    if not tracing_enabled():
        return
    from opentelemetry.trace.propagation.tracecontext import (
        TraceContextTextMapPropagator,
    )

    TraceContextTextMapPropagator().inject(headers)


def link_from(traceparent: str | None, attributes: Mapping[str, Any] | None = None):
    """A ``Link`` to the span a stored ``traceparent`` names, or ``None`` for an empty or
    malformed one (parsed by the W3C propagator)."""
    if not traceparent:
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import (
        TraceContextTextMapPropagator,
    )

    context = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    span_context = trace.get_current_span(context).get_span_context()
    if not span_context.is_valid:
        return None
    return trace.Link(span_context, attributes=dict(attributes or {}))


def links_from(traceparents: Iterable[str | None]) -> list[Link]:
    """Links to the distinct valid contexts of ``traceparents``, at most ``MAX_LINKS``."""
    links = []
    seen: set[str] = set()
    for traceparent in traceparents:
        if not traceparent or traceparent in seen:
            continue
        seen.add(traceparent)
        link = link_from(traceparent)
        if link is not None:
            links.append(link)
            if len(links) >= MAX_LINKS:
                break
    return links


@contextlib.contextmanager
def span(
    name: str,
    *,
    kind: str = "internal",
    attributes: Mapping[str, Any] | None = None,
    links: Iterable[str | None] = (),
    new_trace: bool = False,
) -> Iterator[Span]:
    """A span of the product's own, a child of the current one (``new_trace``: the root of a
    new trace), linked to the contexts the stored ``links`` name. Call only when tracing is
    on. An exception is recorded on it and goes on."""
    from opentelemetry import context, trace

    span_kind = getattr(trace.SpanKind, kind.upper())
    parent = context.Context() if new_trace else None
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        name,
        context=parent,
        kind=span_kind,
        attributes=dict(attributes or {}),
        links=links_from(links),
    ) as current:
        yield current


def current_span_set(attributes: Mapping[str, Any]) -> None:
    """Sets ``attributes`` on the current span (the request's): nothing when tracing is off
    or no span records."""
    if not tracing_enabled():
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes(
            {key: value for key, value in attributes.items() if value is not None}
        )


def links_add(traceparents: Iterable[str | None], target: Span | None = None) -> None:
    """Adds links to a span already started (a batch learns its rows once it has claimed
    them), by default the current one, within the same bound; nothing when tracing is off
    or no span records."""
    if not tracing_enabled():
        return
    from opentelemetry import trace

    target = target or trace.get_current_span()
    if not target.is_recording():
        return
    for link in links_from(traceparents):
        target.add_link(link.context, link.attributes)


def task_process_span(task: Any, *, rows: int, destination_default: str = ""):
    """The ``process`` span of a Celery task's message (a child of the Celery
    instrumentation's run span, in the publisher's trace), with the messaging attributes
    and the number of outbox rows the message carries; its rows' links are added by whoever
    claims them (``links_add``). Call only when tracing is on."""
    request = task.request
    delivery = getattr(request, "delivery_info", None) or {}
    destination = delivery.get("routing_key") or destination_default or "celery"
    return span(
        f"process {destination}",
        kind="consumer",
        attributes={
            **messaging_attributes(
                operation="process",
                destination=destination,
                message_id=request.id or "",
            ),
            "celery.task_name": task.name,
            "outbox.row_count": rows,
        },
    )


# --- attributes -----------------------------------------------------------------------------


def idempotency_key_attribute(key: str) -> str:
    """An idempotency key as a span records it: the first 16 hex characters of its SHA-256
    by default, the key itself only with ``OTEL_RECORD_IDEMPOTENCY_KEY=raw`` (a key may be
    chosen by a client to mean something)."""
    if settings.OTEL_RECORD_IDEMPOTENCY_KEY == "raw":
        return key
    return hashlib.sha256(key.encode()).hexdigest()[:KEY_HASH_PREFIX]


def messaging_system() -> str:
    """``messaging.system`` of the broker in use, from its URL's scheme."""
    scheme = urlsplit(settings.CELERY_BROKER_URL).scheme
    if scheme.startswith("redis") or scheme == "sentinel":
        return "redis"
    if scheme in ("amqp", "amqps", "pyamqp", "librabbitmq"):
        return "rabbitmq"
    return scheme or "unknown"


def messaging_attributes(
    *, operation: str, destination: str, message_id: str = ""
) -> dict[str, Any]:
    """The messaging semantic conventions' attributes of a ``publish`` or ``process``."""
    attributes: dict[str, Any] = {
        "messaging.system": messaging_system(),
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": destination,
    }
    if message_id:
        attributes["messaging.message.id"] = message_id
    return attributes
