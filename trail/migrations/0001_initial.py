"""Operator actions move from ``webhooks`` to ``trail``, below the apps that record them.
The rows stay: the table keeps its name (``webhooks_operatoraction``), so nothing in the
database changes but the model's content type, which moves with its permissions."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import core.models

MOVED_MODELS = ("operatoraction",)


def content_types_move(apps, schema_editor, *, source, target):
    # The content type moves with its permissions, so that the groups and users that hold
    # them (audit.roles) keep them; one the new label got already is dropped first.
    content_type = apps.get_model("contenttypes", "ContentType")
    types = content_type.objects.using(schema_editor.connection.alias)
    if types.filter(app_label=source, model__in=MOVED_MODELS).exists():
        types.filter(app_label=target, model__in=MOVED_MODELS).delete()
        types.filter(app_label=source, model__in=MOVED_MODELS).update(app_label=target)


def forwards(apps, schema_editor):
    content_types_move(apps, schema_editor, source="webhooks", target="trail")


def backwards(apps, schema_editor):
    content_types_move(apps, schema_editor, source="trail", target="webhooks")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("webhooks", "0025_operator_action_switch_dependency"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
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
                                    ("rotate_public_key", "Rotate Public Key"),
                                    ("purge_bodies", "Purge Bodies"),
                                    ("start_bulk_replay", "Start Bulk Replay"),
                                    ("cancel_bulk_replay", "Cancel Bulk Replay"),
                                    ("resume_bulk_replay", "Resume Bulk Replay"),
                                    ("pause_source", "Pause Source"),
                                    ("resume_source", "Resume Source"),
                                    ("create_source", "Create Source"),
                                    ("enable_source", "Enable Source"),
                                    ("disable_source", "Disable Source"),
                                    ("set_expected_interval", "Set Expected Interval"),
                                    ("purge_evidence_bodies", "Purge Evidence Bodies"),
                                    (
                                        "purge_signature_failures",
                                        "Purge Signature Failures",
                                    ),
                                    ("create_api_client", "Create Api Client"),
                                    ("activate_api_client", "Activate Api Client"),
                                    ("deactivate_api_client", "Deactivate Api Client"),
                                    ("set_source_client", "Set Source Client"),
                                    ("create_deploy_target", "Create Deploy Target"),
                                    ("change_deploy_target", "Change Deploy Target"),
                                    ("test_deploy_target", "Test Deploy Target"),
                                    ("switch_dependency", "Switch Dependency"),
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
                            "log_ticket",
                            models.BigIntegerField(
                                blank=True,
                                db_default=core.models.TransactionTicket(),
                                editable=False,
                                help_text="The transaction that inserted the row (the log's sealer reads it).",
                                null=True,
                            ),
                        ),
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
                        "db_table": "webhooks_operatoraction",
                        "indexes": [
                            models.Index(
                                fields=["-created_at"],
                                name="webhooks_action_created_idx",
                            ),
                            models.Index(
                                fields=["action", "-created_at"],
                                name="webhooks_action_kind_idx",
                            ),
                            models.Index(
                                condition=models.Q(("log_ticket__isnull", False)),
                                fields=["log_ticket", "id"],
                                name="webhooks_action_logt_idx",
                            ),
                            models.Index(
                                condition=models.Q(("log_ticket__isnull", True)),
                                fields=["id"],
                                name="webhooks_action_lognull_idx",
                            ),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
