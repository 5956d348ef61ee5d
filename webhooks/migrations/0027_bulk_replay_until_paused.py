"""A bulk replay job's frozen window end (``until``) and its ``paused`` state (the operator
API's pause): a nullable column, and a choice, no table rewrite."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0026_operator_actions_to_trail"),
    ]

    operations = [
        migrations.AddField(
            model_name="bulkreplayjob",
            name="until",
            field=models.DateTimeField(
                blank=True,
                help_text="Only rows received before this time (the operator API freezes its jobs' window when they are created).",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="bulkreplayjob",
            name="state",
            field=models.CharField(
                choices=[
                    ("counted", "Dry run counted, waiting to start"),
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("paused", "Paused"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                default="counted",
                max_length=16,
            ),
        ),
    ]
