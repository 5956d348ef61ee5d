"""The migration operation that takes a field's own index away when another index of its table
leads with the same column (docs/scaling.md, "Indexes a table does not need"), shared by the
apps' migrations. What it does must never change: a migration already applied ran it as it
was."""

from __future__ import annotations

from typing import Any

from django.db import migrations, transaction

# How long the drop of a partitioned table's index waits for the table's lock (PostgreSQL
# cannot drop one concurrently); past it the migration fails and can be run again.
PARTITIONED_LOCK_TIMEOUT = "5s"


def _field_indexes(schema_editor: Any, model: Any, column: str) -> list[str]:
    """The indexes the field made for itself (``db_index``): plain ones on its column alone,
    on PostgreSQL its ``varchar_pattern_ops`` copy included; not the model's declared
    indexes or constraints."""
    declared = {index.name for index in model._meta.indexes} | {
        constraint.name for constraint in model._meta.constraints
    }
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(
            cursor, model._meta.db_table
        )
    return sorted(
        name
        for name, found in constraints.items()
        if found["index"]
        and found["columns"] == [column]
        and not found["unique"]
        and not found["primary_key"]
        and name not in declared
    )


def _is_partitioned(schema_editor: Any, name: str) -> bool:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE relname = %s", [name])
        row = cursor.fetchone()
    return row is not None and row[0] == "I"


class FieldIndexDrop(migrations.AlterField):
    """``AlterField`` to ``db_index=False``, whose database side drops the field's own index
    without holding its table: concurrently on PostgreSQL (the migration is not atomic), a
    partitioned table's index under a bounded wait for its lock, and on SQLite without the
    table's rebuild that ``AlterField`` would do. Reversed, Django's ``AlterField`` makes the
    index again."""

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        column = model._meta.get_field(self.name).column
        postgresql = schema_editor.connection.vendor == "postgresql"
        for name in _field_indexes(schema_editor, model, column):
            if not postgresql:
                schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')
            elif _is_partitioned(schema_editor, name):
                with transaction.atomic(using=schema_editor.connection.alias):
                    schema_editor.execute(
                        f"SET LOCAL lock_timeout = '{PARTITIONED_LOCK_TIMEOUT}'"
                    )
                    schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')
            else:
                schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        # ``AlterField`` reverses through its own ``database_forwards``, the states swapped:
        # Django's, which makes the index again.
        super().database_forwards(app_label, schema_editor, from_state, to_state)

    def describe(self) -> str:
        return f"Drop the own index of field {self.name} on {self.model_name}"
