"""The migration operations that give a ledger its ``log_ticket`` column
(``core.models.log_ticket_field``; docs/subsystems/log.md, "The verifiable log"), shared by the
migrations of every app whose rows the log takes in. What they do must never change: a
migration already applied ran them as they were."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from core.models import TransactionTicket


def _column_add(table: str) -> tuple[Any, Any]:
    def add(apps: Any, schema_editor: Any) -> None:
        # No table rewrite: existing rows keep NULL. SQLite writes NULL by default (its
        # writers run one at a time: the sealer takes its rows by id).
        schema_editor.execute(
            f'ALTER TABLE "{table}" ADD COLUMN "log_ticket" bigint NULL'
        )
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(
                f'ALTER TABLE "{table}" ALTER COLUMN "log_ticket" SET DEFAULT '
                "(pg_current_xact_id()::text::bigint)"
            )

    def drop(apps: Any, schema_editor: Any) -> None:
        schema_editor.execute(f'ALTER TABLE "{table}" DROP COLUMN "log_ticket"')

    return add, drop


def log_ticket_operations(model_name: str, table: str, prefix: str) -> list[Any]:
    """The column with its database default, added in place (on SQLite too, whose other
    ways of adding a column with an expression default rebuild the table), then the sealer's
    two indexes (``core.models.log_ticket_indexes``, named from ``prefix``). Rows already
    there keep NULL and are taken by id."""
    add, drop = _column_add(table)
    return [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name=model_name,
                    name="log_ticket",
                    field=models.BigIntegerField(
                        blank=True,
                        db_default=TransactionTicket(),
                        editable=False,
                        help_text=(
                            "The transaction that inserted the row (the log's sealer "
                            "reads it)."
                        ),
                        null=True,
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(add, drop)],
        ),
        migrations.AddIndex(
            model_name=model_name,
            index=models.Index(
                condition=models.Q(("log_ticket__isnull", False)),
                fields=["log_ticket", "id"],
                name=f"{prefix}_logt_idx",
            ),
        ),
        migrations.AddIndex(
            model_name=model_name,
            index=models.Index(
                condition=models.Q(("log_ticket__isnull", True)),
                fields=["id"],
                name=f"{prefix}_lognull_idx",
            ),
        ),
    ]
