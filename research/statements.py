"""The research documents' SQL written by hand, in one place beside their models
(docs/subsystems/processing.md, "Research documents"): the two statements that apply a set of
changes on PostgreSQL, run through ``core.db.set_statement_execute`` (arrays bound in binary,
their own transaction's lock timeout). A single change applied on its own (the embedded
SQLite default, an event run on its own after its set rolled back) goes through the ORM
(``research.services.document_change_apply``)."""

from __future__ import annotations

from core.db import LOCK_TIMEOUT_IN_STATEMENT

from .models import Citation, DocumentRevision, ResearchDocument

_DOCUMENTS = ResearchDocument._meta.db_table
_CITATIONS = Citation._meta.db_table
_REVISIONS = DocumentRevision._meta.db_table

# Locks every existing document the batch touches in one statement, in entity_id order: two
# batches (or a batch and a single event) never wait on each other in a cycle. A lock writes
# no row version; a document the batch creates is inserted once, with its final state. The
# wait gives up after INBOX_LOCK_TIMEOUT_MS: the transaction's lock_timeout, set by the same
# statement (an InitPlan, evaluated once before any row is locked), so that a batch sends no
# statement of its own to set and reset it.
DOCUMENTS_LOCK_SQL = f"""
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


DOCUMENTS_APPLY_SQL = f"""
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
