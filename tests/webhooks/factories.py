"""Sources with their secrets, inbox rows stored as ingest stores them, their attempts and
fingerprint mismatches, and the signing helpers of the webhook tests (real HMAC, through
``webhooks.schemes``).

An inbox row is built from a body (a research event of ``tests.integrations.research.factories``
unless given): its columns are read from the body, ``raw_body`` is the body's bytes,
``payload_hash`` their SHA-256 and ``content_fingerprint`` what ingest computes
(``webhooks.envelopes.content_fingerprint``: the canonical JSON without the delivery fields).
Columns given to a factory override what the body says: a status, times, attempts."""

from __future__ import annotations

import json
import time
from typing import Any

import factory
from django.utils import timezone

from tests.integrations.research.factories import research_event
from webhooks.envelopes import content_fingerprint, instant_parse, raw_fingerprint
from webhooks.models import (
    DeadLetterCause,
    FingerprintMismatch,
    InboxAttempt,
    InboxEvent,
    InboxKey,
    ProcessingStatus,
    SourceHold,
    WebhookSecret,
    WebhookSource,
)
from webhooks.schemes import signature_headers

HMAC_SECRET = "test-secret-hmac-0123456789abcdef"
STANDARD_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
GITHUB_SECRET = "It's a Secret to Everybody"
# The secret every factory-made source signs with, by scheme.
SECRETS = {
    "hmac-sha256": HMAC_SECRET,
    "standard-webhooks": STANDARD_SECRET,
    "github": GITHUB_SECRET,
}
RESEARCH_SOURCE = "research-sync"


# --- sources and secrets --------------------------------------------------------------------


class WebhookSourceFactory(factory.django.DjangoModelFactory):
    """A source with one secret: ``secret=`` names it, else its scheme's test secret."""

    class Meta:
        model = WebhookSource
        skip_postgeneration_save = True

    slug = factory.Sequence(lambda n: f"source-{n}")
    scheme = "hmac-sha256"
    handler = "research"

    @factory.post_generation
    def secret(obj, create, extracted, **kwargs):
        if create:
            WebhookSecret.objects.create(
                source=obj, secret=extracted or SECRETS[obj.scheme]
            )


class WebhookSecretFactory(factory.django.DjangoModelFactory):
    """Another secret of a source, as a rotation leaves it."""

    class Meta:
        model = WebhookSecret

    source = factory.SubFactory(WebhookSourceFactory)
    secret = factory.Sequence(lambda n: f"whsecret-{n}-5f2b9c1e7d4a")


def research_source(slug: str = RESEARCH_SOURCE) -> WebhookSource:
    """The research source of that slug, created with its secret the first time."""
    return WebhookSource.objects.filter(slug=slug).first() or WebhookSourceFactory(
        slug=slug, scheme="hmac-sha256", handler="research"
    )


def hold_of(source: WebhookSource) -> SourceHold | None:
    """The source's hold as stored now: ``None`` while it is neither paused nor draining."""
    return SourceHold.objects.filter(source_id=source.pk).first()


def paused_at_of(source: WebhookSource):
    """When the source was paused, as stored now; ``None`` while it is not paused."""
    hold = hold_of(source)
    return hold.paused_at if hold is not None else None


# --- signing and posting --------------------------------------------------------------------


def encode(body: Any) -> bytes:
    return json.dumps(body).encode()


def signed_headers(
    *,
    scheme: str = "hmac-sha256",
    raw_body: bytes,
    event_id: str,
    secret: str | None = None,
    timestamp: int | None = None,
) -> dict[str, str]:
    """The headers a producer sends, signed with the scheme's test secret unless given."""
    return signature_headers(
        scheme=scheme,
        secret=secret or SECRETS[scheme],
        raw_body=raw_body,
        event_id=event_id,
        timestamp=int(time.time()) if timestamp is None else timestamp,
    )


def as_meta(headers: dict[str, str]) -> dict[str, str]:
    """HTTP headers as the Django test client's WSGI environ keys."""
    return {"HTTP_" + name.upper().replace("-", "_"): v for name, v in headers.items()}


def webhook_post(client, slug: str, raw_body: bytes, headers: dict[str, str], **extra):
    """``POST /webhooks/<slug>/`` through a Django test client, with a producer's headers."""
    return client.post(
        f"/webhooks/{slug}/",
        data=raw_body,
        content_type="application/json",
        **as_meta(headers),
        **extra,
    )


def signed_post(client, slug: str, body, *, event_id: str | None = None, **signing):
    """``body`` (a dict, or bytes sent as they are) signed as ``signed_headers`` signs and
    posted; the id header is the body's ``event_id`` unless given."""
    raw = body if isinstance(body, bytes) else encode(body)
    if event_id is None:
        event_id = body["event_id"]
    headers = signed_headers(raw_body=raw, event_id=event_id, **signing)
    return webhook_post(client, slug, raw, headers)


# --- inbox rows -----------------------------------------------------------------------------


def stored_headers(event_id: str) -> dict[str, str]:
    """Headers as ingest keeps them: lower-case names, the signature cut to a prefix."""
    return {
        "content-type": "application/json",
        "x-webhook-id": event_id,
        "x-webhook-signature": "v1=3f2a9c0d1...",
    }


def _entity(body: dict) -> dict:
    entity = body.get("entity")
    return entity if isinstance(entity, dict) else {}


class InboxEventFactory(factory.django.DjangoModelFactory):
    """An inbox row as ingest stores ``body`` (a new research event unless given), received
    now and never published (waiting for the relay's claim), on the research source unless
    given."""

    class Meta:
        model = InboxEvent

    class Params:
        body = factory.LazyFunction(research_event)

    source = factory.LazyFunction(research_source)
    event_id = factory.LazyAttribute(lambda o: o.body["event_id"])
    event_type = factory.LazyAttribute(lambda o: o.body["event_type"])
    entity_id = factory.LazyAttribute(lambda o: _entity(o.body).get("entity_id", ""))
    entity_type = factory.LazyAttribute(
        lambda o: _entity(o.body).get("entity_type", "")
    )
    source_version = factory.LazyAttribute(
        lambda o: _entity(o.body).get("source_version")
    )
    occurred_at = factory.LazyAttribute(
        lambda o: instant_parse(o.body.get("occurred_at"), required=False)[0]
    )
    tenant_id = factory.LazyAttribute(lambda o: o.body.get("tenant_id") or "")
    idempotency_key = factory.LazyAttribute(
        lambda o: o.body.get("idempotency_key") or ""
    )
    raw_body = factory.LazyAttribute(lambda o: encode(o.body))
    payload_hash = factory.LazyAttribute(lambda o: raw_fingerprint(bytes(o.raw_body)))
    content_fingerprint = factory.LazyAttribute(lambda o: content_fingerprint(o.body))
    headers = factory.LazyAttribute(lambda o: stored_headers(o.event_id))
    remote_addr = "127.0.0.1"
    received_at = factory.LazyFunction(timezone.now)
    last_seen_at = factory.LazyAttribute(lambda o: o.received_at)

    @classmethod
    def _create(cls, model_class: type[InboxEvent], *args: Any, **kwargs: Any):
        row = super()._create(model_class, *args, **kwargs)
        inbox_keys_create([row])
        return row


def inbox_keys_create(rows: list[InboxEvent]) -> None:
    """The ledger's key of each row, as ingest writes it with the row (``InboxKey``)."""
    InboxKey.objects.bulk_create(
        [
            InboxKey(
                inbox_event_id=row.pk,
                source_id=row.source_id,
                event_id=row.event_id,
                body_key=row.body_key,
                content_digest=bytes.fromhex(row.content_fingerprint),
                received_at=row.received_at,
                delivery_count=row.delivery_count,
            )
            for row in rows
        ],
        batch_size=1000,
    )


class DeadLetteredEventFactory(InboxEventFactory):
    processing_status = ProcessingStatus.DEAD_LETTERED
    attempts = 8
    error_message = "handler exploded: ValueError"
    dead_letter_cause = DeadLetterCause.EXHAUSTED


def inbox_events_bulk_create(bodies: list[dict], **columns: Any) -> list[InboxEvent]:
    """One row per body in a few statements (``bulk_create``), all on one source."""
    columns.setdefault("source", research_source())
    rows = [InboxEventFactory.build(body=body, **columns) for body in bodies]
    created = InboxEvent.objects.bulk_create(rows, batch_size=1000)
    inbox_keys_create(created)
    return created


class InboxAttemptFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = InboxAttempt

    event = factory.SubFactory(InboxEventFactory)
    event_received_at = factory.LazyAttribute(lambda o: o.event.received_at)
    number = 1
    outcome = InboxAttempt.Outcome.RETRY
    error = "boom"
    worker = "w1@host"


def conflicting_body(event: InboxEvent) -> dict:
    """The stored body of ``event`` with the next source version: same id, other content."""
    body = json.loads(bytes(event.raw_body))
    entity = body["entity"]
    entity["source_version"] = (entity.get("source_version") or 0) + 1
    return body


class FingerprintMismatchFactory(factory.django.DjangoModelFactory):
    """The evidence ingest keeps of a conflicting delivery of ``event`` (``body``, by default
    the event's body with the next source version)."""

    class Meta:
        model = FingerprintMismatch

    class Params:
        body = factory.LazyAttribute(lambda o: conflicting_body(o.event))

    event = factory.SubFactory(InboxEventFactory)
    raw_body = factory.LazyAttribute(lambda o: encode(o.body))
    headers = factory.LazyAttribute(lambda o: stored_headers(o.event.event_id))
    original_fingerprint = factory.LazyAttribute(lambda o: o.event.content_fingerprint)
    conflicting_fingerprint = factory.LazyAttribute(
        lambda o: content_fingerprint(o.body)
    )
    conflicting_payload_hash = factory.LazyAttribute(
        lambda o: raw_fingerprint(bytes(o.raw_body))
    )
    remote_addr = "203.0.113.9"


def inbox_partitions_with_rows() -> set[str]:
    """The inbox's partitions (PostgreSQL) that hold rows, by name; the table's own name
    where it is not partitioned. A plan may scan an empty partition whole: it reads
    nothing."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT tableoid::regclass::text FROM {InboxEvent._meta.db_table}"  # noqa: S608
        )
        return {row[0] for row in cursor.fetchall()}
