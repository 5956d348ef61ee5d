"""Retention by dropping a day of the inbox (docs/scaling.md, "Retention by dropping a
partition"): past INBOX_RETENTION_DAYS a day's partitions (events and their attempts) are
detached and dropped, never deleted row by row; what holds a day back keeps it; the keys stay
and answer as before until INBOX_DEDUP_DAYS, then go; the log names what left, and
``audit_verify`` accepts it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from audit.ledgers import PARTITION_DROP
from audit.models import LogLeaf
from audit.tasks import seal_inbox_task
from audit.verification import log_verify
from core.actors import Actor
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    RESEARCH_SOURCE,
    FingerprintMismatchFactory,
    InboxAttemptFactory,
    InboxEventFactory,
    signed_post,
)
from trail.models import OperatorAction
from webhooks.ledger import inbox_keys_purge
from webhooks.metrics import InboxPartitionsCollector
from webhooks.models import InboxAttempt, InboxEvent, InboxKey
from webhooks.partitions import (
    ATTEMPTS,
    DAY,
    INBOX,
    day_start,
    inbox_partitions_retire,
    oldest_partition_overdue_days,
    partition_create,
    partition_name,
    partitions,
)
from webhooks.pausing import webhook_source_pause

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="SQLite keeps one table each"
    ),
]

FIRST = f"{INBOX.table}_p0"


def exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return cursor.fetchone()[0]


def stored_events(**kwargs) -> list[InboxEvent]:
    """Two events of two days ago, in the first partition, each with a finished attempt:
    one processed, one ignored as out of order."""
    at = timezone.now() - 2 * DAY
    events = [
        InboxEventFactory(
            body=research_event(),
            received_at=at,
            processing_status=status,
            processed_at=at,
            **kwargs,
        )
        for status in ("processed", "ignored_out_of_order")
    ]
    for event in events:
        InboxAttemptFactory(
            event=event, outcome="succeeded", started_at=at, finished_at=at
        )
    return events


def later(days: int):
    """An instant ``days`` after today's start: retention's ``now``."""
    return day_start(timezone.now()) + days * DAY + timedelta(hours=1)


def test_unset_retention_drops_nothing(settings):
    settings.INBOX_RETENTION_DAYS = None
    stored_events()
    assert inbox_partitions_retire(now=later(400)).dropped == []
    assert InboxEvent.objects.count() == 2


def test_a_day_past_retention_leaves_whole_and_its_keys_answer_as_before(
    settings, http, source, caplog
):
    settings.INBOX_RETENTION_DAYS = 3
    processed, ignored = stored_events(source=source)
    bodies = [json.loads(bytes(e.raw_body)) for e in (processed, ignored)]
    # The later days have partitions of their own, empty: tomorrow's up to the horizon.
    with caplog.at_level("INFO", logger="webhooks.partitions"):
        retired = inbox_partitions_retire(now=later(5))

    assert FIRST in retired.dropped
    assert partition_name(INBOX, day_start(timezone.now()) + DAY) in retired.dropped
    assert retired.held == {}
    assert not exists(FIRST) and not exists(f"{ATTEMPTS.table}_p0")
    assert InboxEvent.objects.count() == 0
    assert InboxAttempt.objects.count() == 0
    # The log line of each drop names it with its steps' times.
    (logged,) = [
        r
        for r in caplog.records
        if r.getMessage() == "inbox.partition_dropped" and r.partition == FIRST
    ]
    times = retired.times[FIRST]
    assert times.evidence > 0 and times.drop > 0
    assert (logged.evidence_seconds, logged.drop_seconds) == (
        round(times.evidence, 3),
        round(times.drop, 3),
    )
    # The keys stay, with how each row ended.
    finals = dict(InboxKey.objects.values_list("event_id", "final_status"))
    assert finals == {processed.event_id: "", ignored.event_id: "ignored_out_of_order"}
    # The trail names what left.
    action = OperatorAction.objects.get(
        action="drop_inbox_partition", details__events_partition=FIRST
    )
    assert action.actor_name == Actor.system().name
    assert action.details["events"] == 2 and action.details["attempts"] == 2
    assert action.details["start"] is None
    assert (action.details["first_event_id"], action.details["last_event_id"]) == (
        processed.pk,
        ignored.pk,
    )
    # Within the deduplication horizon (400 days by default) the keys are not purged.
    assert inbox_keys_purge(now=later(5)).deleted == 0
    # A redelivery of each is still a duplicate, answered with how it ended; nothing is
    # stored again.
    answers = [signed_post(http, RESEARCH_SOURCE, body).json() for body in bodies]
    assert [a["status"] for a in answers] == ["duplicate", "duplicate"]
    assert [a["processing_status"] for a in answers] == [
        "processed",
        "ignored_out_of_order",
    ]
    assert InboxEvent.objects.count() == 0


def test_past_the_dedup_horizon_a_dropped_day_s_keys_go_and_a_redelivery_is_new(
    settings, http, source
):
    settings.INBOX_RETENTION_DAYS = 3
    settings.INBOX_DEDUP_DAYS = 4
    processed, _ = stored_events(source=source)
    body = json.loads(bytes(processed.raw_body))
    retired = inbox_partitions_retire(now=later(6))
    assert FIRST in retired.dropped

    purged = inbox_keys_purge(now=later(6))

    assert purged.deleted == 2
    assert not InboxKey.objects.exists()
    # Today's partitions went with the days past retention: back, for the new row.
    today = day_start(timezone.now())
    for table in (INBOX, ATTEMPTS):
        if not exists(partition_name(table, today)):
            partition_create(table, today, today + DAY, like=partitions(table)[-1])
    response = signed_post(http, RESEARCH_SOURCE, body)
    assert response.status_code == 202
    again = InboxEvent.objects.get()
    assert again.event_id == processed.event_id and again.pk != processed.pk
    assert InboxKey.objects.get().inbox_event_id == again.pk


def test_the_log_names_the_dropped_day_and_audit_verify_accepts_what_left(settings):
    settings.INBOX_RETENTION_DAYS = 3
    events = stored_events()
    while seal_inbox_task.apply().get():
        pass
    logged = set(
        LogLeaf.objects.filter(kind__in=("inbox_event", "inbox_attempt")).values_list(
            "kind", "record_id"
        )
    )
    assert {("inbox_event", e.pk) for e in events} <= logged
    assert len([k for k, _ in logged if k == "inbox_attempt"]) == 2
    assert log_verify().ok

    inbox_partitions_retire(now=later(5))

    action = OperatorAction.objects.get(
        action="drop_inbox_partition", details__events_partition=FIRST
    )
    assert LogLeaf.objects.filter(kind=PARTITION_DROP, record_id=action.pk).exists()
    report = log_verify()
    assert report.ok, report.problems
    assert report.dropped == 4
    assert any("left with days of the inbox" in note for note in report.notes)


def test_a_row_deleted_by_hand_is_still_named_beside_a_drop(settings):
    settings.INBOX_RETENTION_DAYS = 3
    stored_events()
    kept = InboxEventFactory(received_at=timezone.now() - timedelta(minutes=10))
    seal_inbox_task.apply().get()
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {INBOX.table} WHERE id = %s",  # noqa: S608
            [kept.pk],
        )
    report = log_verify()
    assert any(p.startswith("DELETED inbox event") for p in report.problems), (
        report.problems
    )


def test_a_drop_entry_that_no_operator_action_matches_is_named(settings):
    settings.INBOX_RETENTION_DAYS = 3
    stored_events()
    seal_inbox_task.apply().get()
    inbox_partitions_retire(now=later(5))
    action = OperatorAction.objects.get(
        action="drop_inbox_partition", details__events_partition=FIRST
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {OperatorAction._meta.db_table} SET details = %s WHERE id = %s",  # noqa: S608
            [json.dumps({**action.details, "events": 0}), action.pk],
        )

    report = log_verify()

    assert any(p.startswith("ALTERED inbox partition drop") for p in report.problems), (
        report.problems
    )


@pytest.mark.parametrize("hold", ["unfinished", "open_evidence", "paused_source"])
def test_a_day_that_something_holds_is_kept_and_named(settings, source, hold):
    settings.INBOX_RETENTION_DAYS = 3
    processed, _ = stored_events(source=source)
    if hold == "unfinished":
        InboxEvent.objects.filter(pk=processed.pk).update(processing_status="failed")
    elif hold == "open_evidence":
        FingerprintMismatchFactory(event=processed)
    else:
        webhook_source_pause(source=source, actor=Actor.system(), reason="test")

    retired = inbox_partitions_retire(now=later(5))

    assert retired.held[FIRST] == [hold]
    assert FIRST not in retired.dropped
    # Attached again, with its attempts: nothing changed for its rows.
    assert FIRST in {p.name for p in partitions(INBOX)}
    assert f"{ATTEMPTS.table}_p0" in {p.name for p in partitions(ATTEMPTS)}
    assert InboxEvent.objects.count() == 2 and InboxAttempt.objects.count() == 2
    # The later, empty days went: the first one does not hold them back.
    assert partition_name(INBOX, day_start(timezone.now()) + DAY) in retired.dropped
    # Retention that does nothing shows: the first day kept past its horizon.
    assert oldest_partition_overdue_days(now=later(5)) > 0
    [_, overdue, _] = list(InboxPartitionsCollector().collect())
    assert overdue.name == "webhook_inbox_retention_overdue_days"


def test_the_command_retires_as_the_periodic_work_does(settings, capsys):
    settings.INBOX_RETENTION_DAYS = 3
    stored_events()
    call_command("inbox_partitions", "--retire")
    # Today: nothing is past the horizon yet.
    assert "dropped" not in capsys.readouterr().out
    assert InboxEvent.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_later_days_are_detached_concurrently_while_the_first_is_held(settings):
    """Outside a transaction, as the periodic work runs: ``DETACH ... CONCURRENTLY``. The
    first partition is held by a row not finished (so that today keeps its partition);
    the days dropped are given back their partitions afterwards."""
    settings.INBOX_RETENTION_DAYS = 1
    InboxEventFactory(received_at=timezone.now() - timedelta(hours=1))  # received
    # The newest day: one with a partition of its own, whatever migrations ran before.
    day = partitions(INBOX)[-1].start
    assert day is not None
    gone = InboxEventFactory(
        received_at=day + timedelta(hours=2), processing_status="processed"
    )
    InboxAttemptFactory(event=gone, outcome="succeeded")
    dropped: list = []
    try:
        retired = inbox_partitions_retire(now=day + 3 * DAY)
        dropped = retired.dropped
        assert retired.held == {FIRST: ["unfinished"]}
        assert partition_name(INBOX, day) in dropped
        # Each drop says how long its steps took: the detach that touched the live inbox,
        # the evidence, the files removed.
        assert set(retired.times) == set(dropped)
        times = retired.times[partition_name(INBOX, day)]
        assert times.detach > 0 and times.evidence > 0 and times.drop > 0
        assert not InboxEvent.objects.filter(pk=gone.pk).exists()
        assert InboxKey.objects.filter(pk=gone.pk).exists()
    finally:
        for name in dropped:
            day = datetime.strptime(name.rsplit("_p", 1)[1], "%Y%m%d").replace(
                tzinfo=UTC
            )
            for table in (INBOX, ATTEMPTS):
                if not exists(partition_name(table, day)):
                    partition_create(table, day, day + DAY, like=partitions(table)[-1])
