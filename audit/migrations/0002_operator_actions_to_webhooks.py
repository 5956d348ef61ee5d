"""The other half of ``webhooks.0002``: the moved models leave ``audit``'s state; their tables
were renamed there and stay."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0001_initial"),
        ("webhooks", "0002_operator_actions_from_audit"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="OperatorAction"),
                migrations.DeleteModel(name="BulkReplayJob"),
                migrations.DeleteModel(name="DeadLetteredEvent"),
            ],
            database_operations=[],
        ),
    ]
