"""Each inbox row keeps the W3C traceparent of the request that wrote it (core/tracing.py;
docs/architecture.md, "A trace across the outbox"), written by the ingest upsert itself. A
column with a constant database default: PostgreSQL (11 and later) adds it without rewriting
the inbox, whatever its size, and the upsert leaves it out when tracing is off. Not part of
any leaf of the verifiable log."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0026_operator_actions_to_trail"),
    ]

    operations = [
        migrations.AddField(
            model_name="inboxevent",
            name="traceparent",
            field=models.CharField(
                blank=True, db_default="", default="", editable=False, max_length=55
            ),
        ),
    ]
