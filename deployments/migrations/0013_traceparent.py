"""Each job keeps the W3C traceparent of the request that made it (core/tracing.py;
docs/architecture.md, "A trace across the outbox"), written by the statement that inserts the
job. A column with a constant database default, added by one ``ALTER TABLE ... ADD COLUMN``:
PostgreSQL (11 and later) adds it without rewriting the table, SQLite in place rather than by
rebuilding the table as its AddField of a column with a default would. A job inserted without
one gets "". Not part of any leaf of the verifiable log."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0012_job_target_flight_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="job",
                    name="traceparent",
                    field=models.CharField(
                        blank=True, db_default="", editable=False, max_length=55
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    'ALTER TABLE "deployments_job" ADD COLUMN "traceparent"'
                    " varchar(55) DEFAULT '' NOT NULL",
                    'ALTER TABLE "deployments_job" DROP COLUMN "traceparent"',
                )
            ],
        ),
    ]
