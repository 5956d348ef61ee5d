"""The replay service, the replay_events command and bulk replay jobs, against PostgreSQL and
the real Redis broker (the dispatched message is read back from the broker's list)."""

import getpass
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from core.actors import Actor
from core.relay.loop import Relay
from tests.broker import broker_messages, queued_inbox_event_ids
from tests.webhooks.factories import (
    DeadLetteredEventFactory,
    InboxAttemptFactory,
    InboxEventFactory,
    WebhookSourceFactory,
)
from trail.models import OperatorAction
from webhooks.bulk_replay import (
    bulk_replay_job_create,
    bulk_replay_job_run,
    bulk_replay_job_start,
)
from webhooks.errors import NothingToReplay
from webhooks.models import BulkReplayJob, InboxAttempt, InboxEvent, ProcessingStatus
from webhooks.replay import inbox_events_replay, replay_queryset_build

pytestmark = pytest.mark.django_db(transaction=True)


def test_replay_moves_dead_letters_back_to_received_and_dispatches_them(
    operator, empty_broker
):
    dead = DeadLetteredEventFactory.create_batch(2)
    processed = InboxEventFactory(processing_status=ProcessingStatus.PROCESSED)
    for number in (1, 2):
        InboxAttemptFactory(event=dead[0], number=number)

    action = inbox_events_replay(
        events_queryset=InboxEvent.objects.filter(
            pk__in=[dead[0].pk, dead[1].pk, processed.pk]
        ),
        actor=Actor.of(operator),
        reason="handler fixed in 1.4.2",
    )

    for event in dead:
        event.refresh_from_db()
        assert event.processing_status == ProcessingStatus.RECEIVED
        assert event.attempts == 0
        assert event.error_message == ""
        assert event.next_attempt_at is None
    processed.refresh_from_db()
    assert processed.processing_status == ProcessingStatus.PROCESSED
    # The attempt history stays.
    assert InboxAttempt.objects.filter(event=dead[0]).count() == 2
    # One operator action naming the replayed events.
    assert OperatorAction.objects.count() == 1
    assert action.action == "replay"
    assert action.actor == operator
    assert action.actor_name == "operator"
    assert action.reason == "handler fixed in 1.4.2"
    assert sorted(action.event_ids) == sorted(e.pk for e in dead)
    assert action.event_count == 2
    assert action.skipped_count == 1
    # The replay publishes nothing: the rows wait for the relay again, which publishes each
    # of them once.
    assert broker_messages() == []
    assert all(e.dispatched_at is None for e in dead)
    assert Relay().run_once(sweep=False) == (2, False)
    assert sorted(queued_inbox_event_ids()) == sorted(e.pk for e in dead)
    assert {m["task"] for m in broker_messages()} == {"webhooks.process_inbox_events"}
    assert Relay().run_once(sweep=False) == (0, False)
    assert len(queued_inbox_event_ids()) == 2


def test_replay_of_nothing_replayable_raises_and_records_nothing(
    operator, empty_broker
):
    event = InboxEventFactory(processing_status=ProcessingStatus.PROCESSED)
    with pytest.raises(NothingToReplay):
        inbox_events_replay(
            events_queryset=InboxEvent.objects.filter(pk=event.pk),
            actor=Actor.of(operator),
            reason="x",
        )
    assert OperatorAction.objects.count() == 0
    assert broker_messages() == []


def test_replay_filter_by_source_status_since_and_ids():
    src_a, src_b = WebhookSourceFactory(), WebhookSourceFactory()
    old = DeadLetteredEventFactory(
        source=src_a, received_at=timezone.now() - timedelta(days=3)
    )
    new = DeadLetteredEventFactory(source=src_a)
    DeadLetteredEventFactory(source=src_b)
    failed = InboxEventFactory(source=src_a, processing_status=ProcessingStatus.FAILED)
    since = timezone.now() - timedelta(days=1)

    assert replay_queryset_build(source_slug=src_a.slug).count() == 2
    assert list(replay_queryset_build(source_slug=src_a.slug, since=since)) == [new]
    assert list(replay_queryset_build(event_ids=[old.event_id])) == [old]
    assert list(replay_queryset_build(status="failed")) == [failed]
    with pytest.raises(ValueError):
        replay_queryset_build(status="processed")


def test_replay_events_command_replays_by_filter_as_the_os_user(empty_broker, capsys):
    source = WebhookSourceFactory(slug="papers")
    dead = DeadLetteredEventFactory.create_batch(3, source=source)
    other = DeadLetteredEventFactory()

    call_command(
        "replay_events",
        "--source",
        "papers",
        "--status",
        "dead_lettered",
        "--since",
        (timezone.now() - timedelta(hours=1)).isoformat(),
    )

    out = capsys.readouterr().out
    assert "3 events match" in out
    assert "3/3" in out  # the progress bar
    assert (
        InboxEvent.objects.filter(
            pk__in=[e.pk for e in dead], processing_status="received"
        ).count()
        == 3
    )
    other.refresh_from_db()
    assert other.processing_status == ProcessingStatus.DEAD_LETTERED
    start, *actions = OperatorAction.objects.order_by("pk")
    assert start.action == "start_bulk_replay"
    assert len(actions) == 1
    assert {start.actor_name, actions[0].actor_name} == {f"os:{getpass.getuser()}"}
    assert actions[0].action == "bulk_replay"
    assert sorted(actions[0].event_ids) == sorted(e.pk for e in dead)
    assert broker_messages() == []  # the relay publishes the replayed rows
    Relay().run_once(sweep=False)
    assert sorted(queued_inbox_event_ids()) == sorted(e.pk for e in dead)


def test_replay_events_command_by_event_id_and_dry_run(empty_broker, capsys):
    a, b = DeadLetteredEventFactory.create_batch(2)
    call_command("replay_events", "--event-id", a.event_id, "--dry-run")
    assert "1 events match" in capsys.readouterr().out
    a.refresh_from_db()
    assert a.processing_status == ProcessingStatus.DEAD_LETTERED
    call_command("replay_events", "--event-id", a.event_id, b.event_id)
    assert InboxEvent.objects.filter(processing_status="received").count() == 2


def test_bulk_replay_job_counts_first_then_replays_in_chunks(operator, settings):
    settings.BULK_REPLAY_CHUNK_SIZE = 4
    source = WebhookSourceFactory()
    DeadLetteredEventFactory.create_batch(10, source=source)
    DeadLetteredEventFactory.create_batch(2)  # another source: not part of the job

    job = bulk_replay_job_create(
        source=source,
        status="dead_lettered",
        since=None,
        event_ids=[],
        reason="mass outage",
        created_by=Actor.of(operator),
    )
    assert job.dry_run_count == 10
    assert job.state == BulkReplayJob.State.COUNTED
    assert InboxEvent.objects.filter(processing_status="received").count() == 0

    job = bulk_replay_job_start(job=job, started_by=Actor(name="os:ops"), publish=False)
    seen = []
    job = bulk_replay_job_run(
        job_id=job.pk,
        run=job.run,
        progress=lambda j: seen.append((j.processed, j.total)),
    )

    assert job.state == BulkReplayJob.State.SUCCEEDED
    assert (job.processed, job.total) == (10, 10)
    assert seen == [(4, 10), (8, 10), (10, 10)]
    assert (
        InboxEvent.objects.filter(source=source, processing_status="received").count()
        == 10
    )
    actions = OperatorAction.objects.filter(bulk_job=job, action="bulk_replay")
    assert [a.event_count for a in actions.order_by("pk")] == [4, 4, 2]
    # The one who started the job, not the one who created it.
    assert {(a.actor, a.actor_name) for a in actions} == {(None, "os:ops")}


def test_operator_actions_and_seals_are_append_only(operator):
    from core.models import AppendOnlyError

    action = OperatorAction.objects.create(
        action="replay", actor=operator, actor_name="operator", event_ids=[1]
    )
    action.reason = "rewritten"
    with pytest.raises(AppendOnlyError):
        action.save()
    with pytest.raises(AppendOnlyError):
        action.delete()
    action.refresh_from_db()
    assert action.reason == ""
