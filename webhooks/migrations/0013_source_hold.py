"""A held source's pause and drain state moves from the source's row to a row of its own
(``SourceHold``, docs/subsystems/relay.md, "Pausing a source"): one row per paused or draining
source, which a pause, a resume and every drain round lock instead of the source's row (the one
every delivery's foreign key check reads). The state of sources paused or draining when this
runs is carried over. Workers read the pause: stop those of the previous release before this
migration runs (web processes never read it)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

HOLD_FIELDS = (
    "paused_at",
    "paused_by_id",
    "paused_by_name",
    "pause_reason",
    "drain_started_at",
    "drain_rate",
    "drain_released",
    "drain_tokens",
    "drain_tokens_at",
)


def holds_create(apps, schema_editor):
    source_model = apps.get_model("webhooks", "WebhookSource")
    hold_model = apps.get_model("webhooks", "SourceHold")
    held = source_model.objects.filter(
        paused_at__isnull=False
    ) | source_model.objects.filter(drain_started_at__isnull=False)
    for row in held.values("id", *HOLD_FIELDS):
        source_id = row.pop("id")
        if row["paused_at"] is not None:  # a check constraint forbade both already
            row["drain_started_at"] = None
        hold_model.objects.create(source_id=source_id, **row)


def holds_restore(apps, schema_editor):
    source_model = apps.get_model("webhooks", "WebhookSource")
    hold_model = apps.get_model("webhooks", "SourceHold")
    for row in hold_model.objects.values("source_id", *HOLD_FIELDS):
        source_model.objects.filter(pk=row.pop("source_id")).update(**row)


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0012_source_pause"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="SourceHold",
            fields=[
                (
                    "source",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="hold",
                        serialize=False,
                        to="webhooks.webhooksource",
                    ),
                ),
                (
                    "paused_at",
                    models.DateTimeField(
                        blank=True, null=True, verbose_name="paused since"
                    ),
                ),
                (
                    "paused_by_name",
                    models.CharField(
                        blank=True, default="", max_length=255, verbose_name="paused by"
                    ),
                ),
                ("pause_reason", models.TextField(blank=True, default="")),
                (
                    "drain_started_at",
                    models.DateTimeField(
                        blank=True, null=True, verbose_name="draining since"
                    ),
                ),
                (
                    "drain_rate",
                    models.FloatField(
                        blank=True,
                        help_text="Events per second; empty: no limit.",
                        null=True,
                    ),
                ),
                (
                    "drain_released",
                    models.PositiveBigIntegerField(
                        default=0, help_text="Events released since the drain started."
                    ),
                ),
                ("drain_tokens", models.FloatField(default=0)),
                ("drain_tokens_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.AddField(
            model_name="sourcehold",
            name="paused_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddConstraint(
            model_name="sourcehold",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("drain_started_at__isnull", True), ("paused_at__isnull", False)
                    ),
                    models.Q(
                        ("drain_started_at__isnull", False), ("paused_at__isnull", True)
                    ),
                    _connector="OR",
                ),
                name="webhooks_hold_paused_xor_draining",
            ),
        ),
        migrations.AddConstraint(
            model_name="sourcehold",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("drain_rate__isnull", True), ("drain_rate__gt", 0), _connector="OR"
                ),
                name="webhooks_hold_drain_rate_positive",
            ),
        ),
        migrations.RunPython(holds_create, holds_restore),
        migrations.RemoveConstraint(
            model_name="webhooksource",
            name="webhooks_source_drain_rate_positive",
        ),
        migrations.RemoveConstraint(
            model_name="webhooksource",
            name="webhooks_source_paused_or_draining",
        ),
        migrations.RemoveField(
            model_name="webhooksource",
            name="drain_rate",
        ),
        migrations.RemoveField(
            model_name="webhooksource",
            name="drain_released",
        ),
        migrations.RemoveField(
            model_name="webhooksource",
            name="drain_started_at",
        ),
        migrations.RemoveField(
            model_name="webhooksource",
            name="drain_tokens",
        ),
        migrations.RemoveField(
            model_name="webhooksource",
            name="drain_tokens_at",
        ),
        migrations.RemoveField(
            model_name="webhooksource",
            name="pause_reason",
        ),
        migrations.RemoveField(
            model_name="webhooksource",
            name="paused_at",
        ),
        migrations.RemoveField(
            model_name="webhooksource",
            name="paused_by",
        ),
        migrations.RemoveField(
            model_name="webhooksource",
            name="paused_by_name",
        ),
    ]
