"""Writes: research documents change only through ``document_change_apply``, under the
ordering rule (docs/subsystems/processing.md, "Research documents")."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import OperationalError, connection
from django.utils import timezone
from psycopg.errors import LockNotAvailable

from core.db import LOCK_TIMEOUT_IN_STATEMENT, lock_timeout_value
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


def document_change_decide(*, document: LockedDocument, change: DocumentChange) -> str:
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


_DOCUMENTS = ResearchDocument._meta.db_table
_CITATIONS = Citation._meta.db_table
_REVISIONS = DocumentRevision._meta.db_table

# Locks the document's row, creating it empty (nothing applied) if it does not exist, and
# reads what the ordering rule compares: one statement. ``INSERT ... ON CONFLICT DO UPDATE``
# locks the row it finds or inserts, so two first events for one entity meet on the same row.
# Only the ordering columns come back: the content is overwritten, never read.
_DOCUMENT_LOCK_SQL = f"""
INSERT INTO {_DOCUMENTS} (
    entity_id, entity_type, current_source_version, last_occurred_at, last_event_id,
    source_url, title, source_content_hash, published_at, summary, authors, is_deleted,
    deleted_at, created_at, updated_at
) VALUES (%s, '', NULL, NULL, '', '', '', '', NULL, '', %s, FALSE, NULL, %s, %s)
ON CONFLICT (entity_id) DO UPDATE SET entity_id = EXCLUDED.entity_id
RETURNING id, current_source_version, last_occurred_at, last_event_id
"""  # noqa: S608 - table names from the models, values bound

_DOCUMENT_UPDATE_SQL = f"""
UPDATE {_DOCUMENTS} SET
    entity_type = CASE WHEN %(entity_type)s = '' THEN entity_type
                       ELSE %(entity_type)s END,
    current_source_version = %(version)s, last_occurred_at = %(occurred_at)s,
    last_event_id = %(event_id)s, source_content_hash = %(content_hash)s,
    is_deleted = %(is_deleted)s, deleted_at = %(deleted_at)s, source_url = %(url)s,
    title = %(title)s, published_at = %(published_at)s, summary = %(summary)s,
    authors = %(authors)s, updated_at = %(now)s
WHERE id = %(pk)s
"""  # noqa: S608 - table names from the models, values bound

# PostgreSQL: the whole write in one statement. The citations are replaced position by
# position (an upsert of the new ones and a delete of those past their number: the two touch
# different rows, as statements of one WITH must).
_DOCUMENT_APPLY_SQL = f"""
WITH doc AS (
    UPDATE {_DOCUMENTS} SET
        entity_type = CASE WHEN %(entity_type)s = '' THEN entity_type
                           ELSE %(entity_type)s END,
        current_source_version = %(version)s, last_occurred_at = %(occurred_at)s,
        last_event_id = %(event_id)s, source_content_hash = %(content_hash)s,
        is_deleted = %(is_deleted)s, deleted_at = %(deleted_at)s, source_url = %(url)s,
        title = %(title)s, published_at = %(published_at)s, summary = %(summary)s,
        authors = %(authors)s, updated_at = %(now)s
    WHERE id = %(pk)s
), old_citations AS (
    DELETE FROM {_CITATIONS} WHERE document_id = %(pk)s AND position >= %(count)s
), new_citations AS (
    INSERT INTO {_CITATIONS} (document_id, position, text, reference_url)
    SELECT %(pk)s, c.ord - 1, c.text, c.url
      FROM unnest(%(texts)s::text[], %(urls)s::text[]) WITH ORDINALITY AS c(text, url, ord)
    ON CONFLICT (document_id, position)
    DO UPDATE SET text = EXCLUDED.text, reference_url = EXCLUDED.reference_url
)
INSERT INTO {_REVISIONS} (
    document_id, inbox_event_id, event_id, kind, source_version, occurred_at,
    content_hash, snapshot, applied_at
) VALUES (%(pk)s, %(inbox_event_id)s, %(event_id)s, %(kind)s, %(version)s,
          %(occurred_at)s, %(content_hash)s, %(snapshot)s, %(now)s)
"""  # noqa: S608 - table names from the models, values bound

_REVISION_INSERT_SQL = f"""
INSERT INTO {_REVISIONS} (
    document_id, inbox_event_id, event_id, kind, source_version, occurred_at,
    content_hash, snapshot, applied_at
) VALUES (%(pk)s, %(inbox_event_id)s, %(event_id)s, %(kind)s, %(version)s,
          %(occurred_at)s, %(content_hash)s, %(snapshot)s, %(now)s)
"""  # noqa: S608 - table names from the models, values bound


@dataclass(frozen=True)
class LockedDocument:
    """What the ordering rule reads of a locked document."""

    pk: int
    current_source_version: int | None
    last_occurred_at: datetime | None
    last_event_id: str


def _document_lock(*, entity_id: str) -> LockedDocument:
    """The document's row, locked until the transaction ends (see ``_DOCUMENT_LOCK_SQL``).
    Waiting for the lock gives up after the session's ``lock_timeout`` (the processing batch
    sets it to ``INBOX_LOCK_TIMEOUT_MS``) with a transient error. On the embedded
    SQLite default, transactions take the database's one write lock when they begin
    (``IMMEDIATE``), so the same statement is already alone."""
    now = _datetime_field.get_db_prep_save(timezone.now(), connection)
    authors = _json_field.get_db_prep_save([], connection)
    try:
        with connection.cursor() as cursor:
            cursor.execute(_DOCUMENT_LOCK_SQL, [entity_id, authors, now, now])
            pk, version, occurred, event_id = cursor.fetchone()
    except OperationalError as exc:
        if not isinstance(exc.__cause__, LockNotAvailable):
            raise
        raise TransientProcessingError(
            f"document {entity_id!r} stayed locked by another transaction for more "
            f"than {settings.INBOX_LOCK_TIMEOUT_MS} ms (lock timeout)"
        ) from exc
    return LockedDocument(
        pk=pk,
        current_source_version=version,
        last_occurred_at=_instant_read(occurred),
        last_event_id=event_id,
    )


def _document_apply_in_steps(cursor, values: dict, citations: list, *, had_state: bool):
    """The same write in several statements, where one statement cannot hold them all (the
    embedded SQLite default)."""
    cursor.execute(_DOCUMENT_UPDATE_SQL, values)
    if had_state:  # a document created by this transaction has no citations yet
        cursor.execute(
            f"DELETE FROM {_CITATIONS} WHERE document_id = %(pk)s",  # noqa: S608
            values,
        )
    for position, citation in enumerate(citations):
        cursor.execute(
            f"INSERT INTO {_CITATIONS} (document_id, position, text, reference_url)"  # noqa: S608
            " VALUES (%s, %s, %s, %s)",
            [values["pk"], position, citation["text"], citation["reference_url"]],
        )
    cursor.execute(_REVISION_INSERT_SQL, values)


_datetime_field = ResearchDocument._meta.get_field("updated_at")
_json_field = ResearchDocument._meta.get_field("authors")
_snapshot_field = DocumentRevision._meta.get_field("snapshot")


def _instant_read(value) -> datetime | None:
    """A stored instant as PostgreSQL (aware) or SQLite (naive UTC, or text) hands it back."""
    if value is None or (isinstance(value, datetime) and timezone.is_aware(value)):
        return value
    return _datetime_field.to_python(value)


def document_change_apply(
    *, inbox_event_id: int, change: DocumentChange
) -> tuple[str, LockedDocument, bool]:
    """Applies ``change`` to its document if the ordering rule lets it, with its revision;
    returns the decision, the document as it was, and whether it applied.

    Must run inside the transaction that also records the event's new status: the document
    row stays locked until that commits, so two workers applying versions 7 and 8 at once are
    serialised and the state can never end at 7. On PostgreSQL the document, its citations
    and the revision are written by one statement: this runs once per event, and the ORM's
    query building and a round trip per table would cost more than the writes."""
    document = _document_lock(entity_id=change.entity_id)
    decision = document_change_decide(document=document, change=change)
    if decision != Decision.APPLY:
        return decision, document, False

    now = timezone.now()
    deleted = change.kind == DocumentRevision.Kind.DELETED
    citations = [] if deleted else change.citations
    instant = _datetime_field.get_db_prep_save
    values = {
        "pk": document.pk,
        "inbox_event_id": inbox_event_id,
        "entity_type": change.entity_type,
        "version": change.source_version,
        "occurred_at": instant(change.occurred_at, connection),
        "event_id": change.event_id,
        "content_hash": change.content_hash,
        "kind": change.kind,
        # A tombstone keeps identity and version; the content is gone.
        "is_deleted": deleted,
        "deleted_at": instant(now if deleted else None, connection),
        "url": "" if deleted else change.source_url,
        "title": "" if deleted else change.title,
        "published_at": instant(None if deleted else change.published_at, connection),
        "summary": "" if deleted else change.summary,
        "authors": _json_field.get_db_prep_save(
            [] if deleted else change.authors, connection
        ),
        "snapshot": _snapshot_field.get_db_prep_save(change.snapshot(), connection),
        "now": instant(now, connection),
    }
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            values["count"] = len(citations)
            values["texts"] = [citation["text"] for citation in citations]
            values["urls"] = [citation["reference_url"] for citation in citations]
            cursor.execute(_DOCUMENT_APPLY_SQL, values)
        else:
            _document_apply_in_steps(
                cursor, values, citations, had_state=bool(document.last_event_id)
            )
    return decision, document, True


# --- a batch of changes as a set (PostgreSQL) -----------------------------------------------

# Locks every existing document the batch touches in one statement, in entity_id order: two
# batches (or a batch and a single event) never wait on each other in a cycle. A lock writes
# no row version; a document the batch creates is inserted once, with its final state. The
# wait gives up after INBOX_LOCK_TIMEOUT_MS: the transaction's lock_timeout, set by the same
# statement (an InitPlan, evaluated once before any row is locked), so that a batch sends no
# statement of its own to set and reset it.
_DOCUMENTS_LOCK_SQL = f"""
SELECT id, entity_id, current_source_version, last_occurred_at, last_event_id
  FROM {_DOCUMENTS}
 WHERE entity_id = ANY(%(entity_ids)s::text[])
   AND {LOCK_TIMEOUT_IN_STATEMENT}
 ORDER BY entity_id
   FOR UPDATE
"""  # noqa: S608 - table names from the models, values bound

# The batch's whole write in one statement: the documents it creates inserted with their
# final state (in entity_id order), the others' final states updated, their citations
# replaced position by position (an upsert of the final ones and a delete of those past their
# number: different rows, as statements of one WITH must touch), and one revision per applied
# event in the order they applied. It returns how many documents it created: fewer than
# asked means another transaction created one meanwhile, and the caller rolls back.


def _jsonb_array(name: str) -> str:
    """A jsonb[] built in the statement from one JSON array bound as ``name``, in its
    order: psycopg writes a bound jsonb[] as an array literal, escaping each element's quotes
    one regular-expression match at a time, which cost a worker more CPU than the rest of
    the batch (docs/bench-log/2026-12-01.md, "Processing")."""
    return (
        f"ARRAY(SELECT e.value FROM jsonb_array_elements(%({name})s::jsonb) "  # noqa: S608 - a placeholder name
        "WITH ORDINALITY AS e(value, n) ORDER BY e.n)"
    )


_DOCUMENTS_APPLY_SQL = f"""
WITH v AS (
    SELECT *
      FROM unnest(%(d_pk)s::bigint[], %(d_entity_id)s::text[], %(d_entity_type)s::text[],
                  %(d_version)s::bigint[], %(d_occurred_at)s::timestamptz[],
                  %(d_event_id)s::text[], %(d_content_hash)s::text[],
                  %(d_is_deleted)s::boolean[], %(d_deleted_at)s::timestamptz[],
                  %(d_url)s::text[], %(d_title)s::text[], %(d_published_at)s::timestamptz[],
                  %(d_summary)s::text[], {_jsonb_array("d_authors")}, %(d_count)s::int[])
           AS v(pk, entity_id, entity_type, version, occurred_at, event_id, content_hash,
                is_deleted, deleted_at, url, title, published_at, summary, authors, count)
), created AS (
    INSERT INTO {_DOCUMENTS} (
        entity_id, entity_type, current_source_version, last_occurred_at, last_event_id,
        source_url, title, source_content_hash, published_at, summary, authors, is_deleted,
        deleted_at, created_at, updated_at
    )
    SELECT v.entity_id, v.entity_type, v.version, v.occurred_at, v.event_id, v.url,
           v.title, v.content_hash, v.published_at, v.summary, v.authors, v.is_deleted,
           v.deleted_at, %(now)s, %(now)s
      FROM v WHERE v.pk IS NULL
     ORDER BY v.entity_id
    ON CONFLICT (entity_id) DO NOTHING
    RETURNING id, entity_id
), updated AS (
    UPDATE {_DOCUMENTS} AS d SET
        entity_type = CASE WHEN v.entity_type = '' THEN d.entity_type
                           ELSE v.entity_type END,
        current_source_version = v.version, last_occurred_at = v.occurred_at,
        last_event_id = v.event_id, source_content_hash = v.content_hash,
        is_deleted = v.is_deleted, deleted_at = v.deleted_at, source_url = v.url,
        title = v.title, published_at = v.published_at, summary = v.summary,
        authors = v.authors, updated_at = %(now)s
      FROM v
     WHERE v.pk IS NOT NULL AND d.id = v.pk
), ids AS (
    SELECT id, entity_id FROM created
    UNION ALL
    SELECT pk, entity_id FROM v WHERE pk IS NOT NULL
), old_citations AS (
    DELETE FROM {_CITATIONS} AS c
     USING v
     WHERE v.pk IS NOT NULL AND c.document_id = v.pk AND c.position >= v.count
), new_citations AS (
    INSERT INTO {_CITATIONS} (document_id, position, text, reference_url)
    SELECT ids.id, c.position, c.text, c.url
      FROM unnest(%(c_entity_id)s::text[], %(c_position)s::int[], %(c_text)s::text[],
                  %(c_url)s::text[]) AS c(entity_id, position, text, url)
      JOIN ids ON ids.entity_id = c.entity_id
    ON CONFLICT (document_id, position)
    DO UPDATE SET text = EXCLUDED.text, reference_url = EXCLUDED.reference_url
), revisions AS (
    INSERT INTO {_REVISIONS} (
        document_id, inbox_event_id, event_id, kind, source_version, occurred_at,
        content_hash, snapshot, applied_at
    )
    SELECT ids.id, r.inbox_event_id, r.event_id, r.kind, r.version, r.occurred_at,
           r.content_hash, r.snapshot, %(now)s
      FROM unnest(%(r_entity_id)s::text[], %(r_inbox_event_id)s::bigint[],
                  %(r_event_id)s::text[], %(r_kind)s::text[], %(r_version)s::bigint[],
                  %(r_occurred_at)s::timestamptz[], %(r_content_hash)s::text[],
                  {_jsonb_array("r_snapshot")}) WITH ORDINALITY
           AS r(entity_id, inbox_event_id, event_id, kind, version, occurred_at,
                content_hash, snapshot, ord)
      JOIN ids ON ids.entity_id = r.entity_id
     ORDER BY r.ord
)
SELECT count(*) FROM created
"""  # noqa: S608 - table names from the models, values bound

# The same statement with its arrays bound in binary, where the server binds parameters
# (``config.settings._helpers.database_binding_apply``): psycopg writes a text array element by
# element in Python, quoting and escaping each, about ten times the cost of the binary form.
# A client-side cursor (server-side binding off) cannot bind binary parameters.
_DOCUMENTS_APPLY_SQL_BINARY = re.sub(
    r"%\((\w+)\)s::(\w+)\[\]", r"%(\1)b::\2[]", _DOCUMENTS_APPLY_SQL
)


def _documents_apply_sql() -> str:
    if connection.settings_dict.get("OPTIONS", {}).get("server_side_binding") is True:
        return _DOCUMENTS_APPLY_SQL_BINARY
    return _DOCUMENTS_APPLY_SQL


# What the ordering rule reads of a document that does not exist yet: nothing applied.
_NOTHING_APPLIED = LockedDocument(
    pk=0, current_source_version=None, last_occurred_at=None, last_event_id=""
)


class DocumentCreatedMeanwhile(TransientProcessingError):
    """A document the batch decided as new was created by another transaction meanwhile:
    the batch's decisions no longer hold (its caller rolls it back)."""


def _documents_lock(*, entity_ids: list[str]) -> dict[str, LockedDocument]:
    """The existing documents of ``entity_ids``, locked until the transaction ends, in one
    statement (see ``_DOCUMENTS_LOCK_SQL``); a wait past ``INBOX_LOCK_TIMEOUT_MS`` is a
    transient error, as for one document."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                _DOCUMENTS_LOCK_SQL,
                {
                    "entity_ids": sorted(entity_ids),
                    "lock_timeout": lock_timeout_value(settings.INBOX_LOCK_TIMEOUT_MS),
                },
            )
            rows = cursor.fetchall()
    except OperationalError as exc:
        if not isinstance(exc.__cause__, LockNotAvailable):
            raise
        raise TransientProcessingError(
            f"{len(entity_ids)} documents stayed locked by another transaction for more "
            f"than {settings.INBOX_LOCK_TIMEOUT_MS} ms (lock timeout)"
        ) from exc
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
) -> list[tuple[str, LockedDocument, bool]]:
    """Applies a batch of changes, given as ``(inbox event id, change)`` in the order the
    events must apply, as ``document_change_apply`` would one after the other: the same
    ordering rule (``document_change_decide``) decides each against the state the earlier
    ones left. Returns, for each, the decision, the document as it was then, and whether it
    applied.

    PostgreSQL only, inside the transaction that also closes the events: one statement locks
    every existing document touched (in entity_id order, see ``_DOCUMENTS_LOCK_SQL``), one
    writes the documents' final states, their citations and a revision per applied change.
    Each document changed gets one row version per batch, however many of its events apply.
    A value the database refuses fails the whole statement, and so does a document another
    transaction created meanwhile (``DocumentCreatedMeanwhile``): the caller rolls the batch
    back."""
    if not changes:
        return []
    state = _documents_lock(entity_ids=list({c.entity_id for _, c in changes}))
    now = timezone.now()
    results: list[tuple[str, LockedDocument, bool]] = []
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
    values["d_authors"] = _json_field.get_db_prep_save(values["d_authors"], connection)
    values["r_snapshot"] = _snapshot_field.get_db_prep_save(
        values["r_snapshot"], connection
    )
    expected = sum(1 for pk, _ in final.values() if pk is None)
    with connection.cursor() as cursor:
        cursor.execute(_documents_apply_sql(), values)
        (created,) = cursor.fetchone()
    if created != expected:
        raise DocumentCreatedMeanwhile(
            f"{expected - created} of the batch's new documents were created by another "
            "transaction meanwhile"
        )
    return results
