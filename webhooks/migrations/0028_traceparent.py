"""Each inbox row keeps the W3C traceparent of the request that wrote it (core/tracing.py;
docs/architecture.md, "A trace across the outbox"), written by the ingest upsert itself. A
column with a constant database default, added by one ``ALTER TABLE ... ADD COLUMN``:
PostgreSQL (11 and later) adds it without rewriting the inbox, whatever its size, and SQLite
in place too (its AddField of a column with a default rebuilds the table, which cannot
rebuild this one's NULLS LAST index: migrations 0009 and 0017). The upsert leaves the column
out when tracing is off. Not part of any leaf of the verifiable log."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0027_bulk_replay_until_paused"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="inboxevent",
                    name="traceparent",
                    field=models.CharField(
                        blank=True,
                        db_default="",
                        default="",
                        editable=False,
                        max_length=55,
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    'ALTER TABLE "webhooks_inboxevent" ADD COLUMN "traceparent"'
                    " varchar(55) DEFAULT '' NOT NULL",
                    'ALTER TABLE "webhooks_inboxevent" DROP COLUMN "traceparent"',
                )
            ],
        ),
    ]
