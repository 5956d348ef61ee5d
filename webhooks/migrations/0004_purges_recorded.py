"""Purges become operator actions (``purge_bodies``), which ``audit_verify`` holds every missing
body against. Bodies purged before they were recorded get their record here: one action per
purge batch (rows stamped with the same ``body_purged_at``), naming its rows, written by the
upgrade rather than by an operator."""

from datetime import UTC

from django.db import migrations, models

IDS_PER_ACTION = 1000


def _stamp(value):
    return value.astimezone(UTC).isoformat()


def purges_before_the_upgrade_record(apps, schema_editor):
    InboxEvent = apps.get_model("webhooks", "InboxEvent")
    OperatorAction = apps.get_model("webhooks", "OperatorAction")
    # One pass over the purged rows, grouped by stamp in Python (body_purged_at has no index).
    rows = (
        InboxEvent.objects.filter(body_purged_at__isnull=False)
        .order_by("body_purged_at", "pk")
        .values_list("body_purged_at", "pk", "received_at")
        .iterator(chunk_size=5000)
    )
    pending = []

    def flush():
        if pending:
            stamp = pending[0][0]
            OperatorAction.objects.create(
                action="purge_bodies",
                actor_name="system:upgrade",
                reason="bodies purged before purges were recorded",
                event_ids=[pk for _, pk, _ in pending],
                event_count=len(pending),
                details={
                    "purged_at": _stamp(stamp),
                    "latest_received_at": _stamp(
                        max(received for _, _, received in pending)
                    ),
                    "recorded_at_upgrade": True,
                },
            )
            pending.clear()

    for row in rows:
        if pending and (row[0] != pending[0][0] or len(pending) >= IDS_PER_ACTION):
            flush()
        pending.append(row)
    flush()


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0003_registries_and_admin_names"),
    ]

    operations = [
        migrations.AlterField(
            model_name="operatoraction",
            name="action",
            field=models.CharField(
                choices=[
                    ("replay", "Replay"),
                    ("bulk_replay", "Bulk Replay"),
                    ("mark_investigated", "Mark Investigated"),
                    ("rotate_secret", "Rotate Secret"),
                    ("purge_bodies", "Purge Bodies"),
                ],
                max_length=32,
            ),
        ),
        migrations.RunPython(
            purges_before_the_upgrade_record, migrations.RunPython.noop
        ),
    ]
