"""Writes. Functions with keyword-only, typed arguments: <entity>_<action>."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import OperationalError, connection
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from psycopg.errors import LockNotAvailable

from core.errors import PermanentProcessingError, TransientProcessingError

from .models import Citation, DocumentRevision, ResearchDocument

if TYPE_CHECKING:
    from webhooks.models import InboxEvent

DOCUMENT_EVENT_KINDS = {
    "research.document.created": DocumentRevision.Kind.CREATED,
    "research.document.updated": DocumentRevision.Kind.UPDATED,
    "research.document.deleted": DocumentRevision.Kind.DELETED,
}

_http_url = URLValidator(schemes=["http", "https"])


class Decision:
    APPLY = "apply"
    DUPLICATE_VERSION = "duplicate_version"
    OUT_OF_ORDER = "out_of_order"


@dataclass(frozen=True)
class DocumentChange:
    """What one event would apply, validated before anything is written."""

    kind: str
    entity_id: str
    entity_type: str
    source_version: int | None
    occurred_at: datetime | None
    event_id: str
    source_url: str
    title: str
    content_hash: str
    published_at: datetime | None
    summary: str
    authors: list[str]
    citations: list[dict[str, str]]

    def snapshot(self) -> dict[str, Any]:
        if self.kind == DocumentRevision.Kind.DELETED:
            return {"is_deleted": True, "source_version": self.source_version}
        return {
            "source_version": self.source_version,
            "source_url": self.source_url,
            "title": self.title,
            "source_content_hash": self.content_hash,
            "published_at": self.published_at.isoformat()
            if self.published_at
            else None,
            "summary": self.summary,
            "authors": self.authors,
            "citations": self.citations,
            "is_deleted": False,
        }


def _reject(reason: str) -> PermanentProcessingError:
    return PermanentProcessingError(reason)


def _optional_str(container: dict, key: str, where: str) -> str:
    value = container.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _reject(f"{where}.{key} must be a string, got {type(value).__name__}")
    return value


def _data_validate(data: Any) -> tuple[str, list[str], list[dict[str, str]]]:
    """``summary`` a string, ``authors`` a list of strings, ``citations`` a list of
    ``{text, reference_url}`` with absolute http(s) URLs. Absent members mean empty."""
    if data is None:
        return "", [], []
    if not isinstance(data, dict):
        raise _reject(f"data must be an object, got {type(data).__name__}")
    summary = _optional_str(data, "summary", "data")

    authors = data.get("authors")
    if authors is None:
        authors = []
    if not isinstance(authors, list):
        raise _reject(f"data.authors must be a list, got {type(authors).__name__}")
    for index, author in enumerate(authors):
        if not isinstance(author, str):
            raise _reject(
                f"data.authors[{index}] must be a string, got {type(author).__name__}"
            )

    citations = data.get("citations")
    if citations is None:
        citations = []
    if not isinstance(citations, list):
        raise _reject(f"data.citations must be a list, got {type(citations).__name__}")
    cleaned: list[dict[str, str]] = []
    for index, citation in enumerate(citations):
        where = f"data.citations[{index}]"
        if not isinstance(citation, dict):
            raise _reject(f"{where} must be an object with text and reference_url")
        text = citation.get("text")
        url = citation.get("reference_url")
        if not isinstance(text, str):
            raise _reject(f"{where}.text must be a string")
        if not isinstance(url, str) or not url:
            raise _reject(f"{where}.reference_url must be a string")
        try:
            _http_url(url)
        except ValidationError:
            raise _reject(
                f"{where}.reference_url must be an absolute http(s) URL: {url[:200]!r}"
            ) from None
        cleaned.append({"text": text, "reference_url": url})
    return summary, authors, cleaned


def _datetime_parse(value: Any, where: str) -> datetime | None:
    if value in (None, ""):
        return None
    parsed = parse_datetime(value) if isinstance(value, str) else None
    if parsed is None or parsed.tzinfo is None:
        raise _reject(f"{where} must be an RFC 3339 date-time with a UTC offset")
    return parsed


def document_change_parse(*, event: InboxEvent, kind: str) -> DocumentChange:
    """Reads the event's raw body into a validated change; raises
    ``PermanentProcessingError`` with an operator-readable reason when the data is invalid."""
    if event.raw_body is None:
        raise _reject("the raw body was purged; the event cannot be processed")
    try:
        body = json.loads(bytes(event.raw_body))
    except (ValueError, UnicodeDecodeError):
        raise _reject("the raw body is not JSON") from None
    if not isinstance(body, dict):
        raise _reject("the body is not a JSON object")
    entity = body.get("entity")
    if not isinstance(entity, dict):
        entity = {}
    entity_id = event.entity_id or _optional_str(entity, "entity_id", "entity")
    if not entity_id:
        raise _reject("entity.entity_id is missing")
    source = body.get("source")
    if source is None:
        source = {}
    if not isinstance(source, dict):
        raise _reject("source must be an object")

    if kind == DocumentRevision.Kind.DELETED:
        summary, authors, citations = "", [], []
        source_url = title = ""
        published_at = None
    else:
        summary, authors, citations = _data_validate(body.get("data"))
        source_url = _optional_str(source, "url", "source")
        title = _optional_str(source, "title", "source")
        published_at = _datetime_parse(
            source.get("published_at"), "source.published_at"
        )
        if not source_url:
            raise _reject("source.url is required for created and updated events")
    content_hash = _optional_str(source, "content_hash", "source")
    if kind != DocumentRevision.Kind.DELETED and not content_hash:
        raise _reject("source.content_hash is required for created and updated events")

    occurred_at = event.occurred_at or _datetime_parse(
        body.get("occurred_at"), "occurred_at"
    )
    return DocumentChange(
        kind=kind,
        entity_id=entity_id,
        entity_type=event.entity_type or _optional_str(entity, "entity_type", "entity"),
        source_version=event.source_version,
        occurred_at=occurred_at,
        event_id=event.event_id,
        source_url=source_url,
        title=title,
        content_hash=content_hash,
        published_at=published_at,
        summary=summary,
        authors=authors,
        citations=citations,
    )


def document_change_decide(
    *, document: ResearchDocument, change: DocumentChange
) -> str:
    """The ordering rule of the SPEC: versions when both sides have one, else
    ``(occurred_at, event_id)``. Arrival order never decides."""
    if not document.last_event_id:
        return Decision.APPLY  # nothing applied yet
    if (
        change.source_version is not None
        and document.current_source_version is not None
    ):
        if change.source_version > document.current_source_version:
            return Decision.APPLY
        if change.source_version == document.current_source_version:
            return Decision.DUPLICATE_VERSION
        return Decision.OUT_OF_ORDER
    floor = datetime.min.replace(tzinfo=UTC)
    incoming = (change.occurred_at or floor, change.event_id)
    current = (document.last_occurred_at or floor, document.last_event_id)
    if incoming > current:
        return Decision.APPLY
    if incoming == current:
        return Decision.DUPLICATE_VERSION
    return Decision.OUT_OF_ORDER


_DOCUMENT_LOCK_SQL = f"""
INSERT INTO {ResearchDocument._meta.db_table} (
    entity_id, entity_type, current_source_version, last_occurred_at, last_event_id,
    source_url, title, source_content_hash, published_at, summary, authors, is_deleted,
    deleted_at, created_at, updated_at
) VALUES (%s, '', NULL, NULL, '', '', '', '', NULL, '', '[]'::jsonb, false, NULL, %s, %s)
ON CONFLICT (entity_id) DO UPDATE SET entity_id = EXCLUDED.entity_id
RETURNING *
"""  # noqa: S608 - the table name from the model, values bound


def _document_lock(*, entity_id: str) -> ResearchDocument:
    """The document's row, locked until the transaction ends; created empty (nothing applied)
    if it does not exist. One statement: ``INSERT ... ON CONFLICT DO UPDATE`` locks the row it
    finds or inserts, so two first events for one entity meet on the same row.

    The statement is PostgreSQL's. On the embedded SQLite default, transactions take the
    database's one write lock when they begin (``IMMEDIATE``), so a plain get-or-create is
    already alone."""
    if connection.vendor != "postgresql":
        document, _ = ResearchDocument.objects.get_or_create(entity_id=entity_id)
        return document
    with connection.cursor() as cursor:
        cursor.execute(
            "SET LOCAL lock_timeout = %s",
            [f"{int(settings.RESEARCH_DOCUMENT_LOCK_TIMEOUT_MS)}ms"],
        )
    now = timezone.now()
    try:
        (document,) = ResearchDocument.objects.raw(
            _DOCUMENT_LOCK_SQL, [entity_id, now, now]
        )
    except OperationalError as exc:
        if not isinstance(exc.__cause__, LockNotAvailable):
            raise
        raise TransientProcessingError(
            f"document {entity_id!r} stayed locked by another transaction for more "
            f"than {settings.RESEARCH_DOCUMENT_LOCK_TIMEOUT_MS} ms (lock timeout)"
        ) from exc
    return document


def document_change_apply(
    *, event: InboxEvent, change: DocumentChange
) -> tuple[str, ResearchDocument, DocumentRevision | None]:
    """Applies ``change`` to its document if the ordering rule lets it, with its revision.

    Must run inside the transaction that also records the event's new status: the document
    row stays locked until that commits, so two workers applying versions 7 and 8 at once are
    serialised and the state can never end at 7."""
    document = _document_lock(entity_id=change.entity_id)
    decision = document_change_decide(document=document, change=change)
    if decision != Decision.APPLY:
        return decision, document, None

    now = timezone.now()
    had_state = bool(document.last_event_id)
    document.entity_type = change.entity_type or document.entity_type
    document.current_source_version = change.source_version
    document.last_occurred_at = change.occurred_at
    document.last_event_id = change.event_id
    document.source_content_hash = change.content_hash
    if change.kind == DocumentRevision.Kind.DELETED:
        # A tombstone keeps identity and version; the content is gone.
        document.is_deleted = True
        document.deleted_at = now
        document.source_url = ""
        document.title = ""
        document.published_at = None
        document.summary = ""
        document.authors = []
    else:
        document.is_deleted = False
        document.deleted_at = None
        document.source_url = change.source_url
        document.title = change.title
        document.published_at = change.published_at
        document.summary = change.summary
        document.authors = change.authors
    document.save()

    if had_state:  # a document created by this transaction has no citations yet
        Citation.objects.filter(document=document).delete()
    if change.citations:
        Citation.objects.bulk_create(
            Citation(document=document, position=position, **citation)
            for position, citation in enumerate(change.citations)
        )
    revision = DocumentRevision.objects.create(
        document=document,
        inbox_event=event,
        event_id=change.event_id,
        kind=change.kind,
        source_version=change.source_version,
        occurred_at=change.occurred_at,
        content_hash=change.content_hash,
        snapshot=change.snapshot(),
        applied_at=now,
    )
    return decision, document, revision
