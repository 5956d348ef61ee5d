"""A column added to ``InboxEvent`` is the model and its migration, nothing else: the inbox's
hand-written statements (``webhooks/statements.py``) build their column lists from the
model's ``_meta``. Shown by adding a column to the model and to its table, as a migration
would, and taking a delivery through ingest and processing with nothing else changed."""

from __future__ import annotations

import pytest
from django.db import connection, models
from django.test.utils import CaptureQueriesContext

from audit.chain import INBOX_SEALED_FIELDS
from audit.ledgers import LEDGERS
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import RESEARCH_SOURCE, signed_post
from webhooks import statements
from webhooks.models import InboxEvent
from webhooks.processing import inbox_events_process

pytestmark = pytest.mark.django_db

_CACHED = (
    statements.inbox_new_row_fields,
    statements.inbox_record_sql,
    statements.inbox_insert_sql,
    statements.key_count_sql,
    statements._bound_defaults,
    statements.inbox_adapted_fields,
)


def _caches_clear() -> None:
    for function in _CACHED:
        function.cache_clear()


@pytest.fixture
def added_column(source):
    """``triage_note``, a column with a default, on the model and on its table (in the
    test's transaction: PostgreSQL rolls the DDL back with it)."""
    field = models.CharField(max_length=32, default="untriaged")
    field.contribute_to_class(InboxEvent, "triage_note")
    InboxEvent._meta._expire_cache()
    _caches_clear()
    with connection.schema_editor(atomic=True) as editor:
        editor.add_field(InboxEvent, field)
    try:
        yield field
    finally:
        InboxEvent._meta.local_fields.remove(field)
        delattr(InboxEvent, "triage_note")
        InboxEvent._meta._expire_cache()
        _caches_clear()


def test_a_column_added_to_the_model_needs_no_edit_of_the_statements(
    http, added_column
):
    body = research_event(event_id="evt-added-column")
    assert signed_post(http, RESEARCH_SOURCE, body).status_code == 202

    row = InboxEvent.objects.get(event_id="evt-added-column")
    # Ingest's upsert wrote the new column's default with the row.
    assert row.triage_note == "untriaged"
    # Processing claims and closes the row as a set, its new column deferred.
    [outcome] = inbox_events_process(ids=[row.pk], worker="w")
    assert outcome.status == "processed"
    assert InboxEvent.objects.get(pk=row.pk).triage_note == "untriaged"


def test_ingest_writes_every_column_but_those_the_database_fills(source, http):
    """Of the model's columns, the statement that records a delivery leaves out only those
    the database fills (``db_default``: the log ticket, the dead-letter cause, the
    traceparent while tracing is off) and the nullable ones with no default, NULL until
    processing sets them. The id is written: the ledger key's, drawn in the same
    statement."""
    table = connection.ops.quote_name(InboxEvent._meta.db_table)
    with CaptureQueriesContext(connection) as queries:
        body = research_event(event_id="evt-columns")
        assert signed_post(http, RESEARCH_SOURCE, body).status_code == 202
    [insert] = [
        q["sql"] for q in queries.captured_queries if f"INSERT INTO {table}" in q["sql"]
    ]
    listed = insert.split(f"INSERT INTO {table} (", 1)[1].split(")", 1)[0]
    written = {name.strip().strip('"') for name in listed.split(",")}
    left_out = {
        field.column
        for field in InboxEvent._meta.concrete_fields
        if field.column not in written
    }
    assert left_out == {
        "log_ticket",
        "dead_letter_cause",
        "traceparent",
        "body_purged_at",
        "processed_at",
        "next_attempt_at",
        "lease_expires_at",
        "dispatched_at",
        "held_at",
    }
    for name in left_out:
        field = InboxEvent._meta.get_field(name)
        assert field.db_default is not models.NOT_PROVIDED or field.null


def test_the_sealed_and_ledger_fields_stay_as_old_rows_were_sealed():
    """What an inbox row's digest and its log leaf cover is a format: rows sealed before a
    column existed must still verify, so a new column never enters them by itself (adding
    one to the seal is a new seal version). Each names a field of the model."""
    names = {f.name for f in InboxEvent._meta.concrete_fields} | {"pk"}
    names |= {f.attname for f in InboxEvent._meta.concrete_fields}
    assert set(INBOX_SEALED_FIELDS) <= names
    assert set(LEDGERS["inbox_event"].fields.values()) <= names
