"""Operator actions, bulk replay jobs and the dead-letter queue move from ``audit`` to
``webhooks``, which owns replay and every other operator action on the inbox. The rows stay:
the tables are renamed, not recreated, and the models' content types (with the permissions
that groups hold on them) move with them."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MOVED_MODELS = ("operatoraction", "bulkreplayjob", "deadletteredevent")


def content_types_move(apps, schema_editor, *, source, target):
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.using(schema_editor.connection.alias).filter(
        app_label=source, model__in=MOVED_MODELS
    ).update(app_label=target)


def forwards(apps, schema_editor):
    content_types_move(apps, schema_editor, source="audit", target="webhooks")


def backwards(apps, schema_editor):
    content_types_move(apps, schema_editor, source="webhooks", target="audit")


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0001_initial"),
        ("audit", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="DeadLetteredEvent",
                    fields=[],
                    options={
                        "verbose_name": "dead-lettered event",
                        "verbose_name_plural": "dead-letter queue",
                        "proxy": True,
                        "indexes": [],
                        "constraints": [],
                    },
                    bases=("webhooks.inboxevent",),
                ),
                migrations.CreateModel(
                    name="BulkReplayJob",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("dead_lettered", "Dead Lettered"),
                                    ("failed", "Failed"),
                                ],
                                default="dead_lettered",
                                max_length=32,
                            ),
                        ),
                        (
                            "since",
                            models.DateTimeField(
                                blank=True,
                                help_text="Only rows received at or after this time.",
                                null=True,
                            ),
                        ),
                        (
                            "event_ids",
                            models.JSONField(
                                blank=True,
                                default=list,
                                help_text="Only these event ids (producer ids).",
                            ),
                        ),
                        ("reason", models.TextField()),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("counted", "Dry run counted, waiting to start"),
                                    ("queued", "Queued"),
                                    ("running", "Running"),
                                    ("succeeded", "Succeeded"),
                                    ("failed", "Failed"),
                                ],
                                default="counted",
                                max_length=16,
                            ),
                        ),
                        ("dry_run_count", models.PositiveIntegerField(default=0)),
                        ("total", models.PositiveIntegerField(default=0)),
                        ("processed", models.PositiveIntegerField(default=0)),
                        ("error", models.TextField(blank=True, default="")),
                        (
                            "created_by_name",
                            models.CharField(blank=True, default="", max_length=255),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "created_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "source",
                            models.ForeignKey(
                                blank=True,
                                help_text="Empty: every source.",
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="webhooks.webhooksource",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "audit_bulkreplayjob",
                        "indexes": [
                            models.Index(
                                fields=["-created_at"], name="audit_bulkjob_created_idx"
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="OperatorAction",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "action",
                            models.CharField(
                                choices=[
                                    ("replay", "Replay"),
                                    ("bulk_replay", "Bulk Replay"),
                                    ("mark_investigated", "Mark Investigated"),
                                    ("rotate_secret", "Rotate Secret"),
                                ],
                                max_length=32,
                            ),
                        ),
                        ("actor_name", models.CharField(max_length=255)),
                        ("reason", models.TextField(blank=True, default="")),
                        (
                            "event_ids",
                            models.JSONField(
                                default=list, help_text="Inbox event primary keys."
                            ),
                        ),
                        ("event_count", models.PositiveIntegerField(default=0)),
                        (
                            "skipped_count",
                            models.PositiveIntegerField(
                                default=0,
                                help_text="Selected rows that were not in a replayable status.",
                            ),
                        ),
                        ("details", models.JSONField(blank=True, default=dict)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "actor",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "bulk_job",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="actions",
                                to="webhooks.bulkreplayjob",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "audit_operatoraction",
                        "indexes": [
                            models.Index(
                                fields=["-created_at"], name="audit_action_created_idx"
                            ),
                            models.Index(
                                fields=["action", "-created_at"],
                                name="audit_action_kind_idx",
                            ),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterModelTable(name="bulkreplayjob", table=None),
        migrations.AlterModelTable(name="operatoraction", table=None),
        migrations.RenameIndex(
            model_name="bulkreplayjob",
            new_name="webhooks_bulkjob_created_idx",
            old_name="audit_bulkjob_created_idx",
        ),
        migrations.RenameIndex(
            model_name="operatoraction",
            new_name="webhooks_action_created_idx",
            old_name="audit_action_created_idx",
        ),
        migrations.RenameIndex(
            model_name="operatoraction",
            new_name="webhooks_action_kind_idx",
            old_name="audit_action_kind_idx",
        ),
        migrations.RunPython(forwards, backwards),
    ]
