import hashlib
import json
from datetime import timedelta

import factory
from django.utils import timezone

from webhooks.models import (
    FingerprintMismatch,
    InboxAttempt,
    InboxEvent,
    ProcessingStatus,
    WebhookSecret,
    WebhookSource,
)


class WebhookSourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = WebhookSource

    slug = factory.Sequence(lambda n: f"source-{n}")
    handler = "research"


class WebhookSecretFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = WebhookSecret

    source = factory.SubFactory(WebhookSourceFactory)
    secret = factory.Sequence(lambda n: f"whsecret-{n}-5f2b9c1e7d4a")


def research_body(event_id: str, entity_id: str = "doc-1", version: int = 1) -> bytes:
    return json.dumps(
        {
            "event_id": event_id,
            "event_type": "research.document.updated",
            "occurred_at": "2026-11-30T10:00:00Z",
            "entity": {
                "entity_id": entity_id,
                "entity_type": "document",
                "source_version": version,
            },
            "source": {
                "url": "https://example.org/paper",
                "title": "A <b>bold</b> title & more",
                "content_hash": "abc123",
            },
            "data": {"summary": "<script>alert(1)</script>", "authors": ["Ada"]},
        }
    ).encode()


class InboxEventFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = InboxEvent

    source = factory.SubFactory(WebhookSourceFactory)
    event_id = factory.Sequence(lambda n: f"evt-{n:06d}")
    event_type = "research.document.updated"
    entity_id = factory.Sequence(lambda n: f"doc-{n}")
    entity_type = "document"
    source_version = 1
    occurred_at = factory.LazyFunction(lambda: timezone.now() - timedelta(minutes=5))
    raw_body = factory.LazyAttribute(lambda o: research_body(o.event_id, o.entity_id))
    payload_hash = factory.LazyAttribute(
        lambda o: hashlib.sha256(bytes(o.raw_body)).hexdigest()
    )
    content_fingerprint = factory.LazyAttribute(lambda o: o.payload_hash)
    headers = factory.LazyFunction(lambda: {"X-Webhook-Signature": "v1=3f2a…"})
    processing_status = ProcessingStatus.RECEIVED


class DeadLetteredEventFactory(InboxEventFactory):
    processing_status = ProcessingStatus.DEAD_LETTERED
    attempts = 8
    error_message = "handler exploded: ValueError"


class InboxAttemptFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = InboxAttempt

    event = factory.SubFactory(InboxEventFactory)
    number = 1
    outcome = InboxAttempt.Outcome.RETRY
    error = "boom"
    worker = "w1@host"


class FingerprintMismatchFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = FingerprintMismatch

    event = factory.SubFactory(InboxEventFactory)
    raw_body = factory.LazyAttribute(
        lambda o: research_body(o.event.event_id, o.event.entity_id, version=2)
    )
    original_fingerprint = factory.LazyAttribute(lambda o: o.event.content_fingerprint)
    conflicting_fingerprint = factory.LazyAttribute(
        lambda o: hashlib.sha256(bytes(o.raw_body)).hexdigest()
    )
    conflicting_payload_hash = factory.LazyAttribute(
        lambda o: o.conflicting_fingerprint
    )
    remote_addr = "203.0.113.9"
