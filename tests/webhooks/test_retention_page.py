"""The console's page of the inbox's days (docs/console.md, "The inbox's days and
retention"): each partition with its estimated rows and size, when retention drops it, and
for a day past retention whether something holds it back, why, and a link to the rows that
do; the same in ``webhook_inbox_retention_held_days{reason}``. On SQLite (this module runs
there too, ``tests/core/test_embedded_default_inputs.py``) the page says the inbox is one
table."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from types import SimpleNamespace

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from core.actors import Actor
from tests.console import make_user
from tests.webhooks.factories import (
    FingerprintMismatchFactory,
    InboxEventFactory,
    WebhookSourceFactory,
)
from webhooks import partitions as partitions_module
from webhooks.bulk_replay import bulk_replay_job_create
from webhooks.metrics import InboxPartitionsCollector
from webhooks.models import BulkReplayJob, InboxEvent
from webhooks.partitions import (
    DAY,
    HOLD_REASONS,
    INBOX,
    day_start,
    partition_name,
    partitions,
)
from webhooks.pausing import webhook_source_pause

pytestmark = pytest.mark.django_db

PAGE = "admin:webhooks_inboxevent_partitions"
on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite keeps one table each"
)


def later(days: int):
    """An instant ``days`` after today's start."""
    return day_start(timezone.now()) + days * DAY + timedelta(hours=1)


@pytest.fixture
def five_days_on(monkeypatch):
    """Retention's clock five days on (the partitions' ``timezone.now``): the days
    received two days ago are past a retention of three."""
    monkeypatch.setattr(
        partitions_module, "timezone", SimpleNamespace(now=lambda: later(5))
    )


def partition_of(event: InboxEvent) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT tableoid::regclass::text FROM {INBOX.table} WHERE id = %s",  # noqa: S608
            [event.pk],
        )
        return cursor.fetchone()[0]


def day_row(html: str, name: str) -> str:
    """The page's row of the partition ``name``."""
    found = re.search(
        rf'<tr class="inbox-partition" data-partition="{re.escape(name)}".*?</tr>',
        html,
        re.S,
    )
    assert found, name
    return found[0]


def links(row: str) -> list[str]:
    return [unescape(href) for href in re.findall(r'<a href="([^"]+)"', row)]


# --- who sees it ------------------------------------------------------------------------------


def test_operators_and_auditors_see_the_page_and_the_links_to_it(
    operator_client, auditor_client
):
    page = reverse(PAGE)
    for client in (operator_client, auditor_client):
        response = client.get(page)
        assert response.status_code == 200
        assert b"Inbox days and retention" in response.content
        index = client.get(reverse("admin:index")).content.decode()
        assert f'href="{page}"' in index
        inbox = client.get(reverse("admin:webhooks_inboxevent_changelist"))
        assert f'href="{page}"' in inbox.content.decode()


def test_users_without_the_console_or_the_inbox_are_refused(client, roles):
    page = reverse(PAGE)
    anonymous = client.get(page)
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith(reverse("admin:login"))
    # Staff, in no role: the console lets them in, the inbox's pages do not.
    client.force_login(make_user("visitor", None))
    assert client.get(page).status_code == 403


# --- the days ---------------------------------------------------------------------------------


@on_postgresql
def test_each_day_is_listed_with_its_estimated_rows_and_size(auditor_client, settings):
    settings.INBOX_RETENTION_DAYS = None
    events = [InboxEventFactory() for _ in range(3)]
    name = partition_of(events[0])
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {name}")  # the catalog's estimate, as autovacuum's

    html = auditor_client.get(reverse(PAGE)).content.decode()

    assert "Retention is unset" in html
    names = [p.name for p in partitions(INBOX)]
    assert re.findall(r'data-partition="([^"]+)"', html) == names
    row = day_row(html, name)
    assert "about 3 rows" in row, row
    assert re.search(r"\d+(\.\d)?\xa0(bytes|KB|MB|GB)", row), row
    assert "Kept" in row


@on_postgresql
def test_the_page_counts_no_rows(auditor_client, settings, five_days_on):
    """Past retention each day gets its index probes; nothing counts a partition."""
    from django.test.utils import CaptureQueriesContext

    settings.INBOX_RETENTION_DAYS = 3
    InboxEventFactory(received_at=timezone.now() - 2 * DAY, processing_status="failed")
    with CaptureQueriesContext(connection) as queries:
        assert auditor_client.get(reverse(PAGE)).status_code == 200
    assert not [q for q in queries if "count(" in q["sql"].lower()], queries


@on_postgresql
@pytest.mark.parametrize("hold", HOLD_REASONS)
def test_a_day_held_back_names_why_and_links_the_rows_that_hold_it(
    operator_client, settings, five_days_on, hold
):
    settings.INBOX_RETENTION_DAYS = 3
    at = timezone.now() - 2 * DAY
    source = WebhookSourceFactory()
    held = InboxEventFactory(
        source=source, received_at=at, processing_status="processed"
    )
    # A row of the same day, of another source, that holds nothing.
    other = InboxEventFactory(received_at=at, processing_status="processed")
    if hold == "unfinished":
        InboxEvent.objects.filter(pk=held.pk).update(processing_status="failed")
    elif hold == "open_evidence":
        evidence = FingerprintMismatchFactory(event=held)
    elif hold == "paused_source":
        webhook_source_pause(source=source, actor=Actor.system(), reason="test")
    else:
        InboxEvent.objects.filter(pk=held.pk).update(processing_status="dead_lettered")
        job = bulk_replay_job_create(
            source=source,
            status="dead_lettered",
            since=None,
            event_ids=[],
            reason="outage",
            rate=None,
            created_by=Actor.system(),
        )
        BulkReplayJob.objects.filter(pk=job.pk).update(state="queued")
    name = partition_of(held)
    assert partition_of(other) == name

    html = operator_client.get(reverse(PAGE)).content.decode()

    row = day_row(html, name)
    assert 'data-held="1"' in row
    assert re.findall(r'data-hold="([^"]+)"', row) == [hold]
    assert "Held back" in row
    assert re.search(r'id="partitions-held">1<', html)
    if hold == "paused_source":
        assert f"the rows of {source.slug}" in row
    # The first link lists the rows that hold it: the held row, not the other.
    [first, *more] = links(row)
    listed = operator_client.get(first)
    assert listed.status_code == 200, first
    shown = listed.content.decode()
    assert held.event_id in shown, first
    assert other.event_id not in shown, first
    if hold == "open_evidence":
        change = reverse(
            "admin:webhooks_fingerprintmismatch_change", args=[evidence.pk]
        )
        assert change in shown
    if hold == "bulk_replay":
        [jobs] = more
        assert reverse("admin:webhooks_bulkreplayjob_change", args=[job.pk]) in (
            operator_client.get(jobs).content.decode()
        )
    # A day past retention that nothing holds: the next hourly run drops it.
    empty = partition_name(INBOX, day_start(timezone.now()) + DAY)
    if empty != name:
        other_day = day_row(html, empty)
        assert "Due" in other_day and "nothing" in other_day
        assert "data-held" not in other_day
    # A day within retention says from when it is dropped.
    assert "Within retention" in day_row(html, partitions(INBOX)[-1].name)
    # The metric says the same.
    [_, _, gauge] = list(InboxPartitionsCollector().collect())
    assert gauge.name == "webhook_inbox_retention_held_days"
    assert {s.labels["reason"]: s.value for s in gauge.samples} == {
        reason: 1.0 if reason == hold else 0.0 for reason in HOLD_REASONS
    }


@on_postgresql
def test_the_evidence_list_filters_by_the_day_its_event_was_received(
    auditor_client,
):
    old = FingerprintMismatchFactory(
        event=InboxEventFactory(received_at=timezone.now() - 2 * DAY)
    )
    new = FingerprintMismatchFactory(event=InboxEventFactory())
    start = day_start(timezone.now() - 2 * DAY)
    page = auditor_client.get(
        reverse("admin:webhooks_fingerprintmismatch_changelist"),
        {
            "investigated_at__isempty": "1",
            "event__received_at__gte": start.isoformat(),
            "event__received_at__lt": (start + DAY).isoformat(),
        },
    ).content.decode()
    assert reverse("admin:webhooks_fingerprintmismatch_change", args=[old.pk]) in page
    assert (
        reverse("admin:webhooks_fingerprintmismatch_change", args=[new.pk]) not in page
    )


@on_postgresql
def test_a_day_past_retention_of_a_paused_source_without_rows_there_is_not_held(
    operator_client, settings, five_days_on
):
    settings.INBOX_RETENTION_DAYS = 3
    paused = WebhookSourceFactory()
    webhook_source_pause(source=paused, actor=Actor.system(), reason="test")
    event = InboxEventFactory(
        received_at=timezone.now() - 2 * DAY, processing_status="processed"
    )
    html = operator_client.get(reverse(PAGE)).content.decode()
    row = day_row(html, partition_of(event))
    assert "data-held" not in row and "Due" in row


@on_postgresql
def test_a_day_a_stopped_run_left_detached_is_listed(
    operator_client, settings, five_days_on
):
    settings.INBOX_RETENTION_DAYS = 3
    name = partition_name(INBOX, day_start(timezone.now()) + DAY)
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {INBOX.table} DETACH PARTITION {name}")
    assert name not in {p.name for p in partitions(INBOX)}

    html = operator_client.get(reverse(PAGE)).content.decode()

    row = day_row(html, name)
    assert "Detached" in row and "nothing" in row


# --- SQLite -----------------------------------------------------------------------------------


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the embedded default's")
def test_on_sqlite_the_page_says_the_inbox_is_one_table(auditor_client, settings):
    settings.INBOX_RETENTION_DAYS = 3
    html = auditor_client.get(reverse(PAGE)).content.decode()
    assert "The inbox is one table here (SQLite)" in html
    assert "Retention by day applies only on PostgreSQL" in html
    assert "inbox-partition" not in html.replace("inbox-partitions", "")
    assert not list(InboxPartitionsCollector().collect())[1:]
