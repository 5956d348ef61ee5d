"""One index fewer on the inbox: ``webhooks_inbox_source_last_idx``, ``(source_id,
received_at DESC NULLS LAST)``, the same columns as ``webhooks_inbox_source_idx`` in another
order of nulls (``received_at`` is never null). It served the latest delivery of each
source, read at every metrics scrape, which now orders as ``webhooks_inbox_source_idx`` does
and probes it (``webhooks.selectors.webhook_source_delivery_states``). Every inbox row wrote
an entry in it at ingest and again at each change of its status (docs/bench-log/
2026-12-06.md, "One index fewer on the inbox").

On PostgreSQL the index is partitioned: dropping it drops each partition's copy, under a
brief lock of the inbox. Reversed, it is created again as migration 0009 created it."""

import importlib

from django.db import migrations

INDEX = "webhooks_inbox_source_last_idx"


def index_drop(apps, schema_editor):
    schema_editor.execute(f'DROP INDEX IF EXISTS "{INDEX}"')


def index_create(apps, schema_editor):
    importlib.import_module(
        "webhooks.migrations.0009_source_expected_delivery_interval"
    ).index_create(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0034_inbox_key_fillfactor"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(
                    model_name="inboxevent",
                    name=INDEX,
                ),
            ],
            database_operations=[migrations.RunPython(index_drop, index_create)],
        ),
    ]
