"""No table of the product carries an index that another of its indexes already gives: a
plain index whose columns (and operator classes) lead another index of the same table is
never the only way to a row, and every row written pays for its entry (docs/scaling.md,
"Indexes a table does not need").

Read from the migrated PostgreSQL schema, so that an index a field adds by default (a foreign
key's, a slug's) is seen as the database has it. Tables Django creates for a many-to-many
field without a model of its own keep Django's indexes: the product does not own them."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings
from django.db import connection

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="read from PostgreSQL's catalog"
    ),
]

# Each plain index (no condition, no expression, not unique) whose key columns and their
# operator classes are the leading ones of another index of the same table. A partition's
# index is its partitioned index's copy: only the partitioned one is named.
REDUNDANT_SQL = """
SELECT t.relname, ia.relname, ib.relname
FROM pg_index a
JOIN pg_index b ON b.indrelid = a.indrelid AND b.indexrelid <> a.indexrelid
JOIN pg_class ia ON ia.oid = a.indexrelid
JOIN pg_class ib ON ib.oid = b.indexrelid
JOIN pg_class t ON t.oid = a.indrelid
WHERE t.relname = ANY(%s)
  AND ia.relam = ib.relam
  AND NOT a.indisunique AND a.indpred IS NULL AND a.indexprs IS NULL
  AND b.indpred IS NULL AND b.indexprs IS NULL
  AND a.indnkeyatts <= b.indnkeyatts
  AND (a.indkey::int2[])[0:a.indnkeyatts - 1] = (b.indkey::int2[])[0:a.indnkeyatts - 1]
  AND (a.indclass::oid[])[0:a.indnkeyatts - 1] = (b.indclass::oid[])[0:a.indnkeyatts - 1]
ORDER BY 1, 2
"""


def _product_tables() -> list[str]:
    """The tables of the models of the apps that live in the repository."""
    root = Path(settings.BASE_DIR)
    return [
        model._meta.db_table
        for app in apps.get_app_configs()
        if Path(app.path).is_relative_to(root)
        and "site-packages" not in Path(app.path).parts
        for model in app.get_models()
        if model._meta.managed
    ]


def _redundant(tables: list[str]) -> list[tuple[str, str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(REDUNDANT_SQL, [tables])
        return cursor.fetchall()


def test_no_table_of_the_product_has_an_index_another_index_gives():
    tables = _product_tables()
    assert "webhooks_inboxattempt" in tables and "research_citation" in tables
    assert _redundant(tables) == []


def test_the_check_sees_an_index_that_leads_another():
    # The control: an index on the attempts' event id, led by the (event, number) index,
    # is found, on the partitioned table as on a plain one.
    with connection.cursor() as cursor:
        cursor.execute(
            'CREATE INDEX "tests_attempt_event_only" ON "webhooks_inboxattempt" ("event_id")'
        )
        cursor.execute(
            'CREATE INDEX "tests_citation_document_only" '
            'ON "research_citation" ("document_id")'
        )
    assert _redundant(["webhooks_inboxattempt", "research_citation"]) == [
        (
            "research_citation",
            "tests_citation_document_only",
            "research_citation_position_uniq",
        ),
        (
            "webhooks_inboxattempt",
            "tests_attempt_event_only",
            "webhooks_attempt_event_idx",
        ),
    ]


def _indexes_on(table: str, column: str) -> list[str]:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return sorted(
        name
        for name, found in constraints.items()
        if found["index"] and found["columns"] == [column] and not found["unique"]
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.migrations
def test_the_field_indexes_come_back_when_the_migrations_are_reversed():
    from django.db.migrations.executor import MigrationExecutor

    def migrate(targets):
        executor = MigrationExecutor(connection)
        executor.migrate(targets)

    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        migrate([("research", "0003_revision_event_without_constraint")])
        migrate([("webhooks", "0035_inbox_source_last_index_drop")])
        # The partitioned attempts' index, with a copy in each partition.
        [index] = _indexes_on("webhooks_inboxattempt", "event_id")
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_inherits WHERE inhparent = %s::regclass",
                [index],
            )
            [(copies,)] = cursor.fetchall()
        assert copies >= 1
        assert len(_indexes_on("research_citation", "document_id")) == 1
        assert (
            len(_indexes_on("webhooks_webhooksource", "slug")) == 2
        )  # and its LIKE one
        migrate(latest)
        assert _indexes_on("webhooks_inboxattempt", "event_id") == []
        assert _indexes_on("research_citation", "document_id") == []
        assert _indexes_on("webhooks_webhooksource", "slug") == []
    finally:
        migrate(latest)
