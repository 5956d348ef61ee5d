"""A deploy target may name the API clients whose jobs it serves; a target that names none
serves every client, as every target did before (docs/security.md, "Deploy targets and API
clients")."""

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
    ]
