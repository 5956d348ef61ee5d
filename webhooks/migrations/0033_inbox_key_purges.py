"""The runs of the deduplication ledger's purge (docs/subsystems/inbox.md, "The
deduplication ledger"): one row per run that deleted keys, naming where the next one
starts."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0032_inbox_key_final_status"),
    ]

    operations = [
        migrations.CreateModel(
            name="InboxKeyPurge",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True,
                        primary_key=True,
                        serialize=False,
                        verbose_name="ID",
                    ),
                ),
                ("purged_at", models.DateTimeField()),
                ("received_before", models.DateTimeField()),
                ("deleted", models.PositiveBigIntegerField()),
                ("batches", models.PositiveIntegerField()),
                ("from_key_id", models.BigIntegerField()),
                ("resume_from", models.BigIntegerField()),
            ],
        ),
    ]
