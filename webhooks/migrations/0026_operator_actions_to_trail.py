"""Operator actions now belong to ``trail`` (its migration 0001 takes the table as it is):
the model leaves this app's state, its table stays."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0025_operator_action_switch_dependency"),
        ("trail", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="OperatorAction")],
            database_operations=[],
        ),
    ]
