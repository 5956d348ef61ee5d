"""Rows dead-lettered before causes were recorded get the cause ``unrecorded``, so that every
dead-lettered row names one and no code has to handle its absence (docs/architecture.md,
"Compatibility paths"). Through ``webhooks_inbox_status_idx``: only dead-lettered rows are
read."""

from django.db import migrations, models

CAUSES = [
    ("rejected", "the event's data was rejected"),
    ("exhausted", "processing failed on every attempt"),
    ("unrecorded", "the cause was not recorded"),
]


def causes_name(apps, schema_editor):
    inbox = apps.get_model("webhooks", "InboxEvent")
    inbox.objects.filter(
        processing_status="dead_lettered", dead_letter_cause=""
    ).update(dead_letter_cause="unrecorded")


def causes_unname(apps, schema_editor):
    inbox = apps.get_model("webhooks", "InboxEvent")
    inbox.objects.filter(
        processing_status="dead_lettered", dead_letter_cause="unrecorded"
    ).update(dead_letter_cause="")


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0013_source_hold"),
    ]

    operations = [
        migrations.AlterField(
            model_name="inboxevent",
            name="dead_letter_cause",
            field=models.CharField(
                blank=True, choices=CAUSES, db_default="", default="", max_length=16
            ),
        ),
        migrations.RunPython(causes_name, causes_unname),
    ]
