"""API clients gain a role (docs/http-api.md, "Roles"); every existing client is ``ci``,
which can do what every client could before. A constant default: no table rewrite."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0003_relay_heartbeat_active"),
    ]

    operations = [
        migrations.AddField(
            model_name="apiclient",
            name="role",
            field=models.CharField(
                choices=[
                    (
                        "producer",
                        "Producer: reads its events' status and the documents",
                    ),
                    (
                        "ci",
                        "CI/CD: triggers builds and deployments, reports their status",
                    ),
                    (
                        "operator",
                        "Operator: the operator API (replays, sources, targets, keys)",
                    ),
                    ("auditor", "Auditor: reads everything, changes nothing"),
                ],
                default="ci",
                max_length=16,
            ),
        ),
    ]
