"""One job table (docs/subsystems/executors.md, "Migration 0009: one job table").

The deployments' table becomes the job table (renamed, with ``kind``); the builds are
copied into it in batches, each under a new id past every old one (its old id kept as
``ledger_id``, its record's id in the audit log); the transitions', status syncs' and
attempts' ``deployment`` column becomes ``job`` and takes a build's new id in batches; then
the builds' table and columns go. Backwards, the same in reverse: the builds' table comes
back with the rows it had, under their old ids.

Not atomic: each batch commits on its own, so that no transaction holds a million rows."""

import django.db.models.deletion
from django.core.management.color import no_style
from django.db import migrations, models, transaction

BATCH = 20_000

# The three tables that named a deployment or a build, by their table names.
REFERRING = (
    "deployments_jobtransition",
    "deployments_statussync",
    "deployments_triggerattempt",
)


def _ranges(cursor, table, where=""):
    """``(low, high]`` id ranges of ``BATCH`` over ``table``."""
    cursor.execute(f"SELECT MIN(id), MAX(id) FROM {table} {where}")  # noqa: S608
    low, high = cursor.fetchone()
    if low is None:
        return
    start = low - 1
    while start < high:
        yield start, start + BATCH
        start += BATCH


def _max_id(cursor, table):
    cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}")  # noqa: S608
    return cursor.fetchone()[0]


def _sequence_reset(schema_editor, model):
    for sql in schema_editor.connection.ops.sequence_reset_sql(no_style(), [model]):
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(sql)


def _build_columns(schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        description = connection.introspection.get_table_description(
            cursor, "deployments_build"
        )
    return [column.name for column in description if column.name != "id"]


def _offset(cursor):
    # Past every old id of both tables: no build's new id is another build's old id, so
    # an old address of a build (the admin's) names one build only.
    return max(_max_id(cursor, "deployments_job"), _max_id(cursor, "deployments_build"))


def builds_copy(apps, schema_editor):
    connection = schema_editor.connection
    quote = connection.ops.quote_name
    columns = _build_columns(schema_editor)
    listed = ", ".join(quote(name) for name in columns)
    with connection.cursor() as cursor:
        offset = _offset(cursor)
        ranges = list(_ranges(cursor, "deployments_build"))
    for low, high in ranges:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO deployments_job"  # noqa: S608 - names from the table
                f" (id, kind, ledger_id, environment, github_commit_sha, {listed})"
                f" SELECT id + %s, 'build', id, '', '', {listed} FROM deployments_build"
                " WHERE id > %s AND id <= %s",
                [offset, low, high],
            )
    _sequence_reset(schema_editor, apps.get_model("deployments", "Job"))


def builds_copy_back(apps, schema_editor):
    connection = schema_editor.connection
    quote = connection.ops.quote_name
    columns = _build_columns(schema_editor)
    listed = ", ".join(quote(name) for name in columns)
    where = "WHERE kind = 'build'"
    with connection.cursor() as cursor:
        ranges = list(_ranges(cursor, "deployments_job", where))
    for low, high in ranges:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO deployments_build (id, {listed})"  # noqa: S608
                f" SELECT COALESCE(ledger_id, id), {listed} FROM deployments_job"
                f" {where} AND id > %s AND id <= %s",
                [low, high],
            )
    _sequence_reset(schema_editor, apps.get_model("deployments", "Build"))


def builds_delete(apps, schema_editor):
    """The builds leave the job table (backwards: once copied back, and no longer named by
    a transition, a sync or an attempt)."""
    connection = schema_editor.connection
    where = "WHERE kind = 'build'"
    with connection.cursor() as cursor:
        ranges = list(_ranges(cursor, "deployments_job", where))
    for low, high in ranges:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM deployments_job {where} AND id > %s AND id <= %s",  # noqa: S608
                [low, high],
            )


def job_fill(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(MIN(id - ledger_id), 0) FROM deployments_job"
            " WHERE ledger_id IS NOT NULL"
        )
        offset = cursor.fetchone()[0]
    for table in REFERRING:
        with connection.cursor() as cursor:
            ranges = list(_ranges(cursor, table, "WHERE build_id IS NOT NULL"))
        for low, high in ranges:
            with (
                transaction.atomic(using=connection.alias),
                connection.cursor() as cursor,
            ):
                cursor.execute(
                    f"UPDATE {table} SET job_id = build_id + %s"  # noqa: S608
                    " WHERE build_id IS NOT NULL AND id > %s AND id <= %s",
                    [offset, low, high],
                )


def job_unfill(apps, schema_editor):
    connection = schema_editor.connection
    builds = "SELECT id FROM deployments_job WHERE kind = 'build'"
    for table in REFERRING:
        with connection.cursor() as cursor:
            ranges = list(_ranges(cursor, table, f"WHERE job_id IN ({builds})"))
        for low, high in ranges:
            with (
                transaction.atomic(using=connection.alias),
                connection.cursor() as cursor,
            ):
                cursor.execute(
                    f"UPDATE {table} SET build_id = ("  # noqa: S608
                    " SELECT COALESCE(job.ledger_id, job.id) FROM deployments_job job"
                    f" WHERE job.id = {table}.job_id), job_id = NULL"
                    f" WHERE job_id IN ({builds}) AND id > %s AND id <= %s",
                    [low, high],
                )


def table_rename(old, new):
    def rename(apps, schema_editor):
        schema_editor.execute(
            schema_editor.sql_rename_table
            % {
                "old_table": schema_editor.quote_name(old),
                "new_table": schema_editor.quote_name(new),
            }
        )

    return rename


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("core", "0003_relay_heartbeat_active"),
        ("deployments", "0008_deploy_target_clients_and_tests"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="jobtransition", name="deployments_transition_one_target"
        ),
        migrations.RemoveConstraint(
            model_name="statussync", name="deployments_statussync_one_target"
        ),
        migrations.RemoveConstraint(
            model_name="triggerattempt", name="deployments_attempt_one_target"
        ),
        migrations.RemoveConstraint(
            model_name="triggerattempt", name="deployments_attempt_dep_number_uniq"
        ),
        migrations.RemoveConstraint(
            model_name="triggerattempt", name="deployments_attempt_bld_number_uniq"
        ),
        # The table is renamed, its content type is not: the proxy model "Deployment"
        # keeps it, and the permissions granted on it.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RenameModel(old_name="Deployment", new_name="Job")
            ],
            database_operations=[
                migrations.RunPython(
                    table_rename("deployments_deployment", "deployments_job"),
                    table_rename("deployments_job", "deployments_deployment"),
                )
            ],
        ),
        migrations.AddField(
            model_name="job",
            name="kind",
            field=models.CharField(
                choices=[("deployment", "Deployment"), ("build", "Build")],
                default="deployment",
                max_length=16,
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="job",
            name="ledger_id",
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="ref",
            field=models.CharField(blank=True, default="", max_length=255),
        ),
        migrations.RenameField(
            model_name="jobtransition", old_name="deployment", new_name="job"
        ),
        migrations.RenameField(
            model_name="statussync", old_name="deployment", new_name="job"
        ),
        migrations.RenameField(
            model_name="triggerattempt", old_name="deployment", new_name="job"
        ),
        migrations.RunPython(builds_copy, builds_delete),
        migrations.RunPython(job_fill, job_unfill),
        # Backwards, before the transitions, syncs and attempts name their builds again.
        migrations.RunPython(migrations.RunPython.noop, builds_copy_back),
        migrations.RemoveField(model_name="jobtransition", name="build"),
        migrations.RemoveField(model_name="statussync", name="build"),
        migrations.RemoveField(model_name="triggerattempt", name="build"),
        migrations.DeleteModel(name="Build"),
        migrations.CreateModel(
            name="Deployment",
            fields=[],
            options={"proxy": True, "indexes": [], "constraints": []},
            bases=("deployments.job",),
        ),
        migrations.CreateModel(
            name="Build",
            fields=[],
            options={"proxy": True, "indexes": [], "constraints": []},
            bases=("deployments.job",),
        ),
        migrations.AlterField(
            model_name="jobtransition",
            name="job",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="transitions",
                to="deployments.job",
            ),
        ),
        migrations.AlterField(
            model_name="statussync",
            name="job",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="status_syncs",
                to="deployments.job",
            ),
        ),
        migrations.AlterField(
            model_name="triggerattempt",
            name="job",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="trigger_attempts",
                to="deployments.job",
            ),
        ),
        migrations.AddConstraint(
            model_name="triggerattempt",
            constraint=models.UniqueConstraint(
                fields=("job", "number"), name="deployments_attempt_job_number_uniq"
            ),
        ),
        # A client's list of one kind reads that kind's rows only, as it did when each
        # kind had a table of its own.
        migrations.RemoveIndex(model_name="job", name="deployments_dep_client_id_idx"),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("kind", "deployment")),
                fields=["client", "id"],
                name="deployments_dep_client_id_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("kind", "build")),
                fields=["client", "id"],
                name="deployments_bld_client_id_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("ledger_id__isnull", False)),
                fields=["ledger_id"],
                name="deployments_job_ledger_id_idx",
            ),
        ),
    ]
