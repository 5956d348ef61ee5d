"""The dashboard's figures from known data."""

import re
from datetime import timedelta

import pytest
from django.db import connection
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
    received = now - timedelta(minutes=30)
    for seconds in (1, 2, 3, 4, 10):  # processing times, received_at -> processed_at
        InboxEventFactory(
            source=source,
            processing_status="processed",
            occurred_at=received - timedelta(hours=1),  # the producer's delay
            received_at=received,
            processed_at=received + timedelta(seconds=seconds),
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
    # The product's latency (received -> processed), and apart the producer's delay
    # (occurred -> received), which the dead letter's old occurred_at stretches.
    assert figures["processing_p50"] == pytest.approx(3.0)
    assert figures["processing_p95"] == pytest.approx(8.8)  # percentile_cont
    assert figures["producer_delay_p50"] == pytest.approx(3600.0)
    assert figures["producer_delay_p95"] > 3600
    assert figures["dead_letters"] == 2
    assert figures["dead_letters_24h"] == 1
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
    assert figures["processing_p50"] is None
    assert figures["producer_delay_p50"] is None
    assert figures["recent_actions"] == []


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


def test_the_index_says_what_it_measures_and_links_its_counts(auditor_client, operator):
    from django.urls import reverse

    from core.actors import Actor
    from webhooks.replay import inbox_events_replay

    now = timezone.now()
    InboxEventFactory(
        processing_status="processed",
        occurred_at=now - timedelta(days=334),  # a backfill
        received_at=now - timedelta(seconds=2),
        processed_at=now - timedelta(seconds=2) + timedelta(milliseconds=300),
    )
    dead = DeadLetteredEventFactory()
    inbox_events_replay(
        events_queryset=InboxEvent.objects.filter(pk=dead.pk),
        actor=Actor.of(operator),
        reason="fixed",
    )
    DeadLetteredEventFactory(received_at=now - timedelta(days=3))
    response = auditor_client.get(reverse("admin:index"))
    page = response.content.decode()
    assert 'id="dash-p50">0.300 s<' in page
    assert "received &rarr; processed" in page
    assert re.search(r'id="dash-delay-p95">\d+ d \d+ h<', page), page
    assert "occurred &rarr; received" in page
    since = response.context["dash"]["since"]
    from django.utils.http import urlencode

    since_q = urlencode({"received_at__gte": since.isoformat()})
    dead_list = reverse("admin:webhooks_deadletteredevent_changelist")
    assert f'<a href="{dead_list}?{since_q}">0</a>' in page  # the replayed one is back
    assert f'<a href="{dead_list}">1</a>' in page
    inbox = reverse("admin:webhooks_inboxevent_changelist")
    status_link = f"{inbox}?processing_status__exact=processed&amp;{since_q}"
    assert f'<a href="{status_link}">1</a>' in page
    assert auditor_client.get(status_link.replace("&amp;", "&")).status_code == 200
    # The latest operator actions instead of the admin's empty "Recent actions".
    assert "Recent operator actions" in page and "Recent actions" not in page
    assert "Replay</a> by operator, 1 event" in page


def _dashboard_vendors() -> list[str]:
    """The dashboard's ways of reading the figures that this database can run: its own, and
    the Python reading the embedded default's SQLite takes, which runs anywhere."""
    from django.db import connection

    return sorted({connection.vendor, "sqlite"})


@pytest.mark.parametrize("vendor", _dashboard_vendors())
def test_processing_time_leaves_out_the_time_a_pause_held_the_events(
    operator, monkeypatch, vendor
):
    """Events a pause held for nine minutes were processed half a second after the resume:
    their processing time is that half second, and the nine minutes are shown apart. (The
    embedded default's SQLite reads the same figures in Python: both ways are run here.)"""
    from core.actors import Actor
    from webhooks.models import SourceHold
    from webhooks.pausing import webhook_source_pause, webhook_source_resume

    now = timezone.now()
    paused = WebhookSourceFactory(slug="paused-feed")
    other = WebhookSourceFactory(slug="live-feed")
    webhook_source_pause(
        source=paused, reason="downstream down", actor=Actor.of(operator)
    )
    SourceHold.objects.filter(source=paused).update(
        paused_at=now - timedelta(minutes=10)
    )
    resume = webhook_source_resume(source=paused, actor=Actor.of(operator))
    resumed = resume.created_at
    for minutes in (9, 8, 7):  # received while paused, processed 0.5 s after the resume
        InboxEventFactory(
            source=paused,
            processing_status="processed",
            received_at=resumed - timedelta(minutes=minutes),
            processed_at=resumed + timedelta(milliseconds=500),
        )
    for seconds in (1, 2):  # another source's, never held
        received = now - timedelta(minutes=30)
        InboxEventFactory(
            source=other,
            processing_status="processed",
            received_at=received,
            processed_at=received + timedelta(seconds=seconds),
        )
    # The same source's, received and processed before the pause: not held.
    InboxEventFactory(
        source=paused,
        processing_status="processed",
        received_at=now - timedelta(minutes=20),
        processed_at=now - timedelta(minutes=20) + timedelta(seconds=3),
    )
    from django.db import connection

    monkeypatch.setattr(connection, "vendor", vendor)
    figures = dashboard_figures(now=now)

    # 0.5 s three times, 1 s, 2 s, 3 s: the held minutes are not in them.
    assert figures["processing_p50"] == pytest.approx(0.75, abs=1e-3)
    assert figures["processing_p95"] == pytest.approx(2.75, abs=1e-3)
    assert figures["held_events"] == 3
    assert figures["held_p50"] == pytest.approx(8 * 60, abs=1e-3)
    assert figures["held_p95"] == pytest.approx(8.9 * 60, abs=1e-3)


def test_the_dashboard_counts_jobs_by_status_and_trigger_failures(auditor_client):
    from django.urls import reverse

    from deployments.models import TriggerAttempt
    from tests.deployments.factories import BuildFactory, DeploymentFactory

    now = timezone.now()
    lost = DeploymentFactory(
        status="failed",
        idempotency_key="lost",
        detail="report_lost: reported running, but no further report came within "
        "the lease",
        status_changed_at=now - timedelta(minutes=5),
    )
    DeploymentFactory(status="running", idempotency_key="r1")
    DeploymentFactory(status="running", idempotency_key="r2")
    DeploymentFactory(status="succeeded", idempotency_key="ok")
    old = DeploymentFactory(status="failed", idempotency_key="old")
    type(old).objects.filter(pk=old.pk).update(created_at=now - timedelta(days=2))
    build = BuildFactory(status="failed", idempotency_key="b", detail="HTTP 422")
    BuildFactory(status="queued", idempotency_key="q")
    for number, (outcome, minutes) in enumerate(
        [("delivered", 60 * 30), ("transient", 50), ("rejected", 40), ("lost", 30)],
        start=1,
    ):  # the first, 30 hours ago, is outside the window
        TriggerAttempt.objects.create(
            job=lost,
            number=number,
            executor="http",
            started_at=now - timedelta(minutes=minutes),
            outcome=outcome,
        )
    TriggerAttempt.objects.create(
        job=build,
        number=1,
        executor="http",
        started_at=now - timedelta(minutes=1),
        outcome="delivered",
    )

    figures = dashboard_figures(now=now)
    jobs = {row["status"]: row for row in figures["jobs"]["by_status"]}
    assert (jobs["failed"]["deployment"], jobs["failed"]["build"]) == (1, 1)
    assert (jobs["running"]["deployment"], jobs["running"]["build"]) == (2, 0)
    assert (jobs["queued"]["deployment"], jobs["queued"]["build"]) == (0, 1)
    assert (jobs["succeeded"]["deployment"], jobs["succeeded"]["build"]) == (1, 0)
    assert [f["public_id"] for f in figures["jobs"]["failures"]] == [
        build.public_id,
        lost.public_id,
    ]
    triggers = figures["triggers"]
    # In the window: transient, rejected, lost (failures) and the build's delivery.
    assert (triggers["attempts"], triggers["failed"]) == (4, 3)
    assert {r["outcome"]: r["count"] for r in triggers["by_outcome"]} == {
        "delivered": 1,
        "transient": 1,
        "rejected": 1,
        "lost": 1,
    }

    response = auditor_client.get(reverse("admin:index"))
    page = response.content.decode()
    since = response.context["dash"]["since"]
    from django.utils.http import urlencode

    since_q = urlencode({"created_at__gte": since.isoformat()})
    failed = reverse("admin:deployments_deployment_changelist")
    failed += f"?status__exact=failed&amp;{since_q}"
    assert f'<a href="{failed}">1</a>' in page
    running = reverse("admin:deployments_deployment_changelist")
    running += f"?status__exact=running&amp;{since_q}"
    assert f'<a href="{running}">2</a>' in page
    listed = auditor_client.get(failed.replace("&amp;", "&"))
    assert [j.pk for j in listed.context["cl"].result_list] == [lost.pk]
    assert "report_lost: reported running" in page
    assert 'data-status="lost">Lost (no outcome)</span> 1' in page


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans")
def test_the_all_time_dead_letters_are_counted_from_the_status_index_alone():
    """A capped count needs no column of the row: it is read from the status index alone,
    no row visited where the visibility map allows (at 10,000 dead letters, a row visited
    is a page read each)."""
    from django.test.utils import CaptureQueriesContext

    DeadLetteredEventFactory.create_batch(3)
    with CaptureQueriesContext(connection) as queries:
        assert dashboard_figures()["dead_letters"] == 3
    (sql,) = [
        q["sql"]
        for q in queries.captured_queries
        if "webhooks_inboxevent" in q["sql"] and "dead_lettered" in q["sql"]
    ]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute(f"EXPLAIN {sql}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Only Scan" in plan and "Index Scan" not in plan, plan
