"""Time partitions of the inbox and its attempts on PostgreSQL (docs/scaling.md, "Time
partitions of the inbox").

Both tables are partitioned by range of the event's received time (``received_at``, and an
attempt's ``event_received_at``), one partition per UTC day, so that an event and its
attempts are stored, and leave, together. Partitions are created ahead of time by the
periodic work (``inbox_partitions_ensure``), never on the request path, and there is no
DEFAULT partition: a row whose day has no partition is refused, which the
``webhook_inbox_partitions_ahead_days`` gauge and its alert make sure never happens. The
rows an inbox held before it was partitioned stay in one partition of their own (``..._p0``,
from MINVALUE), attached as it was, without a copy.

A new partition is created as a table of its own and then attached: attaching takes a lock
that ingest, processing and the console's reads go on past (SHARE UPDATE EXCLUSIVE on the
parent), where ``CREATE TABLE ... PARTITION OF`` would wait for, and hold up, all of them.

The embedded default (SQLite) keeps one table of each: nothing here runs there."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from .models import InboxAttempt, InboxEvent
from .statements import partition_rows_move_sql

DAY = timedelta(days=1)
# How long creating or attaching a partition waits for its lock before it gives up (and the
# next run tries again), so that it never queues ingest behind a long read of the inbox.
LOCK_TIMEOUT = "5s"


@dataclass(frozen=True)
class PartitionedTable:
    table: str
    key: str


INBOX = PartitionedTable(InboxEvent._meta.db_table, "received_at")
ATTEMPTS = PartitionedTable(InboxAttempt._meta.db_table, "event_received_at")
TABLES = (INBOX, ATTEMPTS)


@dataclass(frozen=True)
class Partition:
    name: str
    start: datetime | None  # None: from MINVALUE (the rows stored before partitioning)
    end: datetime


def partition_name(table: PartitionedTable, start: datetime) -> str:
    return f"{table.table}_p{start:%Y%m%d}"


def _sql_instant(instant: datetime) -> str:
    """An instant written into DDL, which takes no bound parameters."""
    return f"'{instant.astimezone(UTC).isoformat()}'::timestamptz"


def day_start(instant: datetime) -> datetime:
    return instant.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def is_partitioned(table: PartitionedTable) -> bool:
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [table.table]
        )
        row = cursor.fetchone()
    return row is not None and row[0] == "p"


_BOUND = re.compile(r"FOR VALUES FROM \((?P<start>[^)]*)\) TO \((?P<end>[^)]*)\)")


def _instant(literal: str) -> datetime | None:
    if literal == "MINVALUE":
        return None
    text = literal.strip("'")
    if re.search(r"[+-]\d\d$", text):
        text += ":00"
    return datetime.fromisoformat(text).astimezone(UTC)


def partitions(table: PartitionedTable) -> list[Partition]:
    """The table's partitions in time order (none when it is not partitioned)."""
    if not is_partitioned(table):
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)"
            "  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = %s::regclass",
            [table.table],
        )
        rows = cursor.fetchall()
    found = []
    for name, bound in rows:
        match = _BOUND.search(bound or "")
        if match is None:  # a DEFAULT partition, which the product never creates
            continue
        end = _instant(match["end"])
        assert end is not None
        found.append(Partition(name=name, start=_instant(match["start"]), end=end))
    return sorted(found, key=lambda p: p.end)


def _storage_options(table: PartitionedTable, newest: Partition | None) -> str:
    """The storage parameters of the newest partition (autovacuum, fillfactor: migrations
    0020 and 0021 set them on the table that became the first partition), for the next."""
    if newest is None:
        return ""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reloptions FROM pg_class WHERE oid = to_regclass(%s)", [newest.name]
        )
        row = cursor.fetchone()
    options = row[0] if row else None
    return f" WITH ({', '.join(options)})" if options else ""


def partition_create(
    table: PartitionedTable, start: datetime, end: datetime, *, like: Partition | None
) -> str:
    """One partition ``[start, end)`` of ``table``: created as a table of its own with the
    parent's columns, defaults and checks and ``like``'s storage parameters, then attached
    (its indexes are built as it is attached, on an empty table)."""
    name = partition_name(table, start)
    quote = connection.ops.quote_name
    options = _storage_options(table, like)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor.execute(
            f"CREATE TABLE {quote(name)} (LIKE {quote(table.table)}"
            f" INCLUDING DEFAULTS INCLUDING CONSTRAINTS){options}"
        )
        cursor.execute(
            f"ALTER TABLE {quote(table.table)} ATTACH PARTITION {quote(name)}"
            f" FOR VALUES FROM ({_sql_instant(start)}) TO ({_sql_instant(end)})"
        )
    return name


def _days(start: datetime, end: datetime) -> Iterator[datetime]:
    day = start
    while day < end:
        yield day
        day += DAY


def inbox_partitions_ensure(
    *, now: datetime | None = None, ahead_days: int | None = None
) -> list[str]:
    """Creates the partitions of both tables that are missing from the end of the last one
    (or today) up to ``ahead_days`` (INBOX_PARTITIONS_AHEAD_DAYS) after today, in UTC days;
    returns their names. Idempotent, and safe to run from several processes at once (a
    partition another run created meanwhile is skipped). Nothing when the tables are not
    partitioned (SQLite)."""
    now = now or timezone.now()
    ahead = settings.INBOX_PARTITIONS_AHEAD_DAYS if ahead_days is None else ahead_days
    goal = day_start(now) + (ahead + 1) * DAY
    created = []
    for table in TABLES:
        if not is_partitioned(table):
            continue
        existing = partitions(table)
        newest = existing[-1] if existing else None
        start = newest.end if newest else day_start(now)
        for day in _days(start, goal):
            try:
                created.append(partition_create(table, day, day + DAY, like=newest))
            except DatabaseError:
                if partition_name(table, day) in {p.name for p in partitions(table)}:
                    continue  # another run created it
                raise
    return created


def partitions_ahead_days(
    table: PartitionedTable, *, now: datetime | None = None
) -> float:
    """How many days after ``now`` the table's partitions reach (0 when they do not reach
    ``now``; none when it is not partitioned: ``inf``)."""
    found = partitions(table)
    if not found:
        return float("inf")
    now = now or timezone.now()
    return max((found[-1].end - now).total_seconds() / 86400, 0.0)


# --- partitioning an existing table (migration 0031) -----------------------------------------


def _legacy_index_name(name: str) -> str:
    assert len(name) <= 60, name
    return f"{name}_p0"


def table_partition(table: str, key: str, *, cutover: datetime) -> None:
    """Turns ``table`` into a table partitioned by range of ``key``, its rows becoming, as they
    are, the partition ``<table>_p0`` from MINVALUE to ``cutover`` (docs/scaling.md,
    "Partitioning an existing inbox"). In autocommit. The long steps leave writes going: the
    partition's bound is checked (``VALIDATE CONSTRAINT``) and the key's unique index built
    (``CONCURRENTLY``) first; then one short transaction renames the table, creates the
    partitioned one with its indexes, keys and checks, and attaches the old table, whose
    indexes match and whose bound is proven: no copy, no scan, no index built under the lock.
    The ids go on from the same sequence value."""
    quote = connection.ops.quote_name
    legacy = f"{table}_p0"
    bound = f"{legacy}_bound"
    key_index = f"{legacy}_key"
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {quote(table)} ADD CONSTRAINT {quote(bound)}"
            f" CHECK ({quote(key)} IS NOT NULL AND {quote(key)} < {_sql_instant(cutover)})"
            " NOT VALID"
        )
        cursor.execute(f"ALTER TABLE {quote(table)} VALIDATE CONSTRAINT {quote(bound)}")
        cursor.execute(
            f"CREATE UNIQUE INDEX CONCURRENTLY {quote(key_index)}"
            f" ON {quote(table)} (id, {quote(key)})"
        )
        cursor.execute(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid)"
            "  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = %s::regclass AND NOT i.indisprimary"
            "   AND c.relname <> %s ORDER BY c.relname",
            [table, key_index],
        )
        indexes = cursor.fetchall()
        cursor.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = %s::regclass AND contype = 'f' ORDER BY conname",
            [table],
        )
        foreign_keys = cursor.fetchall()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor.execute(f"LOCK TABLE {quote(table)} IN ACCESS EXCLUSIVE MODE")
        cursor.execute(
            f"SELECT COALESCE(MAX(id), 0) FROM {quote(table)}"  # noqa: S608
        )
        next_id = cursor.fetchone()[0] + 1
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
        sequence = cursor.fetchone()[0]
        if sequence is not None:
            cursor.execute(f"SELECT last_value, is_called FROM {sequence}")  # noqa: S608
            last, called = cursor.fetchone()
            next_id = max(next_id, last + 1 if called else last)
        cursor.execute(
            f"ALTER TABLE {quote(table)} ALTER COLUMN id DROP IDENTITY IF EXISTS"
        )
        cursor.execute(f"ALTER TABLE {quote(table)} ALTER COLUMN id DROP DEFAULT")
        if sequence is not None:
            cursor.execute(f"DROP SEQUENCE IF EXISTS {sequence}")
        cursor.execute(f"ALTER TABLE {quote(table)} RENAME TO {quote(legacy)}")
        # Its key becomes the parent's, (id, key), on the unique index built already.
        cursor.execute(
            f"ALTER TABLE {quote(legacy)} DROP CONSTRAINT {quote(table + '_pkey')}"
        )
        cursor.execute(
            f"ALTER TABLE {quote(legacy)} ADD CONSTRAINT {quote(key_index)}"
            f" PRIMARY KEY USING INDEX {quote(key_index)}"
        )
        for name, _ in indexes:
            cursor.execute(
                f"ALTER INDEX {quote(name)} RENAME TO {quote(_legacy_index_name(name))}"
            )
        sequence = quote(f"{table}_id_seq")
        cursor.execute(f"CREATE SEQUENCE {sequence} START {int(next_id)}")
        cursor.execute(
            f"CREATE TABLE {quote(table)} (LIKE {quote(legacy)}"
            " INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
            f" PARTITION BY RANGE ({quote(key)})"
        )
        cursor.execute(f"ALTER TABLE {quote(table)} DROP CONSTRAINT {quote(bound)}")
        cursor.execute(
            f"ALTER TABLE {quote(table)} ALTER COLUMN id"
            f" SET DEFAULT nextval('{sequence}'::regclass)"
        )
        cursor.execute(f"ALTER SEQUENCE {sequence} OWNED BY {quote(table)}.id")
        cursor.execute(
            f"ALTER TABLE {quote(table)} ADD CONSTRAINT {quote(table + '_pkey')}"
            f" PRIMARY KEY (id, {quote(key)})"
        )
        for _, definition in indexes:
            cursor.execute(definition)
        for name, definition in foreign_keys:
            cursor.execute(
                f"ALTER TABLE {quote(table)} ADD CONSTRAINT {quote(name)} {definition}"
            )
        cursor.execute(
            f"ALTER TABLE {quote(table)} ATTACH PARTITION {quote(legacy)}"
            f" FOR VALUES FROM (MINVALUE) TO ({_sql_instant(cutover)})"
        )


def table_unpartition(table: str) -> None:
    """The reverse of ``table_partition``: every row back in the table it started as, with
    its identity column (migrating back, as the migration tests do)."""
    quote = connection.ops.quote_name
    legacy = f"{table}_p0"
    with transaction.atomic(), connection.cursor() as cursor:
        # The rows moved are checked at once: a deferred check still pending would refuse
        # the ALTER TABLEs that follow.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = %s::regclass AND c.relname <> %s",
            [table, legacy],
        )
        others = [row[0] for row in cursor.fetchall()]
        cursor.execute(f"SELECT nextval('{quote(table + '_id_seq')}')")
        next_id = cursor.fetchone()[0]
        cursor.execute(f"ALTER TABLE {quote(table)} DETACH PARTITION {quote(legacy)}")
        cursor.execute(
            f"ALTER TABLE {quote(legacy)} DROP CONSTRAINT {quote(legacy + '_bound')}"
        )
        for name in others:
            cursor.execute(partition_rows_move_sql(into=legacy, source=name))
        cursor.execute(f"DROP TABLE {quote(table)}")
        cursor.execute(f"ALTER TABLE {quote(legacy)} RENAME TO {quote(table)}")
        cursor.execute(
            f"ALTER TABLE {quote(table)} DROP CONSTRAINT {quote(legacy + '_key')}"
        )
        cursor.execute(
            f"ALTER TABLE {quote(table)} ADD CONSTRAINT {quote(table + '_pkey')}"
            " PRIMARY KEY (id)"
        )
        cursor.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = %s::regclass AND c.relname LIKE %s",
            [table, "%\\_p0"],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f"ALTER INDEX {quote(name)} RENAME TO {quote(name[:-3])}")
        cursor.execute(
            f"ALTER TABLE {quote(table)} ALTER COLUMN id ADD GENERATED BY DEFAULT"
            f" AS IDENTITY (START WITH {int(next_id)})"
        )
