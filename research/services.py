"""Writes: research documents change only under the ordering rule (docs/subsystems/processing.md,
"Research documents"): a set of changes through ``document_changes_apply`` (its statements in
``research/statements.py``), a change on its own through ``document_change_apply`` (the ORM)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import connection
from django.utils import timezone

from core.db import LockWaitExceeded, lock_wait_bounded, set_statement_execute
from core.errors import PermanentProcessingError, TransientProcessingError

from . import statements
from .models import Citation, DocumentRevision, ResearchDocument

_http_url = URLValidator(schemes=["http", "https"])


class Decision(StrEnum):
    """What the ordering rule decides for a change (``document_change_decide``)."""

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
    *, document: LockedDocument, change: DocumentChange
) -> Decision:
    """The ordering rule (docs/subsystems/processing.md, "Research documents"): versions when both
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


@dataclass(frozen=True)
class LockedDocument:
    """What the ordering rule reads of a locked document."""

    pk: int
    current_source_version: int | None
    last_occurred_at: datetime | None
    last_event_id: str


def _locked(document: ResearchDocument) -> LockedDocument:
    return LockedDocument(
        pk=document.pk,
        current_source_version=document.current_source_version,
        last_occurred_at=document.last_occurred_at,
        last_event_id=document.last_event_id,
    )


def _lock_waited_too_long(what: str) -> TransientProcessingError:
    return TransientProcessingError(
        f"{what} stayed locked by another transaction for more than "
        f"{settings.INBOX_LOCK_TIMEOUT_MS} ms (lock timeout)"
    )


def document_change_apply(
    *, inbox_event_id: int, change: DocumentChange
) -> tuple[Decision, LockedDocument, bool]:
    """Applies ``change`` to its document if the ordering rule lets it, with its revision;
    returns the decision, the document as it was, and whether it applied. Plain ORM: the
    path of the embedded SQLite default and of an event run on its own after its set rolled
    back (``document_changes_apply`` is the set's, a set of one included).

    Must run inside the transaction that also records the event's new status: the document
    row stays locked (``select_for_update``, created for a first event) until that commits,
    so two workers applying versions 7 and 8 at once are serialised and the state can never
    end at 7. Waiting for the lock gives up after the session's ``lock_timeout`` (the
    processing batch sets it to ``INBOX_LOCK_TIMEOUT_MS``) with a transient error. On SQLite,
    transactions take the database's one write lock when they begin (``IMMEDIATE``)."""
    try:
        with lock_wait_bounded():
            row, _ = ResearchDocument.objects.select_for_update().get_or_create(
                entity_id=change.entity_id
            )
    except LockWaitExceeded as exc:
        raise _lock_waited_too_long(f"document {change.entity_id!r}") from exc
    document = _locked(row)
    decision = document_change_decide(document=document, change=change)
    if decision != Decision.APPLY:
        return decision, document, False
    now = timezone.now()
    deleted = change.kind == DocumentRevision.Kind.DELETED
    # A tombstone keeps identity and version; the content is gone.
    ResearchDocument.objects.filter(pk=row.pk).update(
        entity_type=change.entity_type or row.entity_type,
        current_source_version=change.source_version,
        last_occurred_at=change.occurred_at,
        last_event_id=change.event_id,
        source_content_hash=change.content_hash,
        is_deleted=deleted,
        deleted_at=now if deleted else None,
        source_url="" if deleted else change.source_url,
        title="" if deleted else change.title,
        published_at=None if deleted else change.published_at,
        summary="" if deleted else change.summary,
        authors=[] if deleted else change.authors,
        updated_at=now,
    )
    if document.last_event_id:  # a document created by this transaction has none yet
        Citation.objects.filter(document_id=row.pk).delete()
    Citation.objects.bulk_create(
        Citation(
            document_id=row.pk,
            position=position,
            text=citation["text"],
            reference_url=citation["reference_url"],
        )
        for position, citation in enumerate([] if deleted else change.citations)
    )
    DocumentRevision.objects.create(
        document_id=row.pk,
        inbox_event_id=inbox_event_id,
        event_id=change.event_id,
        kind=change.kind,
        source_version=change.source_version,
        occurred_at=change.occurred_at,
        content_hash=change.content_hash,
        snapshot=change.snapshot(),
        applied_at=now,
    )
    return decision, document, True


# --- a batch of changes as a set (PostgreSQL) -----------------------------------------------

_AUTHORS = ResearchDocument._meta.get_field("authors")
_SNAPSHOT = DocumentRevision._meta.get_field("snapshot")

# What the ordering rule reads of a document that does not exist yet: nothing applied.
_NOTHING_APPLIED = LockedDocument(
    pk=0, current_source_version=None, last_occurred_at=None, last_event_id=""
)


class DocumentCreatedMeanwhile(TransientProcessingError):
    """A document the batch decided as new was created by another transaction meanwhile:
    the batch's decisions no longer hold (its caller rolls it back)."""


def _documents_lock(*, entity_ids: list[str]) -> dict[str, LockedDocument]:
    """The existing documents of ``entity_ids``, locked until the transaction ends, in one
    statement (``statements.DOCUMENTS_LOCK_SQL``); a wait past ``INBOX_LOCK_TIMEOUT_MS`` is a
    transient error, as for one document."""
    try:
        rows = set_statement_execute(
            statements.DOCUMENTS_LOCK_SQL,
            {"entity_ids": sorted(entity_ids)},
            lock_timeout_ms=settings.INBOX_LOCK_TIMEOUT_MS,
            # Prepared, a plan made while the table was empty read every document.
            planned_for_values=True,
        )
    except LockWaitExceeded as exc:
        raise _lock_waited_too_long(f"{len(entity_ids)} documents") from exc
    return {
        entity_id: LockedDocument(
            pk=pk,
            current_source_version=version,
            last_occurred_at=occurred,
            last_event_id=event_id,
        )
        for pk, entity_id, version, occurred, event_id in rows
    }


def document_changes_apply(
    *, changes: list[tuple[int, DocumentChange]]
) -> list[tuple[Decision, LockedDocument, bool]]:
    """Applies a batch of changes, given as ``(inbox event id, change)`` in the order the
    events must apply, as ``document_change_apply`` would one after the other: the same
    ordering rule (``document_change_decide``) decides each against the state the earlier
    ones left. Returns, for each, the decision, the document as it was then, and whether it
    applied.

    PostgreSQL only, inside the transaction that also closes the events: one statement locks
    every existing document touched (in entity_id order, see ``statements.DOCUMENTS_LOCK_SQL``), one
    writes the documents' final states, their citations and a revision per applied change.
    Each document changed gets one row version per batch, however many of its events apply.
    A value the database refuses fails the whole statement, and so does a document another
    transaction created meanwhile (``DocumentCreatedMeanwhile``): the caller rolls the batch
    back."""
    if not changes:
        return []
    state = _documents_lock(entity_ids=list({c.entity_id for _, c in changes}))
    now = timezone.now()
    results: list[tuple[Decision, LockedDocument, bool]] = []
    final: dict[str, tuple[int | None, DocumentChange]] = {}  # the last change applied
    revisions: list[tuple[int, DocumentChange]] = []
    for inbox_event_id, change in changes:
        document = state.get(change.entity_id, _NOTHING_APPLIED)
        decision = document_change_decide(document=document, change=change)
        applied = decision == Decision.APPLY
        results.append((decision, document, applied))
        if not applied:
            continue
        state[change.entity_id] = LockedDocument(
            pk=document.pk,
            current_source_version=change.source_version,
            last_occurred_at=change.occurred_at,
            last_event_id=change.event_id,
        )
        final[change.entity_id] = (document.pk or None, change)
        revisions.append((inbox_event_id, change))
    if not revisions:
        return results

    columns: dict[str, list] = {
        name: []
        for name in (
            "d_pk",
            "d_entity_id",
            "d_entity_type",
            "d_version",
            "d_occurred_at",
            "d_event_id",
            "d_content_hash",
            "d_is_deleted",
            "d_deleted_at",
            "d_url",
            "d_title",
            "d_published_at",
            "d_summary",
            "d_authors",
            "d_count",
            "c_entity_id",
            "c_position",
            "c_text",
            "c_url",
        )
    }
    for entity_id, (pk, change) in final.items():
        deleted = change.kind == DocumentRevision.Kind.DELETED
        citations = [] if deleted else change.citations
        # A tombstone keeps identity and version; the content is gone.
        for name, value in (
            ("d_pk", pk),
            ("d_entity_id", entity_id),
            ("d_entity_type", change.entity_type),
            ("d_version", change.source_version),
            ("d_occurred_at", change.occurred_at),
            ("d_event_id", change.event_id),
            ("d_content_hash", change.content_hash),
            ("d_is_deleted", deleted),
            ("d_deleted_at", now if deleted else None),
            ("d_url", "" if deleted else change.source_url),
            ("d_title", "" if deleted else change.title),
            ("d_published_at", None if deleted else change.published_at),
            ("d_summary", "" if deleted else change.summary),
            ("d_authors", [] if deleted else change.authors),
            ("d_count", len(citations)),
        ):
            columns[name].append(value)
        for position, citation in enumerate(citations):
            columns["c_entity_id"].append(entity_id)
            columns["c_position"].append(position)
            columns["c_text"].append(citation["text"])
            columns["c_url"].append(citation["reference_url"])
    values: dict[str, Any] = {
        "now": now,
        **columns,
        "r_entity_id": [change.entity_id for _, change in revisions],
        "r_inbox_event_id": [inbox_event_id for inbox_event_id, _ in revisions],
        "r_event_id": [change.event_id for _, change in revisions],
        "r_kind": [change.kind for _, change in revisions],
        "r_version": [change.source_version for _, change in revisions],
        "r_occurred_at": [change.occurred_at for _, change in revisions],
        "r_content_hash": [change.content_hash for _, change in revisions],
        "r_snapshot": [change.snapshot() for _, change in revisions],
    }
    # Each a single JSON array (``_jsonb_array``), through the fields' own encoding.
    values["d_authors"] = _AUTHORS.get_db_prep_save(values["d_authors"], connection)
    values["r_snapshot"] = _SNAPSHOT.get_db_prep_save(values["r_snapshot"], connection)
    expected = sum(1 for pk, _ in final.values() if pk is None)
    [(created,)] = set_statement_execute(statements.DOCUMENTS_APPLY_SQL, values)
    if created != expected:
        raise DocumentCreatedMeanwhile(
            f"{expected - created} of the batch's new documents were created by another "
            "transaction meanwhile"
        )
    return results
