"""The dashboard's inbox figures counted by the hour (``audit.figures``): the same figures as
a live count of the window, before the first count, after one, and after statuses changed
behind it; the periodic count's wiring; and, on PostgreSQL, what the page's and the count's
statements read of the inbox."""

import random
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Count, Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.figures import (
    COUNTED_LAG,
    HOUR,
    InboxFigures,
    hour_start,
    inbox_figures_between,
    inbox_figures_count,
    inbox_figures_sql,
    latency_bucket,
    latency_percentiles,
    pause_windows,
    window_start,
)
from audit.models import InboxFiguresCounted, InboxHourlyFigures, InboxHourlyLatency
from audit.selectors import dashboard_figures
from tests.webhooks.factories import (
    InboxEventFactory,
    WebhookSourceFactory,
    inbox_partitions_with_rows,
)
from webhooks.models import InboxEvent

pytestmark = pytest.mark.django_db

# The figures of the dashboard that come from the inbox's events in the window.
INBOX_KEYS = (
    "since",
    "events",
    "deliveries",
    "by_status",
    "duplicate_ratio",
    "processing_p50",
    "processing_p95",
    "held_events",
    "held_p50",
    "held_p95",
    "producer_delay_p50",
    "producer_delay_p95",
    "dead_letters_24h",
    "per_hour",
)


def _vendors() -> list[str]:
    """This database's way of reading the figures, and the Python one of the embedded
    default's SQLite, which runs anywhere (as in ``test_dashboard.py``)."""
    return sorted({connection.vendor, "sqlite"})


def percentile_cont(values: list[float], q: float) -> float:
    values = sorted(values)
    position = q * (len(values) - 1)
    low = int(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


def _event(
    source, *, received, status="processed", took=None, delay=10.0, deliveries=1
):
    return InboxEventFactory(
        source=source,
        processing_status=status,
        received_at=received,
        last_seen_at=received,
        processed_at=None if took is None else received + timedelta(seconds=took),
        occurred_at=received - timedelta(seconds=delay),
        delivery_count=deliveries,
    )


def _dataset(now):
    """Events across several hours of the window and every kind of status, one in the
    count's extra hour before the window and one older, one received after the count
    stops. Returns the events by name."""
    hour = hour_start(now)
    a, b = WebhookSourceFactory(slug="feed-a"), WebhookSourceFactory(slug="feed-b")
    return {
        "p1": _event(a, received=hour - 5 * HOUR + timedelta(minutes=1), took=1.0),
        "p2": _event(
            b, received=hour - 5 * HOUR + timedelta(minutes=2), took=2.0, deliveries=3
        ),
        "p4": _event(a, received=hour - 5 * HOUR + timedelta(minutes=3), took=4.0),
        "dead": _event(
            b,
            received=hour - 5 * HOUR + timedelta(minutes=4),
            status="dead_lettered",
            took=30.0,
            delay=-0.5,  # a producer's clock ahead of ours
        ),
        "failed": _event(
            a, received=hour - 5 * HOUR + timedelta(minutes=5), status="failed"
        ),
        "fast": _event(a, received=hour - 2 * HOUR, took=0.5, deliveries=2),
        "faster": _event(b, received=hour - 2 * HOUR + timedelta(seconds=1), took=0.7),
        "waiting": _event(
            a, received=hour - 2 * HOUR + timedelta(minutes=59), status="received"
        ),
        "first_hour": _event(b, received=window_start(now), took=3.0, delay=7200.0),
        "before_window": _event(a, received=window_start(now) - timedelta(seconds=1)),
        "long_ago": _event(a, received=now - timedelta(days=2), took=1.0),
        "after_count": _event(
            b, received=now - COUNTED_LAG / 2, status="received", delay=0.0
        ),
    }


def live_figures(now) -> dict:
    """What the window's figures are, read straight from the inbox rows as they stand."""
    since = window_start(now)
    rows = list(InboxEvent.objects.filter(received_at__gte=since))
    by_status = dict(
        InboxEvent.objects.filter(received_at__gte=since)
        .order_by()
        .values_list("processing_status")
        .annotate(n=Count("id"))
    )
    deliveries = (
        InboxEvent.objects.filter(received_at__gte=since).aggregate(
            n=Sum("delivery_count")
        )["n"]
        or 0
    )
    processing = [
        (row.processed_at - row.received_at).total_seconds()
        for row in rows
        if row.processed_at is not None
    ]
    delay = [(row.received_at - row.occurred_at).total_seconds() for row in rows]
    per_hour = {}
    for row in rows:
        per_hour[hour_start(row.received_at)] = (
            per_hour.get(hour_start(row.received_at), 0) + 1
        )
    return {
        "events": len(rows),
        "deliveries": deliveries,
        "by_status": by_status,
        "processing": (
            percentile_cont(processing, 0.5),
            percentile_cont(processing, 0.95),
        ),
        "delay": (percentile_cont(delay, 0.5), percentile_cont(delay, 0.95)),
        "per_hour": per_hour,
    }


def assert_live(figures: dict, now) -> None:
    expected = live_figures(now)
    assert figures["events"] == expected["events"]
    assert figures["deliveries"] == expected["deliveries"]
    shown = {
        row["status"]: row["count"] for row in figures["by_status"] if row["count"]
    }
    assert shown == expected["by_status"]
    assert figures["dead_letters_24h"] == expected["by_status"].get("dead_lettered", 0)
    assert (figures["processing_p50"], figures["processing_p95"]) == pytest.approx(
        expected["processing"]
    )
    assert (
        figures["producer_delay_p50"],
        figures["producer_delay_p95"],
    ) == pytest.approx(expected["delay"])
    assert {p["hour"]: p["count"] for p in figures["per_hour"] if p["count"]} == (
        expected["per_hour"]
    )
    assert len(figures["per_hour"]) == 24
    assert figures["per_hour"][0]["hour"] == window_start(now)
    assert figures["per_hour"][-1]["hour"] == hour_start(now)


def _inbox_part(figures: dict) -> dict:
    return {key: figures[key] for key in INBOX_KEYS}


@pytest.mark.parametrize("vendor", _vendors())
def test_the_counted_figures_are_the_live_count_and_follow_a_later_status_change(
    monkeypatch, vendor
):
    monkeypatch.setattr(connection, "vendor", vendor)
    now = timezone.now()
    events = _dataset(now)

    # A fresh install: nothing counted yet, every event of the window read live.
    before = dashboard_figures(now=now)
    assert before["counted_to"] is None
    assert_live(before, now)
    assert before["events"] == 10  # not the two before the window
    assert before["since"] == hour_start(now) - 23 * HOUR

    counted = inbox_figures_count(now=now)
    assert counted.counted_to == now - COUNTED_LAG
    assert counted.counted_from == hour_start(now - COUNTED_LAG) - 24 * HOUR
    after = dashboard_figures(now=now)
    assert (after["counted_to"], after["counted_at"]) == (now - COUNTED_LAG, now)
    # The same figures, whether read live or from the count.
    assert _inbox_part(after) == _inbox_part(before)
    # The count holds the hours it covers, the window's and the hour before it.
    hours = set(InboxHourlyFigures.objects.values_list("hour", flat=True))
    assert hours == {
        hour_start(now) - 5 * HOUR,
        hour_start(now) - 2 * HOUR,
        window_start(now),
        window_start(now) - HOUR,
    }

    # Statuses change after the count: a row it counted shows its counted status until
    # the next count; a row received after the count stopped shows its own at once.
    InboxEvent.objects.filter(pk=events["waiting"].pk).update(
        processing_status="processed",
        processed_at=events["waiting"].received_at + timedelta(seconds=8),
    )
    InboxEvent.objects.filter(pk=events["failed"].pk).update(
        processing_status="dead_lettered",
        processed_at=events["failed"].received_at + timedelta(seconds=9),
    )
    InboxEvent.objects.filter(pk=events["after_count"].pk).update(
        processing_status="processed",
        processed_at=events["after_count"].received_at + timedelta(seconds=1),
    )
    stale = dashboard_figures(now=now)
    shown = {row["status"]: row["count"] for row in stale["by_status"]}
    assert shown["received"] == 1  # "waiting", as counted
    assert shown["failed"] == 1
    assert shown["processed"] == 7  # with "after_count", live
    assert stale["dead_letters_24h"] == 1

    later = now + timedelta(seconds=5)
    inbox_figures_count(now=later)
    fresh = dashboard_figures(now=later)
    assert_live(fresh, later)
    shown = {row["status"]: row["count"] for row in fresh["by_status"]}
    assert (shown["received"], shown["failed"], shown["dead_lettered"]) == (0, 0, 2)


@pytest.mark.parametrize("vendor", _vendors())
def test_a_count_that_does_not_cover_the_window_is_not_read(monkeypatch, vendor):
    """A count made after the window's start moved on past its first hour (a dashboard
    whose clock is far behind, or a count from the future) leaves the whole window read
    live; so does a count that stopped long ago, for what it does not hold."""
    monkeypatch.setattr(connection, "vendor", vendor)
    now = timezone.now()
    _dataset(now)
    inbox_figures_count(now=now - 3 * HOUR)
    figures = dashboard_figures(now=now)
    assert figures["counted_to"] == now - 3 * HOUR - COUNTED_LAG
    assert_live(figures, now)

    inbox_figures_count(now=now + 3 * HOUR)
    figures = dashboard_figures(now=now)
    assert figures["counted_to"] is None
    assert_live(figures, now)


def test_a_count_writes_only_what_changed_and_keeps_only_its_hours():
    now = timezone.now()
    events = _dataset(now)
    InboxHourlyFigures.objects.create(
        hour=hour_start(now) - 72 * HOUR,
        processing_status="processed",
        events=5,
        deliveries=5,
    )
    inbox_figures_count(now=now)
    assert not InboxHourlyFigures.objects.filter(
        hour__lt=hour_start(now) - 24 * HOUR
    ).exists()
    assert InboxHourlyLatency.objects.filter(figure="producer_delay", bucket__lt=0)

    def writes() -> list[str]:
        return [
            query["sql"]
            for query in queries.captured_queries
            if re.match(r"\s*(INSERT|UPDATE|DELETE)\b.*audit_inboxhourly", query["sql"])
        ]

    with CaptureQueriesContext(connection) as queries:
        inbox_figures_count(now=now + timedelta(seconds=1))
    assert writes() == []  # nothing changed
    InboxEvent.objects.filter(pk=events["fast"].pk).update(processing_status="failed")
    with CaptureQueriesContext(connection) as queries:
        inbox_figures_count(now=now + timedelta(seconds=2))
    assert len(writes()) == 1  # the hour's processed and failed rows, in one upsert
    figures = dict(
        InboxHourlyFigures.objects.filter(hour=hour_start(now) - 2 * HOUR).values_list(
            "processing_status", "events"
        )
    )
    assert figures == {"processed": 1, "failed": 1, "received": 1}
    InboxEvent.objects.filter(pk=events["faster"].pk).update(processing_status="failed")
    with CaptureQueriesContext(connection) as queries:
        inbox_figures_count(now=now + timedelta(seconds=3))
    # The hour's processed row deleted, its failed row updated.
    assert [sql.split()[0] for sql in writes()] == ["DELETE", "INSERT"]
    # A count that ends after a later one leaves the later one standing.
    InboxEvent.objects.filter(pk=events["p1"].pk).update(processing_status="failed")
    with CaptureQueriesContext(connection) as queries:
        kept = inbox_figures_count(now=now + timedelta(seconds=2))
    assert writes() == []
    assert kept.counted_at == now + timedelta(seconds=3)


def test_the_index_says_what_was_counted_when(auditor_client):
    from django.urls import reverse

    now = timezone.now()
    _dataset(now)
    page = auditor_client.get(reverse("admin:index")).content.decode()
    assert "not counted by the hour yet" in page
    counted = inbox_figures_count()
    page = auditor_client.get(reverse("admin:index")).content.decode()
    window = re.search(r'<p class="help" id="dash-window">(.*?)</p>', page)[1]
    from core.times import time_display

    assert f"as they stood at {time_display(counted.counted_at)}" in window
    assert f"received before {time_display(counted.counted_to)}" in window
    assert f"from {time_display(window_start(timezone.now()))}" in window


def test_the_count_runs_from_beat_every_interval(settings):
    from audit.tasks import inbox_figures_task
    from config.celery_app import app

    entry = app.conf.beat_schedule["dashboard-figures"]
    assert entry["task"] == "audit.inbox_figures"
    assert float(getattr(entry["schedule"], "seconds", entry["schedule"])) == (
        settings.DASHBOARD_FIGURES_INTERVAL_SECONDS
    )
    assert app.tasks["audit.inbox_figures"].name == inbox_figures_task.name
    InboxEventFactory(received_at=timezone.now() - timedelta(minutes=5))
    result = inbox_figures_task.apply().get()
    counted = InboxFiguresCounted.objects.get()
    assert result["counted_to"] == counted.counted_to.isoformat()
    assert InboxHourlyFigures.objects.get().events == 1


def test_percentiles_from_the_buckets_are_within_one_percent():
    """Read from the buckets, a percentile lies in the exact one's bucket: within 1%."""
    rng = random.Random(20261206)
    values = [rng.lognormvariate(-1, 1.5) for _ in range(20_000)]
    values += [-rng.expovariate(2) for _ in range(500)]  # clocks ahead
    values += [0.0] * 50 + [1e-4] * 5 + [86400 * 334.0] * 3
    histogram = InboxFigures()
    for value in values:
        histogram.value_add(hour_start(timezone.now()), "processing", value)
    merged = {bucket: row for (_, _, bucket), row in histogram.latency.items()}
    p50, p95 = latency_percentiles(merged)
    assert p50 == pytest.approx(percentile_cont(values, 0.5), rel=0.01)
    assert p95 == pytest.approx(percentile_cont(values, 0.95), rel=0.01)
    # Each bucket spans 1%, and the buckets follow the values' order.
    assert latency_bucket(1.0) + 1 == latency_bucket(1.0101)
    assert latency_bucket(0.0009) == latency_bucket(-0.0009) == 0
    assert latency_bucket(-2.0) == -latency_bucket(2.0)
    ordered = sorted(values)
    assert [latency_bucket(v) for v in ordered] == sorted(
        latency_bucket(v) for v in ordered
    )


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="PostgreSQL's reading of the figures"
)
def test_postgresql_reads_the_buckets_python_reads(monkeypatch):
    """The statement's buckets are ``latency_bucket``'s: the same figures either way."""
    now = timezone.now()
    _dataset(now)
    rng = random.Random(7)
    source = WebhookSourceFactory(slug="spread")
    for n in range(300):
        _event(
            source,
            received=now - timedelta(minutes=n),
            took=rng.lognormvariate(0, 2),
            delay=rng.uniform(-5, 5000),
        )
    start = window_start(now)
    in_sql = inbox_figures_between(start=start, end=None, now=now)
    monkeypatch.setattr(connection, "vendor", "sqlite")
    in_python = inbox_figures_between(start=start, end=None, now=now)
    assert in_sql.counts == in_python.counts
    assert in_sql.latency.keys() == in_python.latency.keys()
    for key, row in in_sql.latency.items():
        assert row == pytest.approx(in_python.latency[key]), key


# --- what the statements read, on PostgreSQL ------------------------------------------------


def _rows_insert(source, *, start, end, step_seconds: int) -> int:
    """Processed events received every ``step_seconds`` from ``start`` to before ``end``,
    in one statement; returns how many."""
    table = connection.ops.quote_name(InboxEvent._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} (source_id, event_id, event_type, entity_id,
                entity_type, tenant_id, idempotency_key, payload_hash,
                content_fingerprint, headers, signature_valid, received_at, processed_at,
                occurred_at, processing_status, http_status, error_message,
                dead_letter_cause, attempts, delivery_count, last_seen_at)
            SELECT %s, 'e-' || g, 't', '', '', '', '', 'h', 'f', '{{}}', TRUE,
                   %s + g * %s * interval '1 second',
                   %s + g * %s * interval '1 second' + (g %% 7) * interval '100 ms',
                   %s + g * %s * interval '1 second' - interval '2 seconds',
                   'processed', 202, '', '', 1, 1, %s
              FROM generate_series(0, %s - 1) g
            """,  # noqa: S608 - the table name is the model's
            [
                source.pk,
                *[start, step_seconds] * 3,
                start,
                int((end - start).total_seconds() // step_seconds),
            ],
        )
        return cursor.rowcount


def _inbox_scans(sql: str, params=None) -> list[dict]:
    """The scans of the inbox's partitions that hold rows in the plan of ``sql``, run."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0][0]["Plan"]
        cursor.execute(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid"
        )
        indexes = dict(cursor.fetchall())
    populated = inbox_partitions_with_rows()
    scans = []

    def walk(node, under=None):
        if node.get("Relation Name") in populated:
            scans.append(
                {**node, "Index": indexes.get(node.get("Index Name") or under)}
            )
        child_index = None
        if node["Node Type"] == "Bitmap Heap Scan":
            (child,) = node["Plans"]
            child_index = child.get("Index Name")
        for child in node.get("Plans", []):
            walk(child, child_index)

    walk(plan)
    return scans


def _through_received_at(scan: dict) -> bool:
    return bool(scan["Index"]) and scan["Index"].endswith("(received_at DESC)")


@pytest.mark.slow  # tens of thousands of rows: make test only (docs/development.md)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans")
def test_the_page_reads_the_count_and_only_the_inbox_since_it():
    """Days of events, then a count: the dashboard reads the count's rows and, of the
    inbox, only the events received since the count stopped, through the ``received_at``
    index; the count reads the partitions of its hours' days only."""
    from webhooks.partitions import DAY, day_start, inbox_partitions_ensure

    inbox_partitions_ensure()
    now = day_start(timezone.now()) + 3 * DAY + 12 * HOUR  # partitions made ahead
    source = WebhookSourceFactory(slug="busy")
    _rows_insert(source, start=now - 3 * DAY, end=now - 26 * HOUR, step_seconds=30)
    _rows_insert(source, start=now - 26 * HOUR, end=now, step_seconds=4)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {InboxEvent._meta.db_table}")
    counted = inbox_figures_count(now=now)
    live = InboxEvent.objects.filter(received_at__gte=counted.counted_to).count()
    assert 0 < live <= COUNTED_LAG.total_seconds() // 4 + 1

    with CaptureQueriesContext(connection) as queries:
        figures = dashboard_figures(now=now)
    assert figures["events"] == (
        InboxEvent.objects.filter(received_at__gte=window_start(now)).count()
    )
    inbox = [
        q["sql"] for q in queries.captured_queries if "webhooks_inboxevent" in q["sql"]
    ]
    (figures_sql,) = [sql for sql in inbox if "date_trunc" in sql]
    scans = _inbox_scans(figures_sql)
    assert scans
    # Through the index; or the whole of a partition all of whose rows it wants.
    assert all(
        _through_received_at(s)
        or (s["Node Type"] == "Seq Scan" and not s.get("Rows Removed by Filter"))
        for s in scans
    ), scans
    assert sum(s["Actual Rows"] * s["Actual Loops"] for s in scans) == live
    # The all-time dead letters: a capped count through the status index (none here).
    (dead,) = [sql for sql in inbox if "dead_lettered" in sql]
    assert all(
        "(processing_status, received_at DESC)" in (s["Index"] or "")
        for s in _inbox_scans(dead)
    ), _inbox_scans(dead)
    # Nothing else of the page reads the inbox.
    assert len(inbox) == 2, inbox

    # The count: the partitions of its hours' days, nothing of the days before; in each,
    # through the index, or whole when its hours are most of the partition.
    start = counted.counted_from
    sql, params = inbox_figures_sql(
        start=start, end=counted.counted_to, windows=pause_windows(since=start, now=now)
    )
    scans = _inbox_scans(sql, params)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT tableoid::regclass::text FROM {InboxEvent._meta.db_table}"  # noqa: S608
            " GROUP BY 1 HAVING max(received_at) < %s",
            [start],
        )
        before = {row[0] for row in cursor.fetchall()}
    assert before  # days of rows, none of which the count reads
    assert not before & {s["Relation Name"] for s in scans}, scans
    assert all(
        _through_received_at(s)
        or (
            s["Node Type"] == "Seq Scan"
            and s.get("Rows Removed by Filter", 0) <= s["Actual Rows"]
        )
        for s in scans
    ), scans
    assert sum(s["Actual Rows"] * s["Actual Loops"] for s in scans) == (
        InboxEvent.objects.filter(
            received_at__gte=start, received_at__lt=counted.counted_to
        ).count()
    )
