"""An attempt carries its event's received time, and names its event by id without a foreign
key constraint (docs/scaling.md, "Time partitions of the inbox"): what storing, and
dropping, an event and its attempts together by that time needs.

The column is added with a constant for the attempts already stored (1970-01-01 UTC), which
PostgreSQL (11 and later) records without rewriting the table, whatever its size; from then
on every attempt is written with its event's time (``statements.BATCH_CLAIM_SQL``,
``processing``)."""

from datetime import UTC, datetime

import django.db.models.deletion
from django.db import migrations, models

BEFORE = datetime(1970, 1, 1, tzinfo=UTC)


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0029_inbox_key_ledger"),
    ]

    operations = [
        migrations.AlterField(
            model_name="inboxattempt",
            name="event",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="attempt_log",
                to="webhooks.inboxevent",
            ),
        ),
        migrations.AddField(
            model_name="inboxattempt",
            name="event_received_at",
            field=models.DateTimeField(default=BEFORE),
            preserve_default=False,
        ),
    ]
