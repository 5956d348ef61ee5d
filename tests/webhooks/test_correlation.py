"""Every processing message of one row carries the event id as its correlation id (a message
header), whatever made the row wait for it: the ingest request, the relay's sweep, an
operator's replay. A message of several rows carries none, and the worker binds each row's
event id while it processes that row. Messages are read back from the test broker's Redis
list."""

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from core.actors import Actor
from core.logging import CELERY_HEADER, CorrelationIdFilter, correlation_id_get
from core.relay.loop import Relay
from tests.broker import broker_messages, broker_reset, inbox_messages
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    InboxEventFactory,
    WebhookSourceFactory,
    signed_post,
)
from webhooks.models import InboxEvent
from webhooks.outbox import inbox_sweep
from webhooks.processing import inbox_events_process
from webhooks.replay import inbox_events_replay

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _empty_broker():
    broker_reset()
    yield
    broker_reset()


def queued_correlation_ids() -> list[str | None]:
    return [m["headers"].get(CELERY_HEADER) for m in inbox_messages()]


def test_the_relay_publishes_an_accepted_event_with_its_event_id(client):
    WebhookSourceFactory(slug="corr-ingest")
    body = research_event(event_id="evt_corr_ingest")
    response = signed_post(client, "corr-ingest", body)
    assert response.status_code == 202
    assert broker_messages() == []  # the request publishes nothing

    Relay().run_once(sweep=False)

    assert queued_correlation_ids() == ["evt_corr_ingest"]
    assert correlation_id_get() == ""


def test_the_sweep_publishes_each_row_with_its_own_event_id(settings):
    settings.INBOX_BATCH_SIZE = 1
    old = timezone.now() - timedelta(minutes=5)
    events = [InboxEventFactory(received_at=old, dispatched_at=old) for _ in range(3)]
    assert correlation_id_get() == ""

    assert inbox_sweep() == 3

    assert sorted(queued_correlation_ids()) == sorted(e.event_id for e in events)
    assert correlation_id_get() == ""


def test_a_replay_publishes_each_row_with_its_own_event_id(settings):
    settings.INBOX_BATCH_SIZE = 1
    events = [InboxEventFactory(processing_status="dead_lettered") for _ in range(2)]

    inbox_events_replay(
        events_queryset=InboxEvent.objects.all(),
        actor=Actor(name="ops"),
        reason="handler fixed",
    )
    assert broker_messages() == []  # the replay publishes nothing
    Relay().run_once(sweep=False)

    assert sorted(queued_correlation_ids()) == sorted(e.event_id for e in events)


def test_a_message_of_several_rows_carries_none(settings):
    settings.INBOX_BATCH_SIZE = 2
    events = [InboxEventFactory() for _ in range(3)]

    Relay().run_once(sweep=False)

    messages = inbox_messages()
    assert [m["args"] for m in messages] == [
        [[events[0].pk, events[1].pk]],
        [[events[2].pk]],
    ]
    assert queued_correlation_ids() == [None, events[2].event_id]


def test_the_worker_binds_each_rows_event_id_while_it_processes_it():
    """What a worker does with a message of several rows: each row's DEBUG line names that
    row's event id, the batch's one INFO line names them all, and nothing stays bound after
    the batch."""
    events = [InboxEventFactory() for _ in range(3)]
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    handler.addFilter(CorrelationIdFilter())
    processing_logger = logging.getLogger("webhooks.processing")
    processing_logger.addHandler(handler)
    previous_level = processing_logger.level
    processing_logger.setLevel(logging.DEBUG)
    try:
        outcomes = inbox_events_process(ids=[e.pk for e in events], worker="w")
    finally:
        processing_logger.removeHandler(handler)
        processing_logger.setLevel(previous_level)

    assert [o.status for o in outcomes] == ["processed"] * 3
    processed = [r for r in records if r.getMessage() == "inbox.processed"]
    assert [(r.levelno, r.inbox_event_id, r.correlation_id) for r in processed] == [
        (logging.DEBUG, e.pk, e.event_id) for e in events
    ]
    (batch,) = [r for r in records if r.levelno >= logging.INFO]
    assert batch.getMessage() == "inbox.batch_processed"
    assert not getattr(batch, "correlation_id", "")
    assert batch.counts == {"processed": 3}
    assert batch.inbox_event_ids == [e.pk for e in events]
    assert batch.event_ids == [e.event_id for e in events]
    assert correlation_id_get() == ""
