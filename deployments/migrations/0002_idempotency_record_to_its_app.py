"""The other half of ``idempotency.0001``: the record leaves ``deployments``' state; its table
was renamed there and stays."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0001_initial"),
        ("idempotency", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="IdempotencyRecord")],
            database_operations=[],
        ),
    ]
