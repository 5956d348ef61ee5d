"""Room on the deduplication ledger's pages for its keys' next versions (docs/scaling.md,
"Retention by dropping a partition"). PostgreSQL only: the embedded SQLite default has no
such setting.

A key is written again when a duplicate counts itself on it (``delivery_count``) and when
retention gives it the status its row ended with (``final_status``), columns no index reads:
with room on the key's page that update is a HOT update, with no entry written in the
ledger's indexes (its unique index on the source and the event id is large and read at
random); on a full page it writes one in each. Measured on a ledger of ten million keys, a
day's 3,333 final statuses written with the caches dropped: 0.25 s with full pages, 0.12 s
with this room, every update HOT (docs/bench-log/2026-12-06.md, "A drop's steps, the
filesystem's floor, and the ledger's room for a key's second version"). Pages written from
now on keep 5% of their space free (about eight bytes a key); pages already written keep
their layout until they are rewritten."""

from django.db import migrations

TABLE = "webhooks_inboxkey"
FILLFACTOR = 95


def fillfactor_set(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"ALTER TABLE {TABLE} SET (fillfactor = {FILLFACTOR})")


def fillfactor_reset(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"ALTER TABLE {TABLE} RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0033_inbox_key_purges"),
    ]

    operations = [migrations.RunPython(fillfactor_set, fillfactor_reset)]
