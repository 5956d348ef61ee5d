"""Document revisions enter the verifiable log.

Rows inserted from now on carry the transaction that inserted them (``log_ticket``, set by
the database: ``core.models.TransactionTicket``), which the verifiable log's sealer walks to
take every row, whatever its id, without writing to it again (docs/architecture.md, "The
verifiable log"). Rows already there keep NULL and are taken by id."""

from django.db import migrations, models

import core.models


def _column_add(table: str):
    def add(apps, schema_editor):
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

    def drop(apps, schema_editor):
        schema_editor.execute(f'ALTER TABLE "{table}" DROP COLUMN "log_ticket"')

    return add, drop


def _ticket_operations(model_name: str, table: str, prefix: str) -> list:
    """The column with its database default, added in place (on SQLite too, whose other
    ways of adding a column with an expression default rebuild the table), then the sealer's
    two indexes."""
    add, drop = _column_add(table)
    return [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name=model_name,
                    name="log_ticket",
                    field=models.BigIntegerField(
                        blank=True,
                        db_default=core.models.TransactionTicket(),
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


class Migration(migrations.Migration):
    dependencies = [
        ("research", "0001_initial"),
    ]

    operations = [
        *_ticket_operations(
            "documentrevision", "research_documentrevision", "research_revision"
        ),
    ]
