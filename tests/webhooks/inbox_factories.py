"""Inbox rows built directly (as the ingest view stores them), for processing tests: a valid
research envelope, its raw body bytes, payload hash and content fingerprint."""

from __future__ import annotations

import hashlib
import itertools
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from webhooks.models import InboxEvent, WebhookSource

BASE_TIME = datetime(2026, 8, 25, 10, 0, 0, tzinfo=UTC)
_sequence = itertools.count(1)


def research_source(slug: str = "research-sync") -> WebhookSource:
    source, _ = WebhookSource.objects.get_or_create(
        slug=slug, defaults={"handler": "research", "scheme": "hmac-sha256"}
    )
    return source


def research_envelope(
    *,
    entity_id: str | None = None,
    event_type: str = "research.document.updated",
    source_version: int | None = None,
    occurred_at: datetime | None = None,
    event_id: str | None = None,
    data: Any = None,
    **extra: Any,
) -> dict[str, Any]:
    n = next(_sequence)
    entity_id = entity_id or f"doc_{uuid.uuid4().hex[:10]}"
    entity: dict[str, Any] = {
        "entity_id": entity_id,
        "entity_type": "research_document",
    }
    if source_version is not None:
        entity["source_version"] = source_version
    occurred_at = occurred_at or BASE_TIME + timedelta(seconds=n)
    envelope: dict[str, Any] = {
        "event_id": event_id or f"evt_{uuid.uuid4().hex}",
        "event_type": event_type,
        "occurred_at": occurred_at.isoformat().replace("+00:00", "Z"),
        "delivered_at": timezone.now().isoformat(),
        "producer": "public-research-sync",
        "entity": entity,
        "source": {
            "url": f"https://example.org/research/{entity_id}",
            "title": f"Research report {n}",
            "content_hash": f"sha256:{hashlib.sha256(str(n).encode()).hexdigest()}",
            "published_at": "2026-08-24T21:00:00Z",
        },
        "data": data
        if data is not None
        else {
            "summary": f"Summary {n}",
            "authors": ["A", "B"],
            "citations": [
                {
                    "text": "A verifiable quote",
                    "reference_url": f"https://example.org/research/{entity_id}#s{n}",
                }
            ],
        },
    }
    envelope.update(extra)
    return envelope


def content_fingerprint(envelope: dict[str, Any]) -> str:
    stripped = {
        k: v
        for k, v in envelope.items()
        if k not in ("delivered_at", "delivery_attempt")
    }
    canonical = json.dumps(
        stripped, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def inbox_event_build(
    envelope: dict[str, Any], *, source: WebhookSource | None = None, **fields: Any
) -> InboxEvent:
    raw_body = json.dumps(envelope).encode()
    entity = envelope.get("entity") or {}
    values: dict[str, Any] = {
        "source": source or research_source(),
        "event_id": envelope["event_id"],
        "event_type": envelope["event_type"],
        "entity_id": entity.get("entity_id", ""),
        "entity_type": entity.get("entity_type", ""),
        "source_version": entity.get("source_version"),
        "occurred_at": datetime.fromisoformat(envelope["occurred_at"]),
        "payload_hash": hashlib.sha256(raw_body).hexdigest(),
        "content_fingerprint": content_fingerprint(envelope),
        "raw_body": raw_body,
        "headers": {"X-Webhook-Signature": "v1=0123abcd…"},
    }
    values.update(fields)
    return InboxEvent(**values)


def inbox_event_create(
    envelope: dict[str, Any] | None = None, **fields: Any
) -> InboxEvent:
    """One stored inbox row (no message published), as the ingest view leaves it."""
    event = inbox_event_build(envelope or research_envelope(), **fields)
    event.save()
    return event


def inbox_events_bulk_create(
    envelopes: list[dict[str, Any]], **fields: Any
) -> list[InboxEvent]:
    source = fields.pop("source", None) or research_source()
    rows = [inbox_event_build(e, source=source, **fields) for e in envelopes]
    return InboxEvent.objects.bulk_create(rows, batch_size=1000)
