"""Research documents and their revisions, made the way the product makes them: a research
event stored as ingest stores it, then processed by the processing service."""

from __future__ import annotations

from tests.integrations.research.factories import research_event
from tests.webhooks.factories import InboxEventFactory
from webhooks.models import InboxEvent
from webhooks.processing import inbox_event_process


def document_event_apply(
    body: dict | None = None, *, worker: str = "test"
) -> InboxEvent:
    """Stores ``body`` (a new research event unless given) and processes it as a worker would;
    returns the row with its outcome."""
    event = InboxEventFactory(body=body or research_event())
    inbox_event_process(inbox_event_id=event.pk, worker=worker)
    event.refresh_from_db()
    return event
