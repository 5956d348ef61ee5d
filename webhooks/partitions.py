"""Time partitions of the inbox and its attempts on PostgreSQL (docs/scaling.md, "Time
partitions of the inbox").

Both tables are partitioned by range of the event's received time (``received_at``, and an
attempt's ``event_received_at``), one partition per UTC day or week
(INBOX_PARTITION_DAYS), so that an event and its attempts are stored, and leave, together.
Partitions are created ahead of time by the periodic work (``inbox_partitions_ensure``),
never on the request path, and there is no DEFAULT partition: a row whose day has no
partition is refused, which the
``webhook_inbox_partitions_ahead_days`` gauge and its alert make sure never happens. The
rows an inbox held before it was partitioned stay in one partition of their own (``..._p0``,
from MINVALUE), attached as it was, without a copy.

A new partition is created as a table of its own and then attached: attaching takes a lock
that ingest, processing and the console's reads go on past (SHARE UPDATE EXCLUSIVE on the
parent), where ``CREATE TABLE ... PARTITION OF`` would wait for, and hold up, all of them.

The embedded default (SQLite) keeps one table of each: nothing here runs there."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, ProgrammingError, connection, transaction
from django.utils import timezone

from .models import InboxAttempt, InboxEvent
from .statements import (
    day_start,
    instant_sql,
    key_final_status_sql,
    partition_held_sources_sql,
    partition_holds_sql,
    partition_rows_move_sql,
    partition_sizes_sql,
)

logger = logging.getLogger(__name__)

DAY = timedelta(days=1)
# Weeks start on Mondays: 1970-01-05 was one.
_WEEKS_FROM = datetime(1970, 1, 5, tzinfo=UTC)
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
            f" {_bounds_sql(start, end)}"
        )
        # Its end, for a retention run that finds it detached by one that stopped
        # (``_bounds_of_name``): a detached table keeps no bound.
        cursor.execute(f"COMMENT ON TABLE {quote(name)} IS '{_UNTIL}{end.isoformat()}'")
    return name


def period_start(instant: datetime) -> datetime:
    """The start of the partition period (INBOX_PARTITION_DAYS: a UTC day, or a week from
    Monday) that holds ``instant``."""
    day = day_start(instant)
    return day - ((day - _WEEKS_FROM).days % settings.INBOX_PARTITION_DAYS) * DAY


def _periods(start: datetime, end: datetime) -> Iterator[tuple[datetime, datetime]]:
    """The partitions' bounds from ``start`` until one reaches ``end``: each to the end of
    its period, so that the first one after a change of INBOX_PARTITION_DAYS (or after the
    migration's first partition) is short and the others whole periods."""
    while start < end:
        stop = period_start(start) + settings.INBOX_PARTITION_DAYS * DAY
        yield start, stop
        start = stop


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
        start = newest.end if newest else period_start(now)
        for first, end in _periods(start, goal):
            try:
                created.append(partition_create(table, first, end, like=newest))
            except DatabaseError:
                if partition_name(table, first) in {p.name for p in partitions(table)}:
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


# --- retention ------------------------------------------------------------------------------

# Why a partition past the horizon is kept (``partition_holds``), in the order checked.
HOLD_REASONS = ("unfinished", "open_evidence", "paused_source", "bulk_replay")


@dataclass(frozen=True)
class Retirement:
    dropped: list[str]
    held: dict[str, list[str]]  # partition -> reasons
    # Each dropped partition's steps, in seconds (``DropTimes``).
    times: dict[str, DropTimes] = field(default_factory=dict)


@dataclass(frozen=True)
class DropTimes:
    """How long each step of one partition's retention took: ``detach`` (both partitions
    detached concurrently and checked again: the steps that touch the live inbox),
    ``evidence`` (counted, the statuses of the rows not ``processed`` onto their keys, the
    operator action), ``drop`` (both tables dropped and the transaction committed: the
    files removed). ``detach`` is 0 for a partition a stopped run had detached already."""

    detach: float
    evidence: float
    drop: float

    def as_log(self) -> dict[str, float]:
        return {
            "detach_seconds": round(self.detach, 3),
            "evidence_seconds": round(self.evidence, 3),
            "drop_seconds": round(self.drop, 3),
        }


def retention_horizon(*, now: datetime | None = None) -> datetime | None:
    """The instant before which a day of the inbox has ended its retention: today's start
    less INBOX_RETENTION_DAYS (None when the setting is unset: every day is kept)."""
    days = settings.INBOX_RETENTION_DAYS
    if days is None:
        return None
    return day_start(now or timezone.now()) - days * DAY


def _past_retention(horizon: datetime) -> list[tuple[str, Partition | None]]:
    """The days retention is to drop: those a run that stopped left detached (no
    ``Partition``: attached nowhere), then the attached ones that ended by ``horizon``."""
    return [(name, None) for name in _detached(INBOX)] + [
        (p.name, p) for p in partitions(INBOX) if p.end <= horizon
    ]


def partition_holds(name: str) -> list[str]:
    """What keeps the inbox partition ``name`` (attached or detached) from being dropped:
    a row not finished (received, processing, failed), evidence of a conflict under
    investigation naming one of its rows, a row of a paused or draining source, or a
    dead-lettered row while a bulk replay job is live. Empty: nothing."""
    with connection.cursor() as cursor:
        cursor.execute(partition_holds_sql(partition=name))
        found = cursor.fetchone()
    return [reason for reason, held in zip(HOLD_REASONS, found, strict=True) if held]


def _suffix(partition: str, table: PartitionedTable) -> str:
    return partition.removeprefix(table.table)


def _detached(table: PartitionedTable) -> list[str]:
    """Partitions of ``table`` a retention run detached and did not drop (it stopped on
    the way): tables of a partition's name attached nowhere."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class c"
            " WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace"
            "   AND c.relname ~ %s AND NOT c.relispartition ORDER BY c.relname",
            [f"^{re.escape(table.table)}_p(0|[0-9]{{8}})$"],
        )
        return [row[0] for row in cursor.fetchall()]


def _detach(table: PartitionedTable, name: str) -> None:
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = to_regclass(%s)",
            [name],
        )
        row = cursor.fetchone()
        if row is None:
            return  # detached already
        # CONCURRENTLY: ingest and processing go on (it cannot run in a transaction block,
        # as in the tests, where the plain form runs); a detach interrupted half-way is
        # finished.
        how = (
            "FINALIZE"
            if row[0]
            else ("" if connection.in_atomic_block else "CONCURRENTLY")
        )
        cursor.execute(
            f"ALTER TABLE {quote(table.table)} DETACH PARTITION {quote(name)} {how}"
        )


def _attach_again(table: PartitionedTable, name: str, bounds: str) -> None:
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {quote(table.table)} ATTACH PARTITION {quote(name)} {bounds}"
        )


def _partition_drop(
    *, events: str, attempts: str, start, end, actor
) -> tuple[float, float]:
    """One day of the inbox, detached already, dropped: in one transaction, the statuses of
    its rows that were not ``processed`` onto their keys, the operator action that names what
    left (the audit app logs it, in this transaction), and both tables dropped. Returns the
    seconds of the evidence and of the drop with the commit (``DropTimes``)."""
    from trail.models import OperatorAction
    from trail.services import operator_action_record

    quote = connection.ops.quote_name
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        # Checks still deferred in an enclosing transaction would refuse the drops.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(
            f"SELECT count(*), min(id), max(id) FROM {quote(events)}"  # noqa: S608
        )
        count, first_id, last_id = cursor.fetchone()
        attempt_count = 0
        if attempts:
            cursor.execute(f"SELECT count(*) FROM {quote(attempts)}")  # noqa: S608
            attempt_count = cursor.fetchone()[0]
        cursor.execute(key_final_status_sql(partition=events))
        operator_action_record(
            action=OperatorAction.Action.DROP_INBOX_PARTITION,
            actor=actor,
            reason=f"retention: events received before {end.isoformat()}",
            event_count=count,
            details={
                "events_partition": events,
                "attempts_partition": attempts,
                "start": start.isoformat() if start else None,
                "end": end.isoformat(),
                "events": count,
                "attempts": attempt_count,
                "first_event_id": first_id,
                "last_event_id": last_id,
            },
        )
        evidence = time.perf_counter()
        cursor.execute(f"DROP TABLE {quote(events)}")
        if attempts:
            cursor.execute(f"DROP TABLE {quote(attempts)}")
    return evidence - started, time.perf_counter() - evidence


def inbox_partitions_retire(*, now: datetime | None = None, actor=None) -> Retirement:
    """Drops each day of the inbox that ended INBOX_RETENTION_DAYS or more before today's
    start (docs/scaling.md, "Retention by dropping a partition"): its partition of the
    inbox and its attempts' are detached (CONCURRENTLY: ingest goes on), checked for what
    holds them (``partition_holds``; attached again when anything does), then dropped with
    the operator action that names what left. A day held back stays until nothing holds it,
    and is named in the result and the log. Never a DELETE. Nothing when the setting is
    unset or the tables are not partitioned (SQLite)."""
    from core.actors import Actor

    dropped: list[str] = []
    held: dict[str, list[str]] = {}
    times: dict[str, DropTimes] = {}
    horizon = retention_horizon(now=now)
    if horizon is None or not is_partitioned(INBOX):
        return Retirement(dropped, held)
    actor = actor or Actor.system()
    # A run that stopped between its detach and its drop left tables behind: finish them.
    waiting = _past_retention(horizon)
    for name, partition in waiting:
        reasons = partition_holds(name)
        if reasons:
            held[name] = reasons
            logger.warning(
                "inbox.partition_held", extra={"partition": name, "reasons": reasons}
            )
            if partition is None:
                # Detached by a run that stopped, and held since: back in the inbox.
                _attach_again(INBOX, name, _bounds_of_detached(name))
            continue
        attempts = ATTEMPTS.table + _suffix(name, INBOX)
        detach_started = time.perf_counter()
        if partition is None:
            start, end = _bounds_of_name(name)
        else:
            start, end = partition.start, partition.end
            bounds = _bounds_sql(start, end)
            if _exists(attempts):
                _detach(ATTEMPTS, attempts)
            _detach(INBOX, name)
            # Nothing reaches it now: what holds it is checked once more, for good.
            reasons = partition_holds(name)
            if reasons:
                held[name] = reasons
                _attach_again(INBOX, name, bounds)
                if _exists(attempts):
                    _attach_again(ATTEMPTS, attempts, bounds)
                continue
        detach = 0.0 if partition is None else time.perf_counter() - detach_started
        evidence, drop = _partition_drop(
            events=name,
            attempts=attempts if _exists(attempts) else "",
            start=start,
            end=end,
            actor=actor,
        )
        dropped.append(name)
        times[name] = DropTimes(detach=detach, evidence=evidence, drop=drop)
        logger.info(
            "inbox.partition_dropped",
            extra={"partition": name, **times[name].as_log()},
        )
    return Retirement(dropped, held, times)


def _exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return cursor.fetchone()[0]


_UNTIL = "inbox partition until "


def _bounds_of_name(name: str) -> tuple[datetime | None, datetime]:
    """The times a detached partition held: its start from its name (``..._pYYYYMMDD``),
    its end from the comment it was created with (a day after its start when it has none);
    the first partition's (``..._p0``) from its bound check."""
    day = name.rsplit("_p", 1)[1]
    if day != "0":
        start = datetime.strptime(day, "%Y%m%d").replace(tzinfo=UTC)
        with connection.cursor() as cursor:
            cursor.execute("SELECT obj_description(%s::regclass, 'pg_class')", [name])
            comment = cursor.fetchone()[0] or ""
        if comment.startswith(_UNTIL):
            return start, datetime.fromisoformat(comment.removeprefix(_UNTIL))
        return start, start + DAY
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = %s::regclass AND conname = %s",
            [name, f"{name}_bound"],
        )
        definition = cursor.fetchone()[0]
    literal = re.search(r"< '([^']+)'", definition)
    assert literal is not None, definition
    end = _instant(literal[1])
    assert end is not None
    return None, end


def _bounds_of_detached(name: str) -> str:
    return _bounds_sql(*_bounds_of_name(name))


def _bounds_sql(start: datetime | None, end: datetime) -> str:
    """A partition's bound as ``ATTACH PARTITION`` takes it."""
    low = instant_sql(start) if start else "MINVALUE"
    return f"FOR VALUES FROM ({low}) TO ({instant_sql(end)})"


def oldest_partition_overdue_days(*, now: datetime | None = None) -> float:
    """How many days past its retention the oldest inbox partition is (0 when none is, or
    retention is unset): retention that silently does nothing shows here."""
    horizon = retention_horizon(now=now)
    found = partitions(INBOX) if horizon is not None else []
    if horizon is None or not found:
        return 0.0
    return max((horizon - found[0].end).total_seconds() / 86400, 0.0)


# --- what retention holds back, for the console and the metrics -----------------------------


@dataclass(frozen=True)
class PartitionRetention:
    """One day of the inbox as retention sees it (``inbox_partitions_retention``)."""

    name: str
    attempts: str  # its attempts' partition, "" when there is none
    start: datetime | None  # None: from MINVALUE (the rows stored before partitioning)
    end: datetime
    detached: bool  # left detached by a retention run that stopped before its drop
    rows: int | None  # estimated from the catalog; None until the table is analysed
    size: int  # bytes, with its indexes and TOAST
    attempt_rows: int | None
    attempt_size: int
    due: datetime | None  # from when retention drops it; None: retention is unset
    past_retention: bool
    holds: tuple[str, ...]  # of HOLD_REASONS, checked only past retention


def _holds_now(name: str) -> tuple[str, ...] | None:
    """``partition_holds``, or None when the partition left meanwhile (a retention run
    dropped it between the listing and the probe)."""
    try:
        with transaction.atomic():
            return tuple(partition_holds(name))
    except ProgrammingError:
        if _exists(name):
            raise
        return None


def partition_held_sources(name: str) -> list[tuple[int, str]]:
    """The paused or draining sources (id, slug) with a row in the inbox partition
    ``name``: who the ``paused_source`` hold is."""
    with connection.cursor() as cursor:
        cursor.execute(partition_held_sources_sql(partition=name))
        return [(pk, slug) for pk, slug in cursor.fetchall()]


def _sizes(names: list[str]) -> dict[str, tuple[int | None, int]]:
    """Of the named tables that exist, each one's estimated rows and size."""
    with connection.cursor() as cursor:
        cursor.execute(partition_sizes_sql(), [names])
        found = cursor.fetchall()
    return {
        name: (None if rows < 0 else int(rows), size)
        for name, rows, size in found
        if size is not None
    }


def inbox_partitions_retention(
    *, now: datetime | None = None
) -> list[PartitionRetention]:
    """Every day of the inbox in time order, its partitions' estimated rows and sizes read
    from the catalog (no row is counted), when retention drops it, and for each day past
    retention what holds it back (``partition_holds``: a few index probes a day). A
    partition a stopped run left detached is listed too. Empty when the inbox is not
    partitioned (SQLite)."""
    if not is_partitioned(INBOX):
        return []
    days = settings.INBOX_RETENTION_DAYS
    horizon = retention_horizon(now=now)
    found: list[tuple[str, datetime | None, datetime, bool]] = [
        (p.name, p.start, p.end, False) for p in partitions(INBOX)
    ]
    for name in _detached(INBOX):
        start, end = _bounds_of_name(name)
        found.append((name, start, end, True))
    found.sort(key=lambda day: day[2])
    attempts = {name: ATTEMPTS.table + _suffix(name, INBOX) for name, *_ in found}
    sizes = _sizes([*attempts, *attempts.values()])
    listed = []
    for name, start, end, detached in found:
        if name not in sizes:
            continue  # dropped since it was listed
        past = horizon is not None and (detached or end <= horizon)
        holds: tuple[str, ...] = ()
        if past:
            found_holds = _holds_now(name)
            if found_holds is None:
                continue
            holds = found_holds
        rows, size = sizes[name]
        attempt_rows, attempt_size = sizes.get(attempts[name], (None, 0))
        listed.append(
            PartitionRetention(
                name=name,
                attempts=attempts[name] if attempts[name] in sizes else "",
                start=start,
                end=end,
                detached=detached,
                rows=rows,
                size=size,
                attempt_rows=attempt_rows,
                attempt_size=attempt_size,
                due=None if days is None else end + days * DAY,
                past_retention=past,
                holds=holds,
            )
        )
    return listed


def days_past_retention(*, now: datetime | None = None) -> int | None:
    """How many days of the inbox are kept past retention (held back, or waiting for the
    next hourly run), from the catalog alone; None when retention is unset or the inbox is
    not partitioned (SQLite)."""
    horizon = retention_horizon(now=now)
    if horizon is None or not is_partitioned(INBOX):
        return None
    return len(_past_retention(horizon))


def retention_held_days(*, now: datetime | None = None) -> dict[str, int]:
    """How many days past retention each reason holds back (a day that two hold counts
    under both); every reason 0 when retention is unset or the inbox is not partitioned."""
    held = dict.fromkeys(HOLD_REASONS, 0)
    horizon = retention_horizon(now=now)
    if horizon is None or not is_partitioned(INBOX):
        return held
    for name, _ in _past_retention(horizon):
        for reason in _holds_now(name) or ():
            held[reason] += 1
    return held


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
    The ids go on from the same sequence value.

    Run again after a run that stopped (its swap's lock not taken in time), it starts over:
    the bound and the index that run left are made again, with this run's ``cutover``; a
    table partitioned already is left as it is."""
    quote = connection.ops.quote_name
    legacy = f"{table}_p0"
    bound = f"{legacy}_bound"
    key_index = f"{legacy}_key"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [table]
        )
        if cursor.fetchone()[0] == "p":
            return
        cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(key_index)}")
    # Adding a check takes the table's strongest lock, for an instant: bounded as the swap's.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor.execute(
            f"ALTER TABLE {quote(table)} DROP CONSTRAINT IF EXISTS {quote(bound)}"
        )
        cursor.execute(
            f"ALTER TABLE {quote(table)} ADD CONSTRAINT {quote(bound)}"
            f" CHECK ({quote(key)} IS NOT NULL AND {quote(key)} < {instant_sql(cutover)})"
            " NOT VALID"
        )
    with connection.cursor() as cursor:
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
            f" FOR VALUES FROM (MINVALUE) TO ({instant_sql(cutover)})"
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
