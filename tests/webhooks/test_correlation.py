"""Every processing message carries the event id as its correlation id (a message header),
whoever publishes it: the ingest request, the sweep, an operator's replay. Read back from the
test broker's Redis list."""

from datetime import timedelta

import pytest
from django.utils import timezone

from core.logging import CELERY_HEADER, correlation_id_get
from tests.broker import broker_messages, broker_reset
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    InboxEventFactory,
    WebhookSourceFactory,
    signed_post,
)
from webhooks.models import InboxEvent
from webhooks.replay import inbox_events_replay
from webhooks.sweep import inbox_sweep

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _empty_broker():
    broker_reset()
    yield
    broker_reset()


def queued_correlation_ids() -> list[str | None]:
    return [
        m["headers"].get(CELERY_HEADER)
        for m in broker_messages()
        if m["task"] == "webhooks.process_inbox_event"
    ]


def test_the_ingest_request_publishes_with_the_event_id(client):
    WebhookSourceFactory(slug="corr-ingest")
    body = research_event(event_id="evt_corr_ingest")
    response = signed_post(client, "corr-ingest", body)
    assert response.status_code == 202
    assert queued_correlation_ids() == ["evt_corr_ingest"]


def test_the_sweep_publishes_each_row_with_its_own_event_id():
    old = timezone.now() - timedelta(minutes=5)
    events = [InboxEventFactory(received_at=old) for _ in range(3)]
    assert correlation_id_get() == ""

    assert inbox_sweep() == 3

    assert sorted(queued_correlation_ids()) == sorted(e.event_id for e in events)
    assert correlation_id_get() == ""


def test_a_replay_publishes_each_row_with_its_own_event_id():
    events = [InboxEventFactory(processing_status="dead_lettered") for _ in range(2)]

    inbox_events_replay(
        events_queryset=InboxEvent.objects.all(),
        actor_name="ops",
        reason="handler fixed",
    )

    assert sorted(queued_correlation_ids()) == sorted(e.event_id for e in events)
