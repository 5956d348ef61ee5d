"""The deduplication ledger's own horizon (docs/subsystems/inbox.md, "The deduplication
ledger"): INBOX_DEDUP_DAYS, refused at start below 1 day or below INBOX_RETENTION_DAYS; the
keys past it whose rows have left are deleted in batches along the ledger's primary key,
never one whose row is still there, and a redelivery of such an event is a new event.
Runs on PostgreSQL and, through ``tests/core/test_embedded_default_inputs.py``, on SQLite.
A day dropped whole by retention on PostgreSQL: ``test_retention_partitions.py``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from config.settings._helpers import inbox_dedup_days_check
from tests import processes
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import RESEARCH_SOURCE, InboxEventFactory, signed_post
from webhooks.ledger import inbox_keys_purge, key_purge_cutoff, oldest_key_overdue_days
from webhooks.metrics import InboxKeysCollector
from webhooks.models import FingerprintMismatch, InboxEvent, InboxKey, InboxKeyPurge
from webhooks.partitions import DAY, day_start
from webhooks.tasks import inbox_partitions_task

pytestmark = pytest.mark.django_db


def rows_leave(*events: InboxEvent) -> None:
    """The inbox rows of ``events`` removed by hand, as retention removes them: their keys
    stay."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {InboxEvent._meta.db_table} WHERE id IN"  # noqa: S608
            f" ({', '.join(['%s'] * len(events))})",
            [event.pk for event in events],
        )


def aged(days: float, count: int = 1, *, leave: bool = True) -> list[InboxEvent]:
    """``count`` events received ``days`` ago, a second apart; their rows gone unless
    ``leave`` is false."""
    at = timezone.now() - timedelta(days=days)
    events = [
        InboxEventFactory(received_at=at + timedelta(seconds=n)) for n in range(count)
    ]
    if leave:
        rows_leave(*events)
    return events


def keys() -> set[str]:
    return set(InboxKey.objects.values_list("event_id", flat=True))


def ids(events: list[InboxEvent]) -> set[str]:
    return {event.event_id for event in events}


# --- the setting -----------------------------------------------------------------------------


def test_the_default_horizon_is_400_days_and_any_at_least_retention_is_taken(settings):
    assert settings.INBOX_DEDUP_DAYS == 400
    assert inbox_dedup_days_check(400, retention_days=None) == 400
    assert inbox_dedup_days_check(30, retention_days=30) == 30
    assert inbox_dedup_days_check(1, retention_days=None) == 1


@pytest.mark.parametrize(
    ("days", "retention", "problem"),
    [
        (0, None, "at least 1 day, not 0"),
        (-3, None, "at least 1 day, not -3"),
        (0, 30, "at least 1 day, not 0"),
        (29, 30, "INBOX_DEDUP_DAYS (29) must be at least INBOX_RETENTION_DAYS (30)"),
    ],
)
def test_a_horizon_below_a_day_or_below_retention_is_refused(days, retention, problem):
    with pytest.raises(ImproperlyConfigured) as refused:
        inbox_dedup_days_check(days, retention_days=retention)
    assert problem in str(refused.value)


@pytest.mark.slow
def test_a_process_refuses_to_start_with_a_horizon_shorter_than_retention():
    result = processes.manage(
        "check",
        env=processes.child_env(INBOX_RETENTION_DAYS="30", INBOX_DEDUP_DAYS="7"),
        timeout=60,
    )
    assert result.returncode != 0
    assert "INBOX_DEDUP_DAYS (7) must be at least INBOX_RETENTION_DAYS (30)" in (
        result.stderr
    )


# --- the purge -------------------------------------------------------------------------------


def test_keys_past_the_horizon_whose_rows_left_are_purged_and_no_other(settings):
    settings.INBOX_DEDUP_DAYS = 3
    past = aged(10) + aged(4)
    within = aged(2)  # its row left too, but its day is within the horizon
    today = aged(0, leave=False)

    purged = inbox_keys_purge()

    horizon = day_start(timezone.now()) - 3 * DAY
    assert (purged.deleted, purged.batches) == (2, 1)
    assert purged.received_before == horizon
    assert keys() == ids(within + today)
    run = InboxKeyPurge.objects.get()
    assert (run.deleted, run.batches, run.received_before) == (2, 1, horizon)
    # Idempotent: nothing more to do, and no run recorded for nothing.
    assert inbox_keys_purge().deleted == 0
    assert InboxKeyPurge.objects.count() == 1
    assert ids(past).isdisjoint(keys())


def test_a_key_stays_while_its_row_is_there_and_so_do_the_later_ones(settings):
    settings.INBOX_DEDUP_DAYS = 3
    earlier = aged(12)
    [held] = aged(10, leave=False)  # a day retention holds back, or no retention
    later = aged(8)

    purged = inbox_keys_purge()

    assert purged.received_before == held.received_at
    assert purged.deleted == 1
    assert keys() == ids([held, *later])
    assert ids(earlier).isdisjoint(keys())

    rows_leave(held)
    assert inbox_keys_purge().deleted == 2
    assert keys() == set()


def test_the_purge_goes_in_batches_and_the_next_run_starts_where_it_stopped(settings):
    settings.INBOX_DEDUP_DAYS = 3
    aged(10, 25)
    fresh = aged(0, 5, leave=False)

    purged = inbox_keys_purge(batch_size=10)

    assert (purged.deleted, purged.batches) == (25, 3)
    assert keys() == ids(fresh)
    first = InboxKeyPurge.objects.get()
    # The third batch held the five fresh keys: the next run starts at the first of them.
    assert first.resume_from == fresh[0].pk
    assert first.from_key_id == 0  # the first run starts at the ledger's start

    # Keys stored since (a later id, an old received time): the next run walks from there.
    more = aged(9, 3)
    assert inbox_keys_purge(batch_size=10).deleted == 3
    second = InboxKeyPurge.objects.latest("pk")
    assert second.from_key_id == fresh[0].pk
    assert keys() == ids(fresh)
    assert ids(more).isdisjoint(keys())


def test_a_redelivery_past_the_horizon_is_a_new_event(settings, http, source):
    settings.INBOX_DEDUP_DAYS = 3
    body = research_event()
    assert signed_post(http, RESEARCH_SOURCE, body).status_code == 202
    first = InboxEvent.objects.get()
    rows_leave(first)
    # Four days on, its day ended three days before today: its key goes.
    assert inbox_keys_purge(now=timezone.now() + 4 * DAY).deleted == 1
    assert not InboxKey.objects.exists()

    response = signed_post(http, RESEARCH_SOURCE, body)

    assert response.status_code == 202
    assert response.json()["status"] == "accepted"
    again = InboxEvent.objects.get()
    assert again.event_id == first.event_id and again.pk != first.pk
    assert InboxKey.objects.get().inbox_event_id == again.pk


def test_a_redelivery_within_the_horizon_after_its_row_left_is_a_duplicate(
    settings, http, source
):
    body = research_event()
    signed_post(http, RESEARCH_SOURCE, body)
    rows_leave(InboxEvent.objects.get())
    # A year on: within the default 400 days.
    assert inbox_keys_purge(now=timezone.now() + 365 * DAY).deleted == 0

    response = signed_post(http, RESEARCH_SOURCE, body)

    assert response.status_code == 200
    assert response.json()["status"] == "duplicate"
    assert not InboxEvent.objects.exists()


def test_a_conflict_whose_key_is_purged_as_it_is_answered_is_a_new_event(
    http, source, monkeypatch
):
    """The statement finds another body's key; the purge deletes that key before ingest
    reads it for the evidence: the delivery is recorded again, now a new event, not a 5xx."""
    from webhooks import ingest

    original = research_event()
    signed_post(http, RESEARCH_SOURCE, original)
    rows_leave(InboxEvent.objects.get())
    record = ingest._inbox_record_execute

    def key_purged_after_the_answer(**kwargs):
        row = record(**kwargs)
        if row is None:
            InboxKey.objects.all().delete()
        return row

    monkeypatch.setattr(ingest, "_inbox_record_execute", key_purged_after_the_answer)
    conflicting = original | {"data": {"summary": "rewritten"}}

    response = signed_post(http, RESEARCH_SOURCE, conflicting)

    assert response.status_code == 202
    assert InboxEvent.objects.get().event_id == original["event_id"]
    assert not FingerprintMismatch.objects.exists()


# --- where it runs, and what shows it --------------------------------------------------------


def test_the_command_purges_keys_in_batches_of_the_size_given(settings, capsys):
    settings.INBOX_DEDUP_DAYS = 3
    past = aged(10, 2)

    call_command("inbox_partitions", "--purge-keys", "--batch-size", "1")

    out = capsys.readouterr().out
    horizon = day_start(timezone.now()) - 3 * DAY
    assert f"purged 2 keys received before {horizon.isoformat()} in 2 batches" in out
    assert ids(past).isdisjoint(keys())
    with pytest.raises(CommandError, match="--batch-size"):
        call_command("inbox_partitions", "--purge-keys", "--batch-size", "0")


def test_the_command_leaves_the_keys_without_the_flag(settings, capsys):
    settings.INBOX_DEDUP_DAYS = 3
    past = aged(10)
    call_command("inbox_partitions")
    assert "purged" not in capsys.readouterr().out
    assert keys() == ids(past)


def test_the_hourly_periodic_work_purges_the_keys_last(settings):
    from config.celery_app import app

    entry = app.conf.beat_schedule["inbox-partitions"]
    assert entry["task"] == inbox_partitions_task.name == "webhooks.inbox_partitions"
    settings.INBOX_DEDUP_DAYS = 3
    aged(10, 2)

    result = inbox_partitions_task.apply().get()

    assert result["keys_purged"] == 2
    assert keys() == set()


def test_the_gauge_shows_a_key_kept_past_the_horizon(settings):
    settings.INBOX_DEDUP_DAYS = 3
    [event] = aged(10)
    expected = (key_purge_cutoff() - event.received_at).total_seconds() / 86400
    assert 6 < expected < 7

    [family] = InboxKeysCollector().collect()

    assert family.name == "webhook_inbox_keys_overdue_days"
    [sample] = family.samples
    assert sample.value == pytest.approx(expected, abs=0.01)
    inbox_keys_purge()
    assert oldest_key_overdue_days() == 0.0


def test_the_gauge_is_zero_when_every_key_is_within_the_horizon(settings):
    aged(10)
    assert oldest_key_overdue_days() == 0.0
