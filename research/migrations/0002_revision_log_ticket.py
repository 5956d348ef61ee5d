"""Document revisions enter the verifiable log.

Rows inserted from now on carry the transaction that inserted them (``log_ticket``, set by
the database: ``core.models.TransactionTicket``), which the verifiable log's sealer walks to
take every row, whatever its id, without writing to it again (docs/architecture.md, "The
verifiable log"). Rows already there keep NULL and are taken by id."""

from django.db import migrations, models

import core.models


def _ticket_operations(model_name: str, prefix: str) -> list:
    """The column, then its database default (``ALTER COLUMN ... SET DEFAULT``: existing rows
    keep NULL, the table is not rewritten), then the sealer's two indexes."""
    return [
        migrations.AddField(
            model_name=model_name,
            name="log_ticket",
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AlterField(
            model_name=model_name,
            name="log_ticket",
            field=models.BigIntegerField(
                blank=True,
                db_default=core.models.TransactionTicket(),
                editable=False,
                help_text="The transaction that inserted the row (the log's sealer reads it).",
                null=True,
            ),
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
        *_ticket_operations("documentrevision", "research_revision"),
    ]
