"""A deploy target's circuit breaker and its limit of jobs in flight (docs/subsystems/
executors.md, "A target's breaker"): columns with defaults (closed, no failures, no limit),
so that every target keeps working as it did."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0010_job_downstream"),
    ]

    operations = [
        migrations.AddField(
            model_name="deploytarget",
            name="breaker_changed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="deploytarget",
            name="breaker_failed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="deploytarget",
            name="breaker_failures",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="deploytarget",
            name="breaker_probe",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="deployments.job",
            ),
        ),
        migrations.AddField(
            model_name="deploytarget",
            name="breaker_state",
            field=models.CharField(
                choices=[
                    ("closed", "Closed"),
                    ("open", "Open"),
                    ("half_open", "half-open (one probe)"),
                ],
                default="closed",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="deploytarget",
            name="max_in_flight",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="At most this many of its jobs triggered and not finished at once; the next wait their turn, in job order. Empty: no limit.",
                null=True,
            ),
        ),
    ]
