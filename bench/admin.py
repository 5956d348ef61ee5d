"""Admin audit console at scale: changelist and dashboard response times at 10,000 and at
1,000,000 inbox rows, measured in one run against a dedicated PostgreSQL database.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/wt_admin python -m bench.admin

The bench database is ``<DATABASE_URL's name>_bench`` (dropped and re-created). Rows are
bulk-inserted with ``INSERT ... SELECT generate_series``. Traffic is modelled as a steady 5,000
events a day: the 1,000,000-row table holds more history, not more of today, as a growing
production table does. Writes JSON to ``var/bench/admin.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
SIZES = (10_000, 1_000_000)
EVENTS_PER_DAY = 5_000
REPEAT = 7
TARGET_MS = 300
TARGET_RATIO = 2.0


def bench_database_url() -> tuple[str, str, str]:
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/app")
    parsed = urlparse(base)
    name = (parsed.path.lstrip("/") or "app") + "_bench"
    admin_url = urlunparse(parsed._replace(path="/postgres"))
    return urlunparse(parsed._replace(path=f"/{name}")), admin_url, name


def recreate_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def insert_rows(start: int, stop: int, total_days: float) -> None:
    """Rows start..stop-1 (1-based position in time order), spread over ``total_days`` up to
    now: 97% processed, 1% each dead_lettered, failed and received; 3 sources; 5 types."""
    from django.db import connection

    from webhooks.models import InboxEvent

    table = InboxEvent._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} (
                source_id, event_id, event_type, entity_id, entity_type, source_version,
                occurred_at, tenant_id, idempotency_key, payload_hash, content_fingerprint,
                raw_body, headers, signature_valid, received_at, processed_at,
                processing_status, http_status, error_message, attempts, delivery_count,
                last_seen_at
            )
            SELECT
                (SELECT min(id) FROM webhooks_webhooksource) + g %% 3,
                'evt-' || g, 'research.document.' || (ARRAY['created','updated','deleted',
                    'archived','restored'])[1 + g %% 5],
                'doc-' || (g %% 50000), 'document', g,
                ts - interval '2 seconds', '', '', md5(g::text) || md5(g::text),
                md5(g::text) || md5((g + 1)::text),
                convert_to('{{"event_id": "evt-' || g || '", "data": {{"summary": "x"}}}}',
                           'UTF8'),
                '{{}}'::jsonb, true, ts,
                CASE WHEN g %% 100 < 97 THEN ts + interval '1 second' END,
                CASE WHEN g %% 100 < 97 THEN 'processed'
                     WHEN g %% 100 = 97 THEN 'dead_lettered'
                     WHEN g %% 100 = 98 THEN 'failed' ELSE 'received' END,
                202, CASE WHEN g %% 100 = 97 THEN 'permanent: bad data' ELSE '' END,
                1, 1 + (g %% 10 = 0)::int, ts
            FROM (
                SELECT g, now() - (%s - g) * (%s * interval '1 day') / %s AS ts
                FROM generate_series(%s, %s) AS g
            ) AS series
            """,  # noqa: S608 - the table name is the model's
            [stop, total_days, stop, start, stop - 1],
        )
        cursor.execute(f"ANALYZE {table}")


def measure(client, url: str) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(2):
        assert client.get(url).status_code == 200, url
    times = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, url
    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper()]
    unbounded = [sql for sql in counts if "LIMIT" not in sql.upper()]
    return {
        "median_ms": round(statistics.median(times), 1),
        "min_ms": round(min(times), 1),
        "queries": len(queries),
        "unbounded_count_queries": len(unbounded),
    }


def main() -> int:
    url, admin_url, name = bench_database_url()
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    recreate_database(admin_url, name)

    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from webhooks.models import WebhookSource

    settings.ALLOWED_HOSTS = ["*"]
    call_command("migrate", verbosity=0)
    for slug in ("papers", "github", "preprints"):
        WebhookSource.objects.create(slug=slug, handler="research")
    user = get_user_model().objects.create_superuser("bench", "b@example.com", "bench")
    client = Client()
    client.force_login(user)
    source_id = WebhookSource.objects.get(slug="github").pk

    pages = {
        "inbox": "/admin/webhooks/inboxevent/",
        "inbox_status_filter": "/admin/webhooks/inboxevent/?processing_status__exact=processed",
        "inbox_source_filter": f"/admin/webhooks/inboxevent/?source__id__exact={source_id}",
        "inbox_search": "/admin/webhooks/inboxevent/?q=evt-5000",
        "dead_letter_queue": "/admin/audit/deadletteredevent/",
        "dashboard": "/admin/",
    }
    results: dict[str, dict] = {}
    inserted = 0
    for size in SIZES:
        started = time.perf_counter()
        # Every stage holds the same history density; rows are re-inserted in time order.
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE webhooks_inboxevent CASCADE")
        insert_rows(1, size + 1, total_days=size / EVENTS_PER_DAY)
        inserted = size
        load_s = round(time.perf_counter() - started, 1)
        results[str(size)] = {"load_seconds": load_s}
        for key, page in pages.items():
            results[str(size)][key] = measure(client, page)
        print(f"{size} rows loaded in {load_s}s", file=sys.stderr)
    small, large = results[str(SIZES[0])], results[str(SIZES[1])]
    summary = {}
    for key in pages:
        ratio = large[key]["median_ms"] / max(small[key]["median_ms"], 0.1)
        summary[key] = {
            "ms_10k": small[key]["median_ms"],
            "ms_1m": large[key]["median_ms"],
            "ratio": round(ratio, 2),
            "ok": ratio <= TARGET_RATIO
            and large[key]["median_ms"] < TARGET_MS
            and large[key]["unbounded_count_queries"] == 0,
        }
    report = {
        "benchmark": "admin",
        "rows": inserted,
        "events_per_day": EVENTS_PER_DAY,
        "target": {"ratio_max": TARGET_RATIO, "ms_max_at_1m": TARGET_MS},
        "summary": summary,
        "details": results,
    }
    out = ROOT / "var" / "bench" / "admin.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps(summary, indent=2))
    return 0 if all(v["ok"] for v in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
