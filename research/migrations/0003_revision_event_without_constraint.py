"""A revision names the inbox event it applied by id, without a foreign key constraint into
the inbox, whose rows leave with retention while the revision stays (docs/scaling.md,
"Time partitions of the inbox")."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("research", "0002_revision_log_ticket"),
        ("webhooks", "0030_attempts_event_received_at"),
    ]

    operations = [
        migrations.AlterField(
            model_name="documentrevision",
            name="inbox_event",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="revisions",
                to="webhooks.inboxevent",
            ),
        ),
    ]
