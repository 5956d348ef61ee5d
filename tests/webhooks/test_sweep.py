"""The outbox sweep against PostgreSQL and the real Redis broker: what it re-dispatches, and
that overlapping sweeps never publish a row twice."""

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.broker import broker_reset, queued_inbox_event_ids
from tests.integrations.research.factories import research_event
from tests.threads import run_together
from tests.webhooks.factories import InboxEventFactory, inbox_events_bulk_create
from webhooks.models import InboxEvent
from webhooks.sweep import inbox_sweep
from webhooks.tasks import inbox_sweep_task

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean_broker(settings):
    settings.INBOX_REDISPATCH_AFTER_SECONDS = 60
    broker_reset()
    yield
    broker_reset()


def test_sweep_redispatches_exactly_the_rows_whose_message_may_be_lost():
    now = timezone.now()
    old, fresh = now - timedelta(seconds=120), now - timedelta(seconds=5)
    due = {
        "received_old": InboxEventFactory(received_at=old),
        "received_old_dispatched_before_half_its_age": InboxEventFactory(
            received_at=now - timedelta(minutes=20),
            dispatched_at=now - timedelta(minutes=11),
        ),
        "failed_due": InboxEventFactory(
            processing_status="failed",
            attempts=1,
            next_attempt_at=now - timedelta(seconds=1),
        ),
        "lease_expired": InboxEventFactory(
            processing_status="processing",
            attempts=1,
            lease_expires_at=now - timedelta(seconds=1),
            dispatched_at=old,
        ),
    }
    not_due = {
        "received_fresh": InboxEventFactory(received_at=fresh),
        "received_old_dispatched_recently": InboxEventFactory(
            received_at=old, dispatched_at=fresh
        ),
        # Waiting in a long queue, most likely: re-dispatches are spaced by half its age.
        "received_old_dispatched_after_half_its_age": InboxEventFactory(
            received_at=now - timedelta(minutes=20),
            dispatched_at=now - timedelta(minutes=9),
        ),
        "failed_later": InboxEventFactory(
            processing_status="failed",
            attempts=1,
            next_attempt_at=now + timedelta(seconds=30),
        ),
        "failed_due_retry_already_published": InboxEventFactory(
            processing_status="failed",
            attempts=1,
            next_attempt_at=now - timedelta(seconds=1),
            dispatched_at=now - timedelta(seconds=1),
        ),
        "lease_live": InboxEventFactory(
            processing_status="processing",
            attempts=1,
            lease_expires_at=now + timedelta(seconds=60),
        ),
        **{
            status: InboxEventFactory(
                processing_status=status, received_at=old, processed_at=old
            )
            for status in (
                "processed",
                "ignored_out_of_order",
                "ignored_duplicate_version",
                "ignored_unsupported",
                "dead_lettered",
            )
        },
    }

    assert inbox_sweep() == len(due)

    assert sorted(queued_inbox_event_ids()) == sorted(e.pk for e in due.values())
    for event in due.values():
        event.refresh_from_db()
        assert event.dispatched_at >= now
    for name, event in not_due.items():
        before = event.dispatched_at
        event.refresh_from_db()
        assert event.dispatched_at == before, name
    # Stamped: the next sweep finds nothing until INBOX_REDISPATCH_AFTER_SECONDS pass.
    assert inbox_sweep() == 0
    assert len(queued_inbox_event_ids()) == len(due)


def test_the_sweep_task_runs_the_inbox_sweep():
    event = InboxEventFactory(received_at=timezone.now() - timedelta(minutes=5))
    assert inbox_sweep_task.apply().get() == 1
    assert queued_inbox_event_ids() == [event.pk]


def test_sweep_works_in_bounded_batches_and_takes_every_due_row():
    old = timezone.now() - timedelta(minutes=5)
    rows = inbox_events_bulk_create(
        [research_event() for _ in range(23)], received_at=old
    )
    assert inbox_sweep(batch_size=5) == 23
    assert sorted(queued_inbox_event_ids()) == sorted(r.pk for r in rows)


def test_two_sweeps_at_once_never_double_dispatch():
    old = timezone.now() - timedelta(minutes=5)
    rows = inbox_events_bulk_create(
        [research_event() for _ in range(400)], received_at=old
    )
    published, errors = run_together([lambda: inbox_sweep(batch_size=20)] * 3)

    assert not errors, errors
    assert sum(published) == 400
    queued = Counter(queued_inbox_event_ids())
    assert set(queued) == {r.pk for r in rows}
    assert max(queued.values()) == 1
    assert InboxEvent.objects.filter(dispatched_at__isnull=True).count() == 0
