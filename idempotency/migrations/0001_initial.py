"""The idempotency record moves from ``deployments`` to its own app: deployments, builds and
status-sync all use it. The rows stay: the table is renamed, not recreated, its indexes and
the live-key constraint take the app's names, and the model's content type (with the
permissions groups hold on it) moves with it."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


def content_type_move(apps, schema_editor, *, source, target):
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.using(schema_editor.connection.alias).filter(
        app_label=source, model="idempotencyrecord"
    ).update(app_label=target)


def forwards(apps, schema_editor):
    content_type_move(apps, schema_editor, source="deployments", target="idempotency")


def backwards(apps, schema_editor):
    content_type_move(apps, schema_editor, source="idempotency", target="deployments")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("core", "0001_initial"),
        ("deployments", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="IdempotencyRecord",
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
                        ("operation_type", models.CharField(max_length=64)),
                        ("key", models.CharField(max_length=255)),
                        ("fingerprint", models.CharField(max_length=64)),
                        ("fingerprint_fields", models.JSONField(default=dict)),
                        (
                            "resource_id",
                            models.CharField(blank=True, default="", max_length=64),
                        ),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("processing", "Processing"),
                                    ("succeeded", "Succeeded"),
                                    ("failed", "Failed"),
                                ],
                                default="processing",
                                max_length=16,
                            ),
                        ),
                        (
                            "response_status",
                            models.PositiveSmallIntegerField(blank=True, null=True),
                        ),
                        ("response_body", models.BinaryField(blank=True, null=True)),
                        (
                            "response_location",
                            models.CharField(blank=True, default="", max_length=255),
                        ),
                        ("expires_at", models.DateTimeField()),
                        ("expired_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "created_at",
                            models.DateTimeField(default=django.utils.timezone.now),
                        ),
                        (
                            "updated_at",
                            models.DateTimeField(default=django.utils.timezone.now),
                        ),
                        (
                            "client",
                            models.ForeignKey(
                                db_index=False,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="core.apiclient",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "deployments_idempotencyrecord",
                        "indexes": [
                            models.Index(
                                condition=models.Q(("expired_at__isnull", False)),
                                fields=["client", "operation_type", "key"],
                                name="deployments_idem_oldkey_idx",
                            ),
                            models.Index(
                                fields=["operation_type", "resource_id"],
                                name="deployments_idem_resource_idx",
                            ),
                            models.Index(
                                condition=models.Q(("expired_at__isnull", True)),
                                fields=["expires_at"],
                                name="deployments_idem_expiry_idx",
                            ),
                            models.Index(
                                condition=models.Q(("expired_at__isnull", False)),
                                fields=["expired_at"],
                                name="deployments_idem_expired_idx",
                            ),
                            models.Index(
                                fields=["status", "-created_at"],
                                name="deployments_idem_status_idx",
                            ),
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                condition=models.Q(("expired_at__isnull", True)),
                                fields=("client", "operation_type", "key"),
                                name="deployments_idem_live_key_uniq",
                            ),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterModelTable(name="idempotencyrecord", table=None),
        migrations.RenameIndex(
            model_name="idempotencyrecord",
            new_name="idempotency_oldkey_idx",
            old_name="deployments_idem_oldkey_idx",
        ),
        migrations.RenameIndex(
            model_name="idempotencyrecord",
            new_name="idempotency_resource_idx",
            old_name="deployments_idem_resource_idx",
        ),
        migrations.RenameIndex(
            model_name="idempotencyrecord",
            new_name="idempotency_expiry_idx",
            old_name="deployments_idem_expiry_idx",
        ),
        migrations.RenameIndex(
            model_name="idempotencyrecord",
            new_name="idempotency_expired_idx",
            old_name="deployments_idem_expired_idx",
        ),
        migrations.RenameIndex(
            model_name="idempotencyrecord",
            new_name="idempotency_status_idx",
            old_name="deployments_idem_status_idx",
        ),
        migrations.RemoveConstraint(
            model_name="idempotencyrecord", name="deployments_idem_live_key_uniq"
        ),
        migrations.AddConstraint(
            model_name="idempotencyrecord",
            constraint=models.UniqueConstraint(
                condition=models.Q(("expired_at__isnull", True)),
                fields=("client", "operation_type", "key"),
                name="idempotency_live_key_uniq",
            ),
        ),
        migrations.RunPython(forwards, backwards),
    ]
