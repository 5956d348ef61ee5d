"""The inbox's ledgers enter the verifiable log, and each event records which secret verified it.

Rows inserted from now on carry the transaction that inserted them (``log_ticket``, set by
the database: ``core.models.TransactionTicket``), which the verifiable log's sealer walks to
take every row, whatever its id, without writing to it again (docs/architecture.md, "The
verifiable log"). Rows already there keep NULL and are taken by id.

``WebhookSecret.fingerprint`` names a secret without revealing it; ``InboxEvent.secret_fingerprint``
is the fingerprint of the secret that verified the event ("" for events stored before)."""

import hashlib

from django.db import migrations, models

import core.models


def fingerprints_fill(apps, schema_editor):
    secret_model = apps.get_model("webhooks", "WebhookSecret")
    for secret in secret_model.objects.filter(fingerprint=""):
        # webhooks.schemes.secret_fingerprint, written out: a migration keeps its meaning.
        digest = hashlib.sha256(
            b"webhook-secret-fingerprint\n" + secret.secret.encode()
        )
        secret.fingerprint = digest.hexdigest()[:16]
        secret.save(update_fields=["fingerprint"])


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
        ("webhooks", "0016_mismatch_repeats_counted"),
    ]

    operations = [
        *_ticket_operations("inboxevent", "webhooks_inboxevent", "webhooks_inbox"),
        *_ticket_operations(
            "inboxattempt", "webhooks_inboxattempt", "webhooks_attempt"
        ),
        *_ticket_operations(
            "fingerprintmismatch", "webhooks_fingerprintmismatch", "webhooks_mismatch"
        ),
        *_ticket_operations(
            "operatoraction", "webhooks_operatoraction", "webhooks_action"
        ),
        # In place on SQLite too, whose AddField of a column with a default rebuilds the
        # table, which cannot rebuild this one's NULLS LAST index (migration 0009).
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="inboxevent",
                    name="secret_fingerprint",
                    field=models.CharField(
                        blank=True, db_default="", default="", max_length=16
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    'ALTER TABLE "webhooks_inboxevent" ADD COLUMN "secret_fingerprint"'
                    " varchar(16) DEFAULT '' NOT NULL",
                    'ALTER TABLE "webhooks_inboxevent" DROP COLUMN "secret_fingerprint"',
                )
            ],
        ),
        migrations.AddField(
            model_name="webhooksecret",
            name="fingerprint",
            field=models.CharField(
                blank=True, default="", editable=False, max_length=16
            ),
        ),
        migrations.RunPython(fingerprints_fill, migrations.RunPython.noop),
    ]
