"""The gauges the "no delivery from a source" alert compares (docs/runbook.md,
WebhookSourceSilent): the latest stored delivery of each enabled source and the interval an
operator expects between two, read at scrape time, cheaply however large the inbox."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from tests.webhooks.factories import (
    InboxEventFactory,
    WebhookSourceFactory,
    inbox_partitions_with_rows,
)
from webhooks.metrics import SourceDeliveryCollector
from webhooks.models import InboxEvent, WebhookSource
from webhooks.selectors import webhook_source_delivery_states

pytestmark = pytest.mark.django_db

LAST = "webhook_source_last_delivery_timestamp_seconds"
EXPECTED = "webhook_source_expected_delivery_interval_seconds"


def scraped(client) -> dict[str, dict[str, float]]:
    """``{metric: {source: value}}`` of the two gauges, from ``/metrics``."""
    found = {LAST: {}, EXPECTED: {}}
    text = client.get("/metrics").content.decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in found:
                found[sample.name][sample.labels["source"]] = sample.value
    return found


def test_each_enabled_source_exports_its_latest_delivery_and_its_expected_interval(
    client,
):
    now = timezone.now().replace(microsecond=0)
    busy = WebhookSourceFactory(slug="busy", expected_delivery_interval_seconds=3600)
    quiet = WebhookSourceFactory(slug="quiet")  # no expectation: never alerts
    WebhookSourceFactory(slug="new", expected_delivery_interval_seconds=600)
    off = WebhookSourceFactory(
        slug="off", is_enabled=False, expected_delivery_interval_seconds=60
    )
    for minutes, source in [(30, busy), (5, busy), (90, quiet), (1, off)]:
        InboxEventFactory(source=source, received_at=now - timedelta(minutes=minutes))

    found = scraped(client)

    # The latest new row, not the first; a source with none has no series (it never sent,
    # so it does not "normally send"); a disabled source answers 404 and has none either.
    assert found[LAST] == {
        "busy": (now - timedelta(minutes=5)).timestamp(),
        "quiet": (now - timedelta(minutes=90)).timestamp(),
    }
    assert found[EXPECTED] == {"busy": 3600.0, "new": 600.0}


def test_a_duplicate_delivery_is_not_a_new_delivery(client, source):
    from tests.integrations.research.factories import research_event
    from tests.webhooks.factories import signed_post

    body = research_event()
    assert signed_post(client, source.slug, body).status_code == 202
    first = scraped(client)[LAST][source.slug]
    InboxEvent.objects.update(received_at=timezone.now() - timedelta(hours=2))
    assert signed_post(client, source.slug, body).status_code == 200
    assert scraped(client)[LAST][source.slug] == pytest.approx(first - 7200, abs=5)


def test_the_collector_is_one_statement_whatever_the_number_of_sources(
    django_assert_num_queries,
):
    for n in range(5):
        source = WebhookSourceFactory(expected_delivery_interval_seconds=60 * (n + 1))
        InboxEventFactory(source=source)
    with django_assert_num_queries(1):
        families = list(SourceDeliveryCollector().collect())
    assert [len(family.samples) for family in families] == [5, 5]


def _rows_insert(sources: list[WebhookSource], *, count: int, start, step_seconds: int):
    """``count`` inbox rows received from ``start`` backwards, one every ``step_seconds``,
    the sources taking turns (as producers interleave in a busy inbox), in one statement."""
    table = connection.ops.quote_name(InboxEvent._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} (source_id, event_id, event_type, entity_id,
                entity_type, tenant_id, idempotency_key, payload_hash,
                content_fingerprint, headers, signature_valid, received_at,
                processing_status, http_status, error_message, dead_letter_cause,
                attempts, delivery_count, last_seen_at)
            SELECT (%s::bigint[])[1 + g %% %s], 'e-' || g, 't', '', '', '', '', 'h',
                'f', '{{}}', TRUE, %s - g * %s * interval '1 second', 'processed', 202,
                '', '', 1, 1, %s
            FROM generate_series(1, %s) g
            """,  # noqa: S608 - the table name is the model's
            [[s.pk for s in sources], len(sources), start, step_seconds, start, count],
        )


@pytest.mark.slow  # tens of thousands of rows: make test only (docs/development.md)
def test_a_silent_source_costs_one_index_probe_in_a_large_inbox():
    """The plan that walks the inbox's received_at index back until it meets a row of the
    source reads every row received since that source last sent: the very case the alert is
    for. The probe must go through the per-source index, silent source or not (one probe
    per day partition at most)."""
    now = timezone.now()
    busy = [WebhookSourceFactory(slug=f"busy-{n}") for n in range(10)]
    silent = WebhookSourceFactory(slug="silent", expected_delivery_interval_seconds=600)
    _rows_insert(busy, count=100_000, start=now, step_seconds=1)
    _rows_insert([silent], count=100, start=now - timedelta(days=30), step_seconds=7)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {InboxEvent._meta.db_table}")

    with CaptureQueriesContext(connection) as queries:
        states = {state.slug: state for state in webhook_source_delivery_states()}
    assert states["silent"].last_delivery_at == now - timedelta(days=30, seconds=7)
    (query,) = queries.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query["sql"])
        plan = cursor.fetchone()[0][0]["Plan"]

    scans = []

    def walk(node):
        if "Index Name" in node or node["Node Type"].startswith("Seq Scan"):
            scans.append(node)
        for child in node.get("Plans", []):
            walk(child)

    walk(plan)
    # On PostgreSQL the inbox is partitioned by day (docs/scaling.md, "Time partitions of
    # the inbox"): a probe per partition at most, through each one's copy of the index; an
    # empty partition may be read whole, which reads nothing.
    populated = inbox_partitions_with_rows()
    inbox_scans = [s for s in scans if s["Relation Name"] in populated]
    assert inbox_scans
    assert all(
        (s.get("Index Name") or "").startswith("webhooks_inbox_source_idx")
        for s in inbox_scans
    ), [(s.get("Index Name"), s.get("Rows Removed by Filter")) for s in inbox_scans]
    # One row per source (11 loops), not the inbox walked back.
    assert sum(s["Actual Rows"] * s["Actual Loops"] for s in inbox_scans) <= 11
    assert all(s.get("Rows Removed by Filter", 0) == 0 for s in inbox_scans)
