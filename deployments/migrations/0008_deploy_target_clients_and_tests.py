"""A deploy target may name the API clients whose jobs it serves; a target that names none
serves every client, as every target did before (docs/security.md, "Deploy targets and API
clients"). "Send test trigger" is sent by a worker, its outcome recorded on a row of its own
(``DeployTargetTest``)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0003_relay_heartbeat_active"),
        ("deployments", "0007_trigger_attempt_log_tickets"),
    ]

    operations = [
        migrations.AddField(
            model_name="deploytarget",
            name="clients",
            field=models.ManyToManyField(
                blank=True,
                help_text="The API clients whose jobs this target serves; another client's jobs go past it. Empty: every client's (a single tenant).",
                related_name="+",
                to="core.apiclient",
                verbose_name="API clients",
            ),
        ),
        migrations.CreateModel(
            name="DeployTargetTest",
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
                ("message_id", models.CharField(max_length=32)),
                (
                    "requested_at",
                    models.DateTimeField(default=django.utils.timezone.now),
                ),
                ("requested_by_name", models.CharField(max_length=255)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("queued", "waiting for a worker"),
                            ("sending", "being sent"),
                            ("done", "done"),
                            ("not_sent", "not sent"),
                        ],
                        default="queued",
                        max_length=16,
                    ),
                ),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "outcome",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("", "-"),
                            ("delivered", "delivered (HTTP 2xx)"),
                            ("answered", "the receiver answered"),
                            ("not_reached", "not reached (no HTTP answer)"),
                            ("nothing", "nothing to send: this executor calls nothing"),
                        ],
                        default="",
                        max_length=16,
                    ),
                ),
                (
                    "status_class",
                    models.CharField(blank=True, default="", max_length=3),
                ),
                ("reason", models.CharField(blank=True, default="", max_length=200)),
                (
                    "target",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="tests",
                        to="deployments.deploytarget",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        fields=["target", "-id"], name="deployments_test_target_idx"
                    )
                ],
            },
        ),
    ]
