"""Floor endpoints, mounted under /_bench/ only when BENCH_ENDPOINTS is on (never in production).

They run in the same gunicorn server as the product, so a product figure divided by a floor
figure measures what the product adds, not what the machine can do."""

import hashlib
import hmac
import time

from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from psycopg.types.json import Jsonb

FLOOR_TABLE = "bench_floor"
# The bare floor's table: the inbox row's columns, types and defaults (``LIKE``), with its
# primary key and nothing else: no other index, no foreign key.
WIDE_FLOOR_TABLE = "bench_floor_wide"
# The three-column floor's table: what a user's plainest receiver keeps of an event.
HMAC_FLOOR_TABLE = "bench_floor_hmac"
# The secret of the benchmark's HMAC source (bench.ingest), which the three-column floor
# checks its deliveries with.
BENCH_WEBHOOK_SECRET = "bench-webhook-secret-0123456789abcdef"  # noqa: S105 - bench only
_HMAC_KEY = BENCH_WEBHOOK_SECRET.encode()
_TOLERANCE_SECONDS = 300


def bare(request):
    return JsonResponse({"status": "ok"})


@csrf_exempt
def raw_insert(request):
    """One raw ``INSERT ... ON CONFLICT DO NOTHING`` of the request's id and body, committed."""
    event_id = request.headers.get("X-Bench-Id", "")
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {FLOOR_TABLE} (id, body) VALUES (%s, %s) "  # noqa: S608 - constant
            "ON CONFLICT (id) DO NOTHING",
            [event_id, request.body],
        )
    return HttpResponse(b'{"status":"ok"}', status=202, content_type="application/json")


@csrf_exempt
def raw_insert_notify(request):
    """The same insert, with a ``pg_notify`` in the same transaction: what waking a relay
    by ``LISTEN/NOTIFY`` would add to every accepted request (notifications are queued
    under one lock at commit)."""
    event_id = request.headers.get("X-Bench-Id", "")
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH ins AS (INSERT INTO {FLOOR_TABLE} (id, body) VALUES (%s, %s) "  # noqa: S608
            "ON CONFLICT (id) DO NOTHING RETURNING id) "
            "SELECT pg_notify('bench_inbox', '') FROM ins",
            [event_id, request.body],
        )
    return HttpResponse(b'{"status":"ok"}', status=202, content_type="application/json")


def bare_insert(request):
    """The bare floor (``bench.bare_wsgi``: no middleware at all): one raw insert of the
    request's id and its raw body, as a plain Django view would write it, committed."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {FLOOR_TABLE} (id, body) VALUES (%s, %s) "  # noqa: S608 - constant
            "ON CONFLICT (id) DO NOTHING",
            [request.headers.get("X-Bench-Id", ""), request.body],
        )
    return HttpResponse(b'{"status":"ok"}', status=202, content_type="application/json")


# The inbox row's values that a bare view has no work for, at the widths a bench delivery
# gives them (bench.ingest): the types and the event's fields, the two fingerprints, the
# headers kept, the secret's fingerprint. Only the id, the body, the peer and the instants
# come from the request.
_WIDE_TEMPLATE = {
    "source_id": 1,
    "event_type": "research.document.updated",
    "entity_id": "doc-0",
    "entity_type": "research_document",
    "source_version": 1,
    "tenant_id": "",
    "idempotency_key": "",
    "payload_hash": "0" * 64,
    "content_fingerprint": "0" * 64,
    "body_key": None,
    "headers": Jsonb(
        {
            "x-webhook-id": "evt-bench-1000000000",
            "x-webhook-signature": "v1=cc536e13b...",
            "x-webhook-timestamp": "1796320171",
        }
    ),
    "secret_fingerprint": "0" * 16,
    "signature_valid": True,
    "processing_status": "received",
    "http_status": 202,
    "error_message": "",
    "attempts": 0,
    "delivery_count": 1,
}
_WIDE_COLUMNS = (
    "event_id",
    "raw_body",
    "remote_addr",
    "occurred_at",
    "received_at",
    "last_seen_at",
    *_WIDE_TEMPLATE,
)
_WIDE_INSERT = (
    f"INSERT INTO {WIDE_FLOOR_TABLE} ({', '.join(_WIDE_COLUMNS)})"  # noqa: S608 - constant
    f" VALUES ({', '.join(['%s'] * len(_WIDE_COLUMNS))})"
)


def bare_insert_wide(request):
    """The bare floor (``bench.bare_wsgi``: no middleware at all): one raw insert of a row as
    wide as the inbox's, into a table with the inbox's columns, as a plain Django view would
    write it, committed. The request gives the event id (``X-Bench-Id``), the body and the
    peer; the rest is the template above."""
    now = timezone.now()
    params = [
        request.headers.get("X-Bench-Id", ""),
        request.body,
        request.META.get("REMOTE_ADDR"),
        now,
        now,
        now,
        *_WIDE_TEMPLATE.values(),
    ]
    with connection.cursor() as cursor:
        cursor.execute(_WIDE_INSERT, params)
    return HttpResponse(b'{"status":"ok"}', status=202, content_type="application/json")


def bare_insert_hmac(request):
    """The three-column floor (``bench.bare_wsgi``: no middleware at all), the plainest
    receiver a user would write: the HMAC-SHA256 of ``<timestamp>.<body>`` checked against
    the ``X-Webhook-Signature`` header in constant time, a stale timestamp refused, then one
    raw ``INSERT ... ON CONFLICT DO NOTHING`` of ``(event_id, payload jsonb, received_at)``,
    committed. The event id is the ``X-Webhook-Id`` header."""
    timestamp = request.headers.get("X-Webhook-Timestamp", "")
    signature = request.headers.get("X-Webhook-Signature", "").removeprefix("v1=")
    body = request.body
    expected = hmac.new(_HMAC_KEY, timestamp.encode() + b"." + body, hashlib.sha256)
    if not hmac.compare_digest(expected.hexdigest(), signature):
        return HttpResponse(status=401)
    if (
        not timestamp.isdigit()
        or abs(time.time() - int(timestamp)) > _TOLERANCE_SECONDS
    ):
        return HttpResponse(status=400)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {HMAC_FLOOR_TABLE} (event_id, payload, received_at)"  # noqa: S608
            " VALUES (%s, %s::jsonb, %s) ON CONFLICT (event_id) DO NOTHING",
            [request.headers.get("X-Webhook-Id", ""), body.decode(), timezone.now()],
        )
    return HttpResponse(b'{"status":"ok"}', status=202, content_type="application/json")


def hmac_floor_table_sql() -> list[str]:
    """The statements that (re)create the three-column floor's table, empty."""
    return [
        f"DROP TABLE IF EXISTS {HMAC_FLOOR_TABLE}",
        f"CREATE TABLE {HMAC_FLOOR_TABLE} (event_id text PRIMARY KEY,"
        " payload jsonb NOT NULL, received_at timestamptz NOT NULL)",
    ]


def wide_floor_table_sql() -> list[str]:
    """The statements that (re)create the bare floor's table, empty, after the migrations."""
    return [
        f"DROP TABLE IF EXISTS {WIDE_FLOOR_TABLE}",
        f"CREATE TABLE {WIDE_FLOOR_TABLE} (LIKE webhooks_inboxevent"
        " INCLUDING DEFAULTS INCLUDING IDENTITY)",
        f"ALTER TABLE {WIDE_FLOOR_TABLE} ADD PRIMARY KEY (id)",
    ]


def floor_table_create() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (id text PRIMARY KEY, body bytea)"
        )
        cursor.execute(f"TRUNCATE {FLOOR_TABLE}")
