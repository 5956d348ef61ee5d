"""Admin audit console at scale: changelist and dashboard response times at 10,000 and at
1,000,000 inbox rows, measured in one run against a dedicated PostgreSQL database.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/wt_admin python -m bench.admin

The bench databases are ``<DATABASE_URL's name>_bench_10000`` and ``..._1000000`` (dropped and
re-created); the measurements alternate between them. Rows are
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
REPEAT = 9
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
    now: 97% processed, 1% each dead_lettered, failed and received; 3 sources; 5 types; event
    ids of one width (``evt-0000001``, ...), as a producer's ids are."""
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
                event_id, 'research.document.' || (ARRAY['created','updated','deleted',
                    'archived','restored'])[1 + g %% 5],
                'doc-' || (g %% 50000), 'document', g,
                ts - interval '2 seconds', '', '', encode(sha256(body), 'hex'),
                md5(g::text) || md5((g + 1)::text),
                body,
                '{{}}'::jsonb, true, ts,
                CASE WHEN g %% 100 < 97 THEN ts + interval '1 second' END,
                CASE WHEN g %% 100 < 97 THEN 'processed'
                     WHEN g %% 100 = 97 THEN 'dead_lettered'
                     WHEN g %% 100 = 98 THEN 'failed' ELSE 'received' END,
                202, CASE WHEN g %% 100 = 97 THEN 'permanent: bad data' ELSE '' END,
                1, 1 + (g %% 10 = 0)::int, ts
            FROM (
                SELECT g, event_id,
                    now() - (%s::int - g) * (%s::float8 * interval '1 day') / %s::int AS ts,
                    convert_to('{{"event_id": "' || event_id || '", "data": {{"summary": "x"}}}}',
                               'UTF8') AS body
                FROM generate_series(%s::int, %s::int) AS g,
                    LATERAL (SELECT 'evt-' || lpad(g::text, 7, '0') AS event_id) AS ids
            ) AS series
            """,  # noqa: S608 - the table name is the model's
            [stop, total_days, stop, start, stop - 1],
        )
        # A table of this size has been autovacuumed in production; without the visibility map
        # a freshly loaded table cannot use index-only scans.
        cursor.execute(f"VACUUM ANALYZE {table}")


def timed_get(client, url: str) -> float:
    start = time.perf_counter()
    response = client.get(url)
    elapsed = (time.perf_counter() - start) * 1000
    assert response.status_code == 200, url
    return elapsed


def count_queries(client, url: str) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    counts = [q["sql"].upper() for q in queries if "COUNT(" in q["sql"].upper()]
    # A full-table count: no LIMIT around it and no WHERE to take an index range.
    full = [sql for sql in counts if "LIMIT" not in sql and "WHERE" not in sql]
    return {
        "queries": len(queries),
        "count_queries": len(counts),
        "full_table_count_queries": len(full),
    }


def search_rows(url: str) -> int:
    """The inbox rows the changelist's search ``?q=`` of ``url`` finds."""
    from urllib.parse import parse_qs

    from webhooks.models import InboxEvent
    from webhooks.selectors import inbox_event_search_q

    term = parse_qs(urlparse(url).query)["q"][0]
    return InboxEvent.objects.filter(inbox_event_search_q(term=term)).count()


def use_database(name: str) -> None:
    from django.db import connection

    connection.close()
    connection.settings_dict["NAME"] = name


def prepare(name: str, size: int) -> float:
    """Migrates the database ``name`` and loads ``size`` rows; returns the load time."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from webhooks.models import WebhookSource

    use_database(name)
    call_command("migrate", verbosity=0)
    for slug in ("papers", "github", "preprints"):
        WebhookSource.objects.create(slug=slug, handler="research")
    get_user_model().objects.create_superuser("bench", "b@example.com", "bench")
    started = time.perf_counter()
    insert_rows(1, size + 1, total_days=size / EVENTS_PER_DAY)
    return round(time.perf_counter() - started, 1)


def main() -> int:
    url, admin_url, base_name = bench_database_url()
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    names = {size: f"{base_name}_{size}" for size in SIZES}
    for name in names.values():
        recreate_database(admin_url, name)

    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    settings.ALLOWED_HOSTS = ["*"]
    results: dict[str, dict] = {}
    for size, name in names.items():
        results[str(size)] = {"load_seconds": prepare(name, size)}
        print(
            f"{size} rows loaded in {results[str(size)]['load_seconds']}s",
            file=sys.stderr,
        )

    use_database(names[SIZES[0]])
    from webhooks.models import WebhookSource

    source_id = WebhookSource.objects.get(slug="github").pk  # same id in both databases
    pages = {
        "inbox": "/admin/webhooks/inboxevent/",
        "inbox_status_filter": "/admin/webhooks/inboxevent/?processing_status__exact=processed",
        "inbox_source_filter": f"/admin/webhooks/inboxevent/?source__id__exact={source_id}",
        "inbox_type_filter": "/admin/webhooks/inboxevent/?event_type=research.document.updated",
        # Event ids are of one width (as a producer's ids are), so that a term finds the same
        # rows in both tables: a page of matches (evt-0005000 to evt-0005099) and one.
        "inbox_search": "/admin/webhooks/inboxevent/?q=evt-00050",
        "inbox_search_one": "/admin/webhooks/inboxevent/?q=evt-0005000",
        "dead_letter_queue": "/admin/webhooks/deadletteredevent/",
        "dashboard": "/admin/",
    }
    clients = {}
    for size, name in names.items():
        use_database(name)
        client = Client()
        client.force_login(get_user_model().objects.get(username="bench"))
        clients[size] = client
        for page in pages.values():  # warm-up
            timed_get(client, page)
        for key, page in pages.items():
            results[str(size)][key] = count_queries(client, page)
            if "?q=" in page:
                results[str(size)][key]["rows_found"] = search_rows(page)
    for key, page in pages.items():
        # A search is compared with itself only where it finds the same rows in both tables:
        # else the ratio reads a longer page, not a larger table.
        found = {results[str(size)][key].get("rows_found") for size in SIZES}
        if len(found) != 1:
            raise SystemExit(f"{page} finds {found} rows in the two tables")
    # Rounds alternate between the two sizes, so that load from other processes on the
    # machine falls on both alike.
    samples = {(size, key): [] for size in SIZES for key in pages}
    for _ in range(REPEAT):
        for size, name in names.items():
            use_database(name)
            for key, page in pages.items():
                samples[(size, key)].append(timed_get(clients[size], page))
    summary = {}
    for key in pages:
        for size in SIZES:
            results[str(size)][key]["median_ms"] = round(
                statistics.median(samples[(size, key)]), 1
            )
            results[str(size)][key]["min_ms"] = round(min(samples[(size, key)]), 1)
        small, large = results[str(SIZES[0])][key], results[str(SIZES[1])][key]
        ratio = large["median_ms"] / max(small["median_ms"], 0.1)
        summary[key] = {
            "ms_10k": small["median_ms"],
            "ms_1m": large["median_ms"],
            "ratio": round(ratio, 2),
            "ok": ratio <= TARGET_RATIO
            and large["median_ms"] < TARGET_MS
            and large["full_table_count_queries"] == 0,
        }
    # Sealing throughput and verification on the large table (off the request path).
    from datetime import timedelta

    from django.utils import timezone

    from audit.sealer import ledger_rows_seal
    from audit.verification import log_verify

    use_database(names[SIZES[-1]])
    started = time.perf_counter()
    sealed = ledger_rows_seal(
        now=timezone.now() + timedelta(minutes=5), max_batches=20
    ).leaves
    seal_seconds = time.perf_counter() - started
    started = time.perf_counter()
    verify = log_verify()
    verify_seconds = time.perf_counter() - started
    sealing = {
        "rows_sealed": sealed,
        "seal_rows_per_second": round(sealed / seal_seconds),
        "verify_entries_per_second": round(verify.entries_checked / verify_seconds),
        # The rows of the 1M table not sealed in this bounded round are named not logged.
        "verify_problems": len(verify.problems),
    }
    use_database(names[SIZES[0]])
    report = {
        "sealing_at_1m": sealing,
        "benchmark": "admin",
        "sizes": list(SIZES),
        "events_per_day": EVENTS_PER_DAY,
        "repeat": REPEAT,
        "target": {"ratio_max": TARGET_RATIO, "ms_max_at_1m": TARGET_MS},
        "summary": summary,
        "details": results,
    }
    out = ROOT / "var" / "bench" / "admin.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps({"summary": summary, "sealing_at_1m": sealing}, indent=2))
    return 0 if all(v["ok"] for v in summary.values()) else 1


def run(ctx) -> list:
    """For ``bench.run``: the measurement runs in its own process (it configures Django for its
    own databases), then each page becomes a figure next to its 10,000-row floor."""
    import subprocess

    from bench.harness import BENCH_DATABASE_URL, Figure

    env = dict(os.environ, DATABASE_URL=BENCH_DATABASE_URL)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [sys.executable, "-m", "bench.admin"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    out = ROOT / "var" / "bench" / "admin.json"
    if not out.exists() or result.returncode not in (0, 1):
        raise RuntimeError(f"bench.admin failed:\n{result.stderr[-3000:]}")
    report = json.loads(out.read_text())
    figures = []
    for page, row in report["summary"].items():
        figures.append(
            Figure(
                "admin",
                f"{page} at 1M rows",
                row["ms_1m"],
                "ms",
                floor_name="same page at 10k rows",
                floor_value=row["ms_10k"],
                target_ratio=TARGET_RATIO,
                higher_is_better=False,
                extra={"under_300_ms": row["ms_1m"] < TARGET_MS},
            )
        )
    sealing = report["sealing_at_1m"]
    figures.append(
        Figure(
            "admin", "sealing rows/s at 1M", sealing["seal_rows_per_second"], "rows/s"
        )
    )
    figures.append(
        Figure(
            "admin",
            "audit_verify entries/s at 1M",
            sealing["verify_entries_per_second"],
            "entries/s",
        )
    )
    return figures


if __name__ == "__main__":
    sys.exit(main())
