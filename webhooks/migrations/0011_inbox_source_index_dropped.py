import django.db.models.deletion
from django.db import migrations, models

INDEX = "webhooks_inboxevent_source_id_6aa3cdf4"


def index_drop(apps, schema_editor):
    # Concurrently on PostgreSQL: ingest goes on while a large inbox loses the index. The
    # foreign key itself stays as it is (no re-validation of every row).
    concurrently = (
        "CONCURRENTLY " if schema_editor.connection.vendor == "postgresql" else ""
    )
    schema_editor.execute(f'DROP INDEX {concurrently}IF EXISTS "{INDEX}"')


def index_create(apps, schema_editor):
    concurrently = (
        "CONCURRENTLY " if schema_editor.connection.vendor == "postgresql" else ""
    )
    schema_editor.execute(
        f'CREATE INDEX {concurrently}IF NOT EXISTS "{INDEX}" '
        'ON "webhooks_inboxevent" ("source_id")'
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("webhooks", "0010_bulk_replay_rate_cancel"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="inboxevent",
                    name="source",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="events",
                        to="webhooks.webhooksource",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(index_drop, index_create)],
        ),
    ]
