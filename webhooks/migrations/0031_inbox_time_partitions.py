"""The inbox and its attempts partitioned by the event's received time on PostgreSQL, one
partition a UTC day (docs/scaling.md, "Time partitions of the inbox"). The rows already
stored become one partition each, attached as they are, without a copy: up to the next UTC
midnight after the newest row (``webhooks.partitions.table_partition``); the days after it
get their partitions here and, from then on, from the periodic work. Not atomic: the checks
and indexes that make the attach instant are built without blocking writes. The embedded
default (SQLite) keeps one table of each."""

from datetime import UTC, datetime, timedelta

from django.db import migrations

TABLES = (
    ("webhooks_inboxevent", "received_at"),
    ("webhooks_inboxattempt", "event_received_at"),
)


def _cutover(schema_editor) -> datetime:
    newest = datetime.now(UTC)
    with schema_editor.connection.cursor() as cursor:
        for table, key in TABLES:
            cursor.execute(f"SELECT MAX({key}) FROM {table}")  # noqa: S608
            found = cursor.fetchone()[0]
            if found is not None and found > newest:
                newest = found
    day = newest.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day + timedelta(days=1)


def partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from webhooks.partitions import inbox_partitions_ensure, table_partition

    cutover = _cutover(schema_editor)
    for table, key in TABLES:
        table_partition(table, key, cutover=cutover)
    inbox_partitions_ensure()


def unpartition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from webhooks.partitions import table_unpartition

    for table, _ in TABLES:
        table_unpartition(table)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("webhooks", "0030_attempts_event_received_at"),
        ("research", "0003_revision_event_without_constraint"),
    ]

    operations = [migrations.RunPython(partition, unpartition)]
