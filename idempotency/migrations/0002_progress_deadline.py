"""Stuck keys are those past their operation's own deadline (``progress_deadline``), no longer
those older than a fixed age. Records still ``processing`` get the deadline a new one would
have had for its job to be picked up, counted from their creation: a key that was stuck by the
old rule is stuck by the new one until its operation moves on."""

from datetime import timedelta

from django.conf import settings
from django.db import migrations, models
from django.db.models import F


def deadlines_backfill(apps, schema_editor):
    record = apps.get_model("idempotency", "IdempotencyRecord")
    grace = timedelta(
        seconds=settings.DEPLOY_REDISPATCH_AFTER_SECONDS
        + settings.RELAY_SWEEP_INTERVAL_SECONDS
    )
    record.objects.using(schema_editor.connection.alias).filter(
        status="processing", progress_deadline__isnull=True
    ).update(progress_deadline=F("created_at") + grace)


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_initial"),
        ("idempotency", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="idempotencyrecord",
            name="progress_deadline",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="idempotencyrecord",
            index=models.Index(
                condition=models.Q(("status", "processing")),
                fields=["progress_deadline"],
                name="idempotency_stuck_idx",
            ),
        ),
        migrations.RunPython(deadlines_backfill, migrations.RunPython.noop),
    ]
