"""Floor endpoints, mounted under /_bench/ only when BENCH_ENDPOINTS is on (never in production).

They run in the same gunicorn server as the product, so a product figure divided by a floor
figure measures what the product adds, not what the machine can do."""

from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

FLOOR_TABLE = "bench_floor"


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


def floor_table_create() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (id text PRIMARY KEY, body bytea)"
        )
        cursor.execute(f"TRUNCATE {FLOOR_TABLE}")
