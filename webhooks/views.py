"""``POST /webhooks/<slug>/``: a lean plain Django view (no DRF on the hot path), CSRF-exempt
because producers authenticate with signatures, not cookies. The checks run in the order of
docs/http-api.md ("Checks and responses"): source, method, size, signature, timestamp, JSON,
envelope, then the one upsert."""

from __future__ import annotations

import functools
import ipaddress
import json
import logging

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.debug import sensitive_variables

from core.errors import (
    PayloadTooLarge,
    ServiceError,
    TemporarilyUnavailable,
    UnreadableBody,
)
from core.exceptions import error_json_response
from core.headers import EnvironHeaders
from core.security import client_ip
from core.tracing import current_span_set, tracing_enabled

from .errors import UnknownSource
from .ingest import inbox_event_record
from .metrics import WEBHOOK_REQUESTS
from .selectors import webhook_source_secrets_now, webhook_source_snapshot

logger = logging.getLogger(__name__)

_READ_CHUNK = 65536


def raw_body_read(request: HttpRequest, *, limit: int) -> bytes:
    """The raw body, reading at most ``limit + 1`` bytes whatever ``Content-Length`` says.

    A declared length above the limit is refused without reading. With chunked transfer there is
    no ``Content-Length`` and Django sees an empty body, so the server's own input stream is
    read: the WSGI server delimits the body (gunicorn decodes the chunks). With neither, the
    request has no body (RFC 9112, 6.3). A body the server cannot read to its end is
    ``UnreadableBody`` (400 ``invalid_body``)."""
    declared = request.META.get("CONTENT_LENGTH")
    try:
        length = int(declared) if declared else None
    except ValueError:
        length = None
    if length is not None and length > limit:
        raise PayloadTooLarge()
    if length is not None:
        stream = request
    elif "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
        stream = request.META["wsgi.input"]
    else:
        return b""
    chunks = []
    size = 0
    while size <= limit:
        try:
            chunk = stream.read(min(_READ_CHUNK, limit + 1 - size))
        except Exception as exc:
            # Whatever the server's input stream raises while it delimits the body (gunicorn:
            # a chunk size that is not hex, a chunk without its CRLF, a connection that ended
            # mid-body; Django: UnreadablePostError) means the body cannot be read.
            raise UnreadableBody() from exc
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise PayloadTooLarge()
    if length is not None and size < length:
        raise UnreadableBody()  # the connection ended before the declared length
    return b"".join(chunks)


def _remote_addr(request: HttpRequest) -> str | None:
    """The client's address: the peer's, or behind TRUSTED_PROXY_COUNT proxies the one the
    first of them saw (``core.security.client_ip``); None when it is not an IP (a unix
    socket)."""
    return _address_stored(client_ip(request) or "")


@functools.lru_cache(maxsize=4096)  # a bounded set of producers' addresses
def _address_stored(value: str) -> str | None:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


def _respond(
    slug: str, response: HttpResponse, *, outcome: str, event_id: str = ""
) -> HttpResponse:
    WEBHOOK_REQUESTS.labels(source=slug, status=str(response.status_code)).inc()
    if tracing_enabled():
        # On the request's span (the Django instrumentation's): never the body, a header
        # or the signature.
        current_span_set(
            {
                "webhook.source": slug,
                "webhook.event_id": event_id or None,
                "webhook.outcome": outcome,
            }
        )
    return response


@csrf_exempt
@sensitive_variables()
def webhook_receive(request: HttpRequest, slug: str) -> HttpResponse:
    # Every local here, and in the frames below that mark nothing narrower, is hidden from
    # error pages and reports: the source's secrets pass through (docs/security.md,
    # "Secrets").
    # Unknown slugs are counted under one label, so that probing cannot grow the metrics.
    label = "unknown"
    try:
        snapshot = webhook_source_snapshot(slug=slug)
        if snapshot is None:
            raise UnknownSource()
        source = snapshot.source
        label = source.slug
        if request.method != "POST":
            return _respond(
                label, HttpResponseNotAllowed(["POST"]), outcome="method_not_allowed"
            )
        raw_body = raw_body_read(request, limit=settings.WEBHOOK_MAX_BODY_BYTES)
        result = inbox_event_record(
            source=source,
            raw_body=raw_body,
            # One environ read per header (core/headers.py).
            headers=EnvironHeaders(request.META),
            remote_addr=_remote_addr(request),
            secrets=snapshot.secrets_valid(),
            # A signature that none of the remembered secrets verifies is checked again
            # against the source as stored now (a secret rotated in another process).
            secrets_reload=lambda: webhook_source_secrets_now(slug=slug),
        )
    except ServiceError as exc:
        return _respond(label, error_json_response(exc), outcome=exc.code)
    except (OperationalError, InterfaceError):
        # Nothing was committed: the producer retries later.
        logger.warning("inbox.database_unavailable", extra={"source": label})
        return _respond(
            label,
            error_json_response(TemporarilyUnavailable()),
            outcome=TemporarilyUnavailable.code,
        )
    if result.created:
        body = {"status": "accepted", "event_id": result.event_id}
        return _respond(
            label,
            _json_response(body, status=202),
            outcome="accepted",
            event_id=result.event_id,
        )
    body = {
        "status": "duplicate",
        "event_id": result.event_id,
        "processing_status": result.processing_status,
    }
    return _respond(
        label,
        _json_response(body, status=200),
        outcome="duplicate",
        event_id=result.event_id,
    )


def _json_response(body: dict, *, status: int) -> HttpResponse:
    """What ``JsonResponse`` answers, for the two answers of every delivery: their values
    are strings, so the plain encoder does, without ``JsonResponse``'s encoder class."""
    return HttpResponse(
        json.dumps(body), status=status, content_type="application/json"
    )
