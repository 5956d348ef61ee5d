"""The dashboard's figures from known data."""

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.selectors import dashboard_figures
from audit.templatetags.audit_dashboard import chart_bars
from core.selectors import capped_count
from tests.idempotency.factories import IdempotencyRecordFactory
from tests.webhooks.factories import (
    DeadLetteredEventFactory,
    InboxEventFactory,
    WebhookSourceFactory,
)
from webhooks.models import InboxEvent, SignatureFailure

pytestmark = pytest.mark.django_db


def test_dashboard_figures_cover_the_last_24_hours_only():
    now = timezone.now()
    source = WebhookSourceFactory()
    for seconds in (1, 2, 3, 4, 10):  # latencies occurred_at -> processed_at
        InboxEventFactory(
            source=source,
            processing_status="processed",
            occurred_at=now - timedelta(minutes=30),
            processed_at=now - timedelta(minutes=30) + timedelta(seconds=seconds),
            received_at=now - timedelta(minutes=29),
            delivery_count=2,  # one duplicate each
        )
    DeadLetteredEventFactory(source=source, received_at=now - timedelta(hours=2))
    # Older than 24 h: only the all-time dead-letter count sees it.
    DeadLetteredEventFactory(source=source, received_at=now - timedelta(days=3))
    SignatureFailure.objects.create(
        source=source, reason="mismatch", window_start=now - timedelta(hours=1), count=4
    )
    SignatureFailure.objects.create(
        source=source, reason="missing", window_start=now - timedelta(days=2), count=99
    )

    figures = dashboard_figures(now=now)

    assert figures["events"] == 6
    by_status = {row["status"]: row["count"] for row in figures["by_status"]}
    assert by_status["processed"] == 5
    assert by_status["dead_lettered"] == 1
    assert by_status["received"] == 0
    assert figures["deliveries"] == 11
    assert figures["duplicate_ratio"] == pytest.approx(5 / 11)
    assert figures["signature_failures"] == 4
    assert figures["invalid_signature_ratio"] == pytest.approx(4 / 15)
    assert figures["latency_p50"] == pytest.approx(3.0)
    assert figures["latency_p95"] == pytest.approx(8.8)  # percentile_cont
    assert figures["dead_letters"] == 2
    assert figures["stuck_keys"] == 0
    assert sum(point["count"] for point in figures["per_hour"]) == 6
    assert len(figures["per_hour"]) == 24
    bars = chart_bars(figures["per_hour"])
    assert max(bar["height"] for bar in bars) == 60  # the busiest hour fills the chart
    assert [bar["x"] for bar in bars] == [12 * i for i in range(24)]


def test_dashboard_on_an_empty_inbox():
    figures = dashboard_figures()
    assert figures["events"] == 0
    assert figures["duplicate_ratio"] == 0.0
    assert figures["latency_p50"] is None


def test_capped_count_stops_at_the_cap():
    InboxEventFactory.create_batch(5)
    assert capped_count(InboxEvent.objects.all(), cap=3) == 4
    assert capped_count(InboxEvent.objects.all(), cap=10) == 5


def test_dashboard_counts_idempotency_keys_stuck_in_processing():
    now = timezone.now()
    # Stuck: processing past the operation's own deadline, whatever the key's age.
    for key, status, age, deadline in (
        ("stuck", "processing", timedelta(minutes=10), now - timedelta(seconds=1)),
        ("young", "processing", timedelta(seconds=5), now + timedelta(seconds=85)),
        ("long", "processing", timedelta(hours=1), now + timedelta(minutes=5)),
        ("done", "succeeded", timedelta(minutes=10), None),
    ):
        IdempotencyRecordFactory(
            key=key,
            status=status,
            progress_deadline=deadline,
            created_at=now - age,
            updated_at=now - age,
        )
    assert dashboard_figures(now=now)["stuck_keys"] == 1
