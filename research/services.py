"""Writes: research documents change only through ``document_change_apply``, under the
ordering rule (docs/architecture.md, "Research documents")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import OperationalError, connection
from django.utils import timezone
from psycopg.errors import LockNotAvailable

from core.errors import PermanentProcessingError, TransientProcessingError

from .models import Citation, DocumentRevision, ResearchDocument

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


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _reject(f"{where} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise _reject(f"{where} must not contain NUL characters")
    return value


def _list(value: Any, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _reject(f"{where} must be a list, got {type(value).__name__}")
    return value


def document_data_validate(data: Any) -> tuple[str, list[str], list[dict[str, str]]]:
    """The ``data`` member of a created or updated event: ``summary`` a string, ``authors`` a
    list of strings, ``citations`` a list of ``{text, reference_url}`` with absolute http(s)
    URLs; absent members mean empty. No string may hold a NUL character (the database refuses
    it). Invalid data raises ``PermanentProcessingError`` naming what is wrong."""
    if data is None:
        return "", [], []
    if not isinstance(data, dict):
        raise _reject(f"data must be an object, got {type(data).__name__}")
    summary = data.get("summary")
    summary = "" if summary is None else _string(summary, "data.summary")
    authors = [
        _string(author, f"data.authors[{index}]")
        for index, author in enumerate(_list(data.get("authors"), "data.authors"))
    ]
    cleaned: list[dict[str, str]] = []
    for index, citation in enumerate(_list(data.get("citations"), "data.citations")):
        where = f"data.citations[{index}]"
        if not isinstance(citation, dict):
            raise _reject(f"{where} must be an object with text and reference_url")
        text = _string(citation.get("text"), f"{where}.text")
        url = _string(citation.get("reference_url"), f"{where}.reference_url")
        try:
            _http_url(url)
        except ValidationError:
            raise _reject(
                f"{where}.reference_url must be an absolute http(s) URL: {url[:200]!r}"
            ) from None
        cleaned.append({"text": text, "reference_url": url})
    return summary, authors, cleaned


def document_change_decide(
    *, document: ResearchDocument, change: DocumentChange
) -> str:
    """The ordering rule (docs/architecture.md, "Research documents"): versions when both
    sides have one, else ``(occurred_at, event_id)``. Arrival order never decides."""
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
    *, inbox_event_id: int, change: DocumentChange
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
        inbox_event_id=inbox_event_id,
        event_id=change.event_id,
        kind=change.kind,
        source_version=change.source_version,
        occurred_at=change.occurred_at,
        content_hash=change.content_hash,
        snapshot=change.snapshot(),
        applied_at=now,
    )
    return decision, document, revision
