"""The inbox's tables are written like a queue: per-table autovacuum settings that suit one
(docs/scaling.md, "The inbox's autovacuum settings"). PostgreSQL only: the embedded SQLite
default has no such settings."""

from django.db import migrations

# Each event leaves three dead versions of its inbox row (the relay's stamp, the claim, the
# close) and one of its attempt (the close): vacuum after 1% of the table has died (at least
# 5,000 rows), not the default 20%, so that the partial indexes the relay and the workers
# probe do not fill with dead entries; analyze as often, for their estimates; and let the
# vacuum of these two tables run twice as fast as the default cost delay allows. An attempt
# is closed moments after its insert, a batch's all at once: room left on their pages
# (fillfactor 70) makes most closes HOT updates, with no index entry to write.
SETTINGS = {
    "webhooks_inboxevent": {
        "autovacuum_vacuum_scale_factor": "0.01",
        "autovacuum_vacuum_threshold": "5000",
        "autovacuum_analyze_scale_factor": "0.01",
        "autovacuum_analyze_threshold": "5000",
        "autovacuum_vacuum_cost_delay": "1",
    },
    "webhooks_inboxattempt": {
        "autovacuum_vacuum_scale_factor": "0.01",
        "autovacuum_vacuum_threshold": "5000",
        "autovacuum_analyze_scale_factor": "0.01",
        "autovacuum_analyze_threshold": "5000",
        "autovacuum_vacuum_cost_delay": "1",
        "fillfactor": "70",
    },
}


def settings_set(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, options in SETTINGS.items():
        values = ", ".join(f"{name} = {value}" for name, value in options.items())
        schema_editor.execute(f"ALTER TABLE {table} SET ({values})")


def settings_reset(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, options in SETTINGS.items():
        schema_editor.execute(f"ALTER TABLE {table} RESET ({', '.join(options)})")


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0019_prefix_search_indexes"),
    ]

    operations = [migrations.RunPython(settings_set, settings_reset)]
