"""The status a row had when retention dropped it, on its key (docs/scaling.md,
"Retention by dropping a partition"): a column with a constant default, added without
rewriting the ledger."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0031_inbox_time_partitions"),
    ]

    operations = [
        migrations.AddField(
            model_name="inboxkey",
            name="final_status",
            field=models.CharField(
                blank=True, db_default="", default="", max_length=32
            ),
        ),
    ]
