"""End to end with a REAL Celery worker process: a replayed dead letter reaches a terminal status.

The replay publishes nothing: the worker's relay publishes the row, and the worker processes
it (``webhooks.process_inbox_events``). Without either the row stays ``received`` and this
test fails."""

import pytest

from core.actors import Actor
from tests import processes
from tests.webhooks.factories import (
    DeadLetteredEventFactory,
    InboxAttemptFactory,
    WebhookSourceFactory,
)
from webhooks.models import TERMINAL_STATUSES, InboxAttempt, InboxEvent
from webhooks.replay import inbox_events_replay

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_replayed_dead_letter_is_taken_to_a_terminal_status_by_a_real_worker(
    workers, operator
):
    source = WebhookSourceFactory(handler="research")
    dead = DeadLetteredEventFactory(source=source)
    InboxAttemptFactory(event=dead, number=1)
    worker = workers.start(
        env={"INBOX_MAX_ATTEMPTS": "1", "INBOX_RETRY_BASE_SECONDS": "0.1"}
    )
    try:
        inbox_events_replay(
            events_queryset=InboxEvent.objects.filter(pk=dead.pk),
            actor=Actor.of(operator),
            reason="end to end",
        )
        processes.wait_until(
            lambda: (
                InboxEvent.objects.get(pk=dead.pk).processing_status
                in TERMINAL_STATUSES
            ),
            timeout=60,
            what="the worker to process the replayed event",
        )
    finally:
        worker.stop()
    dead.refresh_from_db()
    assert dead.processing_status in TERMINAL_STATUSES
    assert dead.attempts >= 1
    # The old attempt stays; the new round added its own.
    assert InboxAttempt.objects.filter(event=dead).count() >= 2
