"""Research event bodies (docs/http-api.md, "The research envelope"): the one builder every test,
``bench`` and ``chaos`` use. Plain Python, so that it can run before Django is set up; the bodies
a producer really sends are the fixtures (``tests.integrations.fixtures``)."""

from __future__ import annotations

import hashlib
import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

DOCUMENT_CREATED = "research.document.created"
DOCUMENT_UPDATED = "research.document.updated"
DOCUMENT_DELETED = "research.document.deleted"
# The first event's occurred_at; each later one is a second after the one before.
BASE_TIME = datetime(2026, 8, 25, 10, 0, 0, tzinfo=UTC)
_sequence = itertools.count(1)


def instant(moment: datetime) -> str:
    """An instant as producers write it: RFC 3339 in UTC with ``Z``."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def research_event(
    *,
    entity_id: str | None = None,
    source_version: int | None = None,
    occurred_at: datetime | Any = None,
    number: int | None = None,
    **members: Any,
) -> dict[str, Any]:
    """A valid research event, new on every call: its own ``event_id``, its own document unless
    ``entity_id`` names one, an ``occurred_at`` one second after the previous event's, its own
    title, content hash and summary. ``source_version=None`` leaves the version out (ordering
    by ``occurred_at``, then ``event_id``).

    ``occurred_at`` may be a datetime or any value to send as it is. ``number`` picks the
    title, hash, summary and default ``occurred_at`` (the next of a counter by default): with
    it, an ``event_id`` and an ``entity_id``, two calls build the same content, a redelivery.
    Every other keyword is a top-level member, set as given after the body is built:
    ``event_type``, ``event_id``, ``data``, ``delivered_at``, or an invalid value on purpose
    (``entity=None``)."""
    n = next(_sequence) if number is None else number
    entity_id = entity_id or f"doc_{uuid.uuid4().hex[:10]}"
    entity: dict[str, Any] = {
        "entity_id": entity_id,
        "entity_type": "research_document",
    }
    if source_version is not None:
        entity["source_version"] = source_version
    if occurred_at is None:
        occurred_at = BASE_TIME + timedelta(seconds=n)
    body: dict[str, Any] = {
        "event_id": f"evt_{uuid.uuid4().hex}",
        "event_type": DOCUMENT_UPDATED,
        "occurred_at": instant(occurred_at)
        if isinstance(occurred_at, datetime)
        else occurred_at,
        "delivered_at": instant(datetime.now(UTC)),
        "producer": "public-research-sync",
        "entity": entity,
        "source": {
            "url": f"https://example.org/research/{entity_id}",
            "title": f"Research report {n}",
            "content_hash": f"sha256:{hashlib.sha256(str(n).encode()).hexdigest()}",
            "published_at": "2026-08-24T21:00:00Z",
        },
        "data": {
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
    body.update(members)
    return body
