"""An index on (client, id) for deployments and builds: a client's list, newest first, reads
its own rows only, instead of walking the primary key back over other clients' newer rows.

Built concurrently on PostgreSQL (the migration is not atomic): new jobs go on being created
while a large table gets its index. An index left invalid by an interrupted run is dropped
first; SQLite builds it the ordinary way."""

from django.db import migrations, models

INDEXES = {
    "deployment": models.Index(
        fields=["client", "id"], name="deployments_dep_client_id_idx"
    ),
    "build": models.Index(
        fields=["client", "id"], name="deployments_bld_client_id_idx"
    ),
}


def forwards(apps, schema_editor) -> None:
    postgres = schema_editor.connection.vendor == "postgresql"
    for model_name, index in INDEXES.items():
        model = apps.get_model("deployments", model_name)
        if not postgres:
            schema_editor.add_index(model, index)
            continue
        schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{index.name}"')
        schema_editor.execute(index.create_sql(model, schema_editor, concurrently=True))


def backwards(apps, schema_editor) -> None:
    kwargs = (
        {"concurrently": True}
        if schema_editor.connection.vendor == "postgresql"
        else {}
    )
    for model_name, index in INDEXES.items():
        model = apps.get_model("deployments", model_name)
        schema_editor.execute(index.remove_sql(model, schema_editor, **kwargs))


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("deployments", "0003_jobs_outbox"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(model_name=model_name, index=index)
                for model_name, index in INDEXES.items()
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
