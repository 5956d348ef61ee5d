"""What a trigger started downstream (docs/http-api.md, "What a trigger started"): a
``downstream`` on each job and on the attempt that delivered it (nullable columns: no rewrite
of either table), and an index on the downstream's id, through which a GitHub
``workflow_run`` delivery finds the job holding its run.

The index is built concurrently on PostgreSQL (the migration is not atomic): jobs go on being
created while a large table gets it. An index left invalid by an interrupted run is dropped
first; SQLite builds it the ordinary way."""

from django.db import migrations, models
from django.db.models.fields.json import KT

INDEX = models.Index(
    KT("downstream__id"),
    name="deployments_job_downstream_idx",
    condition=models.Q(downstream__isnull=False),
)


def forwards(apps, schema_editor) -> None:
    model = apps.get_model("deployments", "job")
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.add_index(model, INDEX)
        return
    schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{INDEX.name}"')
    schema_editor.execute(INDEX.create_sql(model, schema_editor, concurrently=True))


def backwards(apps, schema_editor) -> None:
    model = apps.get_model("deployments", "job")
    kwargs = (
        {"concurrently": True}
        if schema_editor.connection.vendor == "postgresql"
        else {}
    )
    schema_editor.execute(INDEX.remove_sql(model, schema_editor, **kwargs))


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("deployments", "0009_one_job_table"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="downstream",
            field=models.JSONField(blank=True, default=None, null=True),
        ),
        migrations.AddField(
            model_name="triggerattempt",
            name="downstream",
            field=models.JSONField(blank=True, default=None, null=True),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="job", index=INDEX)],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
