"""The inbox's ledgers enter the verifiable log, and each event records which secret verified it.

Rows inserted from now on carry the transaction that inserted them (``log_ticket``, set by
the database: ``core.models.TransactionTicket``), which the verifiable log's sealer walks to
take every row, whatever its id, without writing to it again (docs/subsystems/log.md, "The
verifiable log"). Rows already there keep NULL and are taken by id.

``WebhookSecret.fingerprint`` names a secret without revealing it; ``InboxEvent.secret_fingerprint``
is the fingerprint of the secret that verified the event ("" for events stored before)."""

import hashlib

from django.db import migrations, models

from core.log_ticket_migrations import log_ticket_operations


def fingerprints_fill(apps, schema_editor):
    secret_model = apps.get_model("webhooks", "WebhookSecret")
    for secret in secret_model.objects.filter(fingerprint=""):
        # webhooks.schemes.secret_fingerprint, written out: a migration keeps its meaning.
        digest = hashlib.sha256(
            b"webhook-secret-fingerprint\n" + secret.secret.encode()
        )
        secret.fingerprint = digest.hexdigest()[:16]
        secret.save(update_fields=["fingerprint"])


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0016_mismatch_repeats_counted"),
    ]

    operations = [
        *log_ticket_operations("inboxevent", "webhooks_inboxevent", "webhooks_inbox"),
        *log_ticket_operations(
            "inboxattempt", "webhooks_inboxattempt", "webhooks_attempt"
        ),
        *log_ticket_operations(
            "fingerprintmismatch", "webhooks_fingerprintmismatch", "webhooks_mismatch"
        ),
        *log_ticket_operations(
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
