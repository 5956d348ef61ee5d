"""Two partial indexes on (target, id) for a deploy target's limit of jobs in flight
(docs/subsystems/executors.md, "A target's breaker"): its jobs in flight and those waiting for
their first attempt, counted on each attempt of a target with a limit, each through its own
few entries rather than every queued or running job.

Built concurrently on PostgreSQL (the migration is not atomic): jobs go on being created
while a large table gets them. An index left invalid by an interrupted run is dropped first;
SQLite builds them the ordinary way."""

from django.db import migrations, models

INDEXES = [
    models.Index(
        fields=["target", "id"],
        name="deployments_job_flight_idx",
        condition=models.Q(
            target__isnull=False,
            status__in=["queued", "running"],
            trigger_attempt_count__gt=0,
        ),
    ),
    models.Index(
        fields=["target", "id"],
        name="deployments_job_turn_idx",
        condition=models.Q(
            target__isnull=False,
            status="queued",
            trigger_attempt_count=0,
            trigger_phase="retry_wait",
        ),
    ),
]


def forwards(apps, schema_editor) -> None:
    model = apps.get_model("deployments", "job")
    for index in INDEXES:
        if schema_editor.connection.vendor != "postgresql":
            schema_editor.add_index(model, index)
            continue
        schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{index.name}"')
        schema_editor.execute(index.create_sql(model, schema_editor, concurrently=True))


def backwards(apps, schema_editor) -> None:
    model = apps.get_model("deployments", "job")
    kwargs = (
        {"concurrently": True}
        if schema_editor.connection.vendor == "postgresql"
        else {}
    )
    for index in INDEXES:
        schema_editor.execute(index.remove_sql(model, schema_editor, **kwargs))


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("deployments", "0011_target_breaker"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(model_name="job", index=index) for index in INDEXES
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
