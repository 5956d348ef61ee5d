"""Room on the inbox's pages for its rows' next versions (docs/scaling.md, "The inbox's
autovacuum settings"). PostgreSQL only: the embedded SQLite default has no such setting.

A duplicate delivery counts itself on the stored row (``delivery_count``, ``last_seen_at``),
columns no index reads: with room on the row's page, that update is a HOT update, with no
entry written in any of the table's indexes; on a full page it writes a new entry in all of
them. Pages written from now on keep 15% of their space free (fillfactor 85); pages already
written keep their layout until they are rewritten."""

from django.db import migrations

TABLE = "webhooks_inboxevent"
FILLFACTOR = 85


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
        ("webhooks", "0020_inbox_autovacuum_settings"),
    ]

    operations = [migrations.RunPython(fillfactor_set, fillfactor_reset)]
