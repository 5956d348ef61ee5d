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
        ("webhooks", "0013_source_hold"),
    ]

    operations = [
        *_ticket_operations("inboxevent", "webhooks_inbox"),
        *_ticket_operations("inboxattempt", "webhooks_attempt"),
        *_ticket_operations("fingerprintmismatch", "webhooks_mismatch"),
        *_ticket_operations("operatoraction", "webhooks_action"),
        migrations.AddField(
            model_name="inboxevent",
            name="secret_fingerprint",
            field=models.CharField(
                blank=True, db_default="", default="", max_length=16
            ),
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
