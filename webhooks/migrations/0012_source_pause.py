"""Pausing a source (docs/subsystems/relay.md, "Pausing a source"): the source's pause and drain
columns, the inbox's ``held_at``, the two outbox indexes that leave set-aside rows out, and the
index a drain reads them through.

The inbox indexes are built concurrently on PostgreSQL (the migration is not atomic): ingest
goes on while a large inbox gets them. Each outbox index is built anew under a temporary name,
the old one dropped, the new one renamed, so that the relay's claim always has one."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.models import Q

OUTBOX = "webhooks_inbox_outbox_idx"
RETRY = "webhooks_inbox_retry_idx"
HELD = "webhooks_inbox_held_idx"


def _waiting(status: str, *, held: bool) -> Q:
    """Rows of ``status`` waiting for a message; with ``held``, not set aside."""
    columns = {"processing_status": status, "dispatched_at__isnull": True}
    if held:
        columns["held_at__isnull"] = True
    return Q(**columns)


def _outbox(name: str, *, held: bool) -> models.Index:
    return models.Index(
        fields=["id"], name=name, condition=_waiting("received", held=held)
    )


def _retry(name: str, *, held: bool) -> models.Index:
    return models.Index(
        fields=["next_attempt_at"], name=name, condition=_waiting("failed", held=held)
    )


def _held_index() -> models.Index:
    return models.Index(
        fields=["source", "id"], name=HELD, condition=Q(held_at__isnull=False)
    )


def _replace(apps, schema_editor, *, held: bool) -> None:
    """The two outbox indexes with (``held``) or without the ``held_at IS NULL`` condition."""
    model = apps.get_model("webhooks", "InboxEvent")
    postgres = schema_editor.connection.vendor == "postgresql"
    for build in (_outbox, _retry):
        final = build(OUTBOX if build is _outbox else RETRY, held=held)
        if not postgres:  # SQLite: one writer at a time anyway
            schema_editor.execute(final.remove_sql(model, schema_editor))
            schema_editor.add_index(model, final)
            continue
        interim = build(f"{final.name[:24]}_next", held=held)
        schema_editor.execute(
            f'DROP INDEX CONCURRENTLY IF EXISTS "{interim.name}"'
        )  # left by an interrupted run
        schema_editor.execute(
            interim.create_sql(model, schema_editor, concurrently=True)
        )
        schema_editor.execute(final.remove_sql(model, schema_editor, concurrently=True))
        schema_editor.rename_index(model, interim, final)


def _held_create(apps, schema_editor) -> None:
    model = apps.get_model("webhooks", "InboxEvent")
    index = _held_index()
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{HELD}"')
        schema_editor.execute(index.create_sql(model, schema_editor, concurrently=True))
    else:
        schema_editor.add_index(model, index)


def _held_drop(apps, schema_editor) -> None:
    model = apps.get_model("webhooks", "InboxEvent")
    concurrently = schema_editor.connection.vendor == "postgresql"
    kwargs = {"concurrently": True} if concurrently else {}
    schema_editor.execute(_held_index().remove_sql(model, schema_editor, **kwargs))


def forwards(apps, schema_editor) -> None:
    _replace(apps, schema_editor, held=True)
    _held_create(apps, schema_editor)


def backwards(apps, schema_editor) -> None:
    _held_drop(apps, schema_editor)
    _replace(apps, schema_editor, held=False)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("webhooks", "0011_inbox_source_index_dropped"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="webhooksource",
            options={
                "permissions": [
                    ("rotate_secret", "Can rotate webhook source secrets"),
                    ("pause_source", "Can pause and resume webhook sources"),
                ]
            },
        ),
        migrations.AddField(
            model_name="inboxevent",
            name="held_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="webhooksource",
            name="drain_rate",
            field=models.FloatField(
                blank=True, help_text="Events per second; empty: no limit.", null=True
            ),
        ),
        migrations.AddField(
            model_name="webhooksource",
            name="drain_released",
            field=models.PositiveBigIntegerField(
                db_default=0,
                default=0,
                help_text="Events released since the drain started.",
            ),
        ),
        migrations.AddField(
            model_name="webhooksource",
            name="drain_started_at",
            field=models.DateTimeField(
                blank=True, null=True, verbose_name="draining since"
            ),
        ),
        migrations.AddField(
            model_name="webhooksource",
            name="drain_tokens",
            field=models.FloatField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="webhooksource",
            name="drain_tokens_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="webhooksource",
            name="pause_reason",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
        migrations.AddField(
            model_name="webhooksource",
            name="paused_at",
            field=models.DateTimeField(
                blank=True, null=True, verbose_name="paused since"
            ),
        ),
        migrations.AddField(
            model_name="webhooksource",
            name="paused_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="webhooksource",
            name="paused_by_name",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                max_length=255,
                verbose_name="paused by",
            ),
        ),
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
                    ("start_bulk_replay", "Start Bulk Replay"),
                    ("cancel_bulk_replay", "Cancel Bulk Replay"),
                    ("resume_bulk_replay", "Resume Bulk Replay"),
                    ("pause_source", "Pause Source"),
                    ("resume_source", "Resume Source"),
                ],
                max_length=32,
            ),
        ),
        migrations.AddConstraint(
            model_name="webhooksource",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("drain_rate__isnull", True), ("drain_rate__gt", 0), _connector="OR"
                ),
                name="webhooks_source_drain_rate_positive",
            ),
        ),
        migrations.AddConstraint(
            model_name="webhooksource",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("paused_at__isnull", True),
                    ("drain_started_at__isnull", True),
                    _connector="OR",
                ),
                name="webhooks_source_paused_or_draining",
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="inboxevent", name=OUTBOX),
                migrations.RemoveIndex(model_name="inboxevent", name=RETRY),
                migrations.AddIndex(
                    model_name="inboxevent", index=_outbox(OUTBOX, held=True)
                ),
                migrations.AddIndex(
                    model_name="inboxevent", index=_retry(RETRY, held=True)
                ),
                migrations.AddIndex(model_name="inboxevent", index=_held_index()),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
