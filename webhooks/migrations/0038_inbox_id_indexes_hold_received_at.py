"""The inbox's two id indexes (``webhooks_inbox_event_id_like``, ``webhooks_inbox_entity_like``)
hold each row's received time as a covering column: the console's search reads the first and
last received time of the rows it finds from the index alone, with no visit to a row, and
bounds its page's statements by them (docs/scaling.md, "A search reads the days of the rows
it finds"). About 8 bytes more an index entry.

PostgreSQL, online: each index is built again beside the old one, on every time partition
with ``CREATE INDEX CONCURRENTLY`` (ingest goes on; each waits only for the transactions
that were running when it began) and attached to a new partitioned index made ``ON ONLY`` the
inbox; then the old index is dropped (the inbox's lock for a moment, as 0035's drop) and the
new one takes its name. A partition created meanwhile gets the new index with the table. A
run that stopped is run again from where it was: an index made is left as it is, what was
built of one is kept, a build left invalid is made again. SQLite has no covering columns: its indexes stay as they are. Reversed, the
same steps without the received time."""

from django.db import migrations, models

TABLE = "webhooks_inboxevent"
INDEXES = {
    "webhooks_inbox_event_id_like": "event_id",
    "webhooks_inbox_entity_like": "entity_id",
}


def _fetch(schema_editor, sql: str, params: list) -> list[tuple]:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _valid(schema_editor, name: str) -> bool | None:
    """Whether the index ``name`` is valid; None when there is none."""
    rows = _fetch(
        schema_editor,
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE c.relname = %s",
        [name],
    )
    return rows[0][0] if rows else None


def _attached(schema_editor, index: str, parent: str) -> bool:
    return bool(
        _fetch(
            schema_editor,
            "SELECT 1 FROM pg_inherits WHERE inhrelid = %s::regclass"
            " AND inhparent = %s::regclass",
            [index, parent],
        )
    )


def _partition_index(partition: str, column: str, covering: bool) -> str:
    """A partition's copy, named by its form: built again the other way, the new copies
    never take the name of those the old partitioned index still holds."""
    return f"{partition}_{column}_{'cover' if covering else 'plain'}"


def _rebuild(schema_editor, *, covering: bool) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    execute = schema_editor.execute
    include = " INCLUDE (received_at)" if covering else ""
    partitioned = bool(
        _fetch(
            schema_editor,
            "SELECT 1 FROM pg_partitioned_table WHERE partrelid = %s::regclass",
            [TABLE],
        )
    )
    partitions = [
        row[0]
        for row in _fetch(
            schema_editor,
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = %s::regclass ORDER BY c.relname",
            [TABLE],
        )
    ]
    for name, column in INDEXES.items():
        building = f"{name}_next"
        [(made, under_way)] = _fetch(
            schema_editor,
            "SELECT pg_get_indexdef(to_regclass(%s)), to_regclass(%s) IS NOT NULL",
            [name, building],
        )
        done = made is not None and ("INCLUDE (received_at)" in made) == covering
        if done and not under_way:
            continue  # made already, by a run that stopped at the next one
        definition = f"({column} varchar_pattern_ops){include}"
        if _valid(schema_editor, building) is False and not partitioned:
            execute(f'DROP INDEX CONCURRENTLY "{building}"')
        if partitioned:
            execute(
                f'CREATE INDEX IF NOT EXISTS "{building}" ON ONLY "{TABLE}" {definition}'
            )
            for partition in partitions:
                index = _partition_index(partition, column, covering)
                if _valid(schema_editor, index) is False:
                    execute(f'DROP INDEX CONCURRENTLY "{index}"')
                execute(
                    f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{index}"'
                    f' ON "{partition}" {definition}'
                )
                if not _attached(schema_editor, index, building):
                    execute(f'ALTER INDEX "{building}" ATTACH PARTITION "{index}"')
            execute(f'DROP INDEX IF EXISTS "{name}"')
        else:
            execute(
                f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{building}"'
                f' ON "{TABLE}" {definition}'
            )
            execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
        execute(f'ALTER INDEX "{building}" RENAME TO "{name}"')
        first = f"{TABLE}_p0"
        if first in partitions:
            # The name 0031 gave the first partition's copy, which its reverse renames back
            # to the table's own when the table stops being partitioned.
            execute(
                f'ALTER INDEX "{_partition_index(first, column, covering)}"'
                f' RENAME TO "{name}_p0"'
            )


def covering_build(apps, schema_editor):
    _rebuild(schema_editor, covering=True)


def covering_remove(apps, schema_editor):
    _rebuild(schema_editor, covering=False)


def _index(name: str, column: str, *, covering: bool) -> models.Index:
    return models.Index(
        fields=[column],
        name=name,
        opclasses=["varchar_pattern_ops"],
        include=["received_at"] if covering else None,
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("webhooks", "0037_inbox_key_content_digest"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                operation
                for name, column in INDEXES.items()
                for operation in (
                    migrations.RemoveIndex(model_name="inboxevent", name=name),
                    migrations.AddIndex(
                        model_name="inboxevent",
                        index=_index(name, column, covering=True),
                    ),
                )
            ],
            database_operations=[
                migrations.RunPython(covering_build, covering_remove),
            ],
        ),
    ]
