"""Time partitions of the inbox and its attempts on PostgreSQL (docs/scaling.md, "Time
partitions of the inbox"): one per UTC day, created ahead by the periodic work, no DEFAULT
partition, an event and its attempts in the same day's, deduplication across days."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.core import Metric

from core.relay.loop import Relay
from tests import processes
from tests.broker import broker_reset, queued_inbox_event_ids
from tests.integrations.research.factories import research_event
from tests.plans import (
    explained,
    generic_plan_rows_read,
    partitions_planned,
    plan_nodes,
    rows_read,
)
from tests.webhooks.factories import (
    RESEARCH_SOURCE,
    InboxAttemptFactory,
    InboxEventFactory,
    inbox_events_bulk_create,
    research_source,
    signed_post,
)
from trail.models import OperatorAction
from webhooks import statements
from webhooks.metrics import InboxPartitionsCollector
from webhooks.models import FingerprintMismatch, InboxAttempt, InboxEvent, InboxKey
from webhooks.outbox import INBOX_OUTBOX, InboxOutbox
from webhooks.partitions import (
    ATTEMPTS,
    DAY,
    INBOX,
    TABLES,
    _bounds_of_name,
    day_start,
    inbox_partitions_ensure,
    inbox_partitions_retire,
    partition_name,
    partitions,
)
from webhooks.processing import inbox_events_process
from webhooks.selectors import inbox_events_attempts_alias, inbox_events_attempts_fill

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="SQLite keeps one table each"
    ),
]


def sql(statement: str, params=None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def partition_of(table: str, pk: int) -> str:
    [(name,)] = sql(
        f"SELECT tableoid::regclass::text FROM {table} WHERE id = %s",  # noqa: S608
        [pk],
    )
    return name


def partitions_drop_after(day) -> None:
    """The partitions of both tables from ``day`` on, gone (in the test's transaction)."""
    for table in TABLES:
        for partition in partitions(table):
            if partition.start is not None and partition.start >= day:
                sql(f"ALTER TABLE {table.table} DETACH PARTITION {partition.name}")
                sql(f"DROP TABLE {partition.name}")


def test_both_tables_are_partitioned_by_day_with_no_default_partition(settings):
    for table in TABLES:
        assert sql(
            "SELECT partstrat, partdefid FROM pg_partitioned_table"
            " WHERE partrelid = %s::regclass",
            [table.table],
        ) == [("r", 0)]
        found = partitions(table)
        # The rows stored before partitioning, then one partition a day.
        assert found[0].start is None
        for before, after in itertools.pairwise(found):
            assert after.start == before.end
        for partition in found[1:]:
            assert partition.end - partition.start == DAY
        assert (
            found[-1].end
            >= day_start(timezone.now())
            + (settings.INBOX_PARTITIONS_AHEAD_DAYS + 1) * DAY
        )


def test_ensure_creates_what_is_missing_once_with_the_tables_storage_settings():
    tomorrow = day_start(timezone.now()) + DAY
    partitions_drop_after(tomorrow + DAY)

    created = inbox_partitions_ensure(ahead_days=3)

    # Through the third day after today: the day after tomorrow and the next.
    expected_days = [tomorrow + DAY * n for n in (1, 2)]
    assert sorted(created) == sorted(
        partition_name(table, day) for table in TABLES for day in expected_days
    )
    assert inbox_partitions_ensure(ahead_days=3) == []  # idempotent
    [(options,)] = sql(
        "SELECT reloptions FROM pg_class WHERE oid = %s::regclass",
        [partition_name(INBOX, expected_days[-1])],
    )
    assert "fillfactor=85" in options  # the inbox's, as migration 0021 set it
    [(options,)] = sql(
        "SELECT reloptions FROM pg_class WHERE oid = %s::regclass",
        [partition_name(ATTEMPTS, expected_days[-1])],
    )
    assert "fillfactor=70" in options  # the attempts'


def test_an_event_and_its_attempts_are_stored_in_their_days_partition_across_midnight():
    midnight = day_start(timezone.now()) + 2 * DAY
    before = InboxEventFactory(received_at=midnight - timedelta(microseconds=1))
    after = InboxEventFactory(received_at=midnight)
    for event in (before, after):
        InboxAttemptFactory(event=event)

    assert partition_of(INBOX.table, before.pk) == partition_name(INBOX, midnight - DAY)
    assert partition_of(INBOX.table, after.pk) == partition_name(INBOX, midnight)
    for event, day in ((before, midnight - DAY), (after, midnight)):
        [(name,)] = sql(
            f"SELECT tableoid::regclass::text FROM {ATTEMPTS.table}"  # noqa: S608
            " WHERE event_id = %s",
            [event.pk],
        )
        assert name == partition_name(ATTEMPTS, day)


def test_a_duplicate_received_a_day_later_counts_on_the_row_in_its_first_days_partition(
    http, source
):
    """The first delivery stored in another day's partition (here tomorrow's: its received
    time as a row received then): a redelivery today is a duplicate counted on that row,
    and another body a 409 whose evidence names it."""
    body = research_event()
    tomorrow = day_start(timezone.now()) + DAY + timedelta(hours=1)
    first = InboxEventFactory(body=body, received_at=tomorrow)

    answer = signed_post(http, RESEARCH_SOURCE, body)

    assert answer.status_code == 200
    assert answer.json()["event_id"] == body["event_id"]
    row = InboxEvent.objects.get()
    assert (row.pk, row.delivery_count) == (first.pk, 2)
    assert InboxKey.objects.get().delivery_count == 2

    conflicting = body | {"data": {"summary": "rewritten"}}
    assert signed_post(http, RESEARCH_SOURCE, conflicting).status_code == 409
    assert FingerprintMismatch.objects.get().event_id == first.pk


@pytest.mark.parametrize(
    ("received", "statements"),
    [
        (timedelta(minutes=-5), 1),  # a retry minutes later
        (-DAY, 1),  # yesterday's: counted by the one statement
        (-2 * DAY, 2),  # before the days it counts in: one statement more
        (-40 * DAY, 2),  # weeks ago
        (DAY + timedelta(hours=1), 2),  # a clock ahead: tomorrow's row
    ],
    ids=["minutes", "yesterday", "two-days", "weeks", "tomorrow"],
)
def test_a_duplicate_is_counted_on_its_row_whenever_it_was_received(
    http, source, received, statements
):
    """The record statement counts a duplicate on its row among yesterday's and today's
    rows (``statements.recent_days``: a bound it plans with); a row received before or
    after those is counted by one statement more, by its id and received time."""
    body = research_event()
    first = InboxEventFactory(body=body, received_at=timezone.now() + received)
    before = timezone.now()

    with CaptureQueriesContext(connection) as queries:
        answer = signed_post(http, RESEARCH_SOURCE, body)

    assert answer.status_code == 200
    assert answer.json()["processing_status"] == first.processing_status
    row = InboxEvent.objects.get()
    assert (row.pk, row.delivery_count) == (first.pk, 2)
    assert row.last_seen_at >= before
    assert InboxKey.objects.get().delivery_count == 2
    writes = [q["sql"] for q in queries.captured_queries if "inbox" in q["sql"]]
    assert len(writes) == statements, writes


def _record(event_id: str, now, fingerprint: str = "f" * 64) -> tuple[str, list]:
    """The record statement of a delivery to the research source, and its values."""
    values = {
        "source_id": research_source().pk,
        "event_id": event_id,
        "body_key": None,
        "content_fingerprint": fingerprint,
        "received_at": now,
        "last_seen_at": now,
    }
    text = statements.inbox_record_sql(
        connection.vendor,
        on="event_id",
        given=tuple(values),
        days=statements.recent_days(now),
    )
    return text, statements.inbox_record_params(values)


def test_the_record_statement_plans_over_two_days_of_partitions_however_many_exist():
    """With a month of partitions ahead, the statement that records a delivery still
    names two days' partitions of the inbox, none other: the time its generic plan takes
    to start does not grow with the days the inbox holds."""
    inbox_partitions_ensure(ahead_days=30)
    now = timezone.now()
    text, params = _record("evt-plan", now)
    # Partitions, not their indexes (``..._p0_key``).
    named = partitions_planned(text, params, INBOX.table)
    current = {
        p.name
        for p in partitions(INBOX)
        if p.end > now - DAY and (p.start is None or p.start <= now)
    }
    assert len(partitions(INBOX)) > 30
    assert named and named <= current, named


def test_the_record_statements_generic_plan_made_on_an_empty_day_reads_no_row_of_it():
    """A connection prepares the record statement at its sixth run, and PostgreSQL may then
    keep a generic plan made without the values. Made on a day's partition still empty (the
    first deliveries after midnight, or after a deploy, before autovacuum analyses the
    day), that plan had walked every row of the day to count a duplicate, for a new event
    too: ingest slowed with each row the day gained, to half its rate within seconds
    (docs/bench-log/2026-12-07.md, "The record statement's plan made on an empty day").
    Here the plan is made on the empty day, the day filled, and the plan run for a new
    event and for a duplicate: each reads at most its own row of the inbox."""
    now = timezone.now()
    # Each delivery its own received time, as ingest gives them (the filling rows share one).
    text, first = _record("evt-generic-first", now)
    _, new = _record("evt-generic-new", now - timedelta(milliseconds=1))

    def fill() -> None:
        inbox_events_bulk_create(
            [research_event() for _ in range(2000)],
            received_at=now - timedelta(seconds=1),
        )

    assert generic_plan_rows_read(text, first, new, fill=fill, table=INBOX.table) == 0
    stored = inbox_events_bulk_create(
        [research_event()], received_at=now - timedelta(milliseconds=2)
    )[0]
    _, duplicate = _record(stored.event_id, now, stored.content_fingerprint)
    assert (
        generic_plan_rows_read(text, first, duplicate, fill=fill, table=INBOX.table)
        == 1
    )


def _prepared() -> list[str]:
    """The statements this connection has prepared on the server."""
    return [text for (text,) in sql("SELECT statement FROM pg_prepared_statements")]


def test_a_batchs_and_the_relays_statements_by_id_are_planned_for_their_values_every_run(
    client,
):
    """The statements that find a batch's rows by id in their day's partition (the relay's
    stamp; a set's read and close; the claim) are never prepared, however often a
    connection runs them: under a generic plan made while the day was empty, PostgreSQL
    read the day's waiting rows through the status or the received-time index for every
    batch (3,000 rows for a batch of 3, measured with ``tests.plans``), which a backlog
    after an outage would make slower with every row that waits; the set's lock of its
    research documents, planned on an empty table, read every document. The record statement,
    which keeps its prepared plan (found by its key, ``test_the_record_statements_...``),
    shows that the connection does prepare what it runs often."""
    now = timezone.now()
    rows = inbox_events_bulk_create(
        [research_event() for _ in range(24)], received_at=now
    )
    outbox = InboxOutbox()
    for _ in range(8):
        outbox.claim(2)  # the relay's claim, then its stamp
    for start in range(0, 16, 2):
        ids = [row.pk for row in rows[start : start + 2]]
        inbox_events_process(ids=ids, worker="w")  # a set's read and close
    for start in range(16, 24):
        # A message delivered again: its row claimed first.
        inbox_events_process(ids=[rows[start].pk], worker="w", sets=False)
    assert InboxEvent.objects.filter(processing_status="processed").count() == 24
    prepared = "\n".join(_prepared())
    for fragment in (
        "SET dispatched_at",  # the relay's stamp
        "e.attempts + 1",  # the set's read
        "AS v(id, number, status",  # the set's close
        "SET processing_status = 'processing'",  # the claim
        "WHERE entity_id = ANY(",  # the set's lock of its research documents
    ):
        assert fragment not in prepared, fragment
    research_source()
    for _ in range(8):
        assert signed_post(client, RESEARCH_SOURCE, research_event()).status_code == 202
    assert 'INSERT INTO "webhooks_inboxkey"' in "\n".join(_prepared())


def _partitions_named(text: str, params: dict) -> set[str]:
    return partitions_planned(text, params, INBOX.table, ATTEMPTS.table)


def _finish_params(ids: list[int], received: list, now) -> dict:
    """The values of a set's close (``statements.batch_finish_sql``) of rows ``ids``, each
    closed ``processed`` at its first attempt."""
    count = len(ids)
    return {
        "ids": ids,
        "received": received,
        "numbers": [1] * count,
        "statuses": ["processed"] * count,
        "processed_at": [now] * count,
        "errors": [""] * count,
        "causes": [""] * count,
        "outcomes": ["succeeded"] * count,
        "attempt_errors": [""] * count,
        "started": now,
        "now": now,
        "worker": "w",
    }


def test_a_batchs_claim_read_and_finish_plan_over_its_rows_days_alone():
    """The worker's claim, a set's read and its close name the days their rows were
    received on (``statements.received_days``, read from the ledger): with a month of
    partitions ahead they plan over today's partition of the inbox, none other."""
    inbox_partitions_ensure(ahead_days=30)
    now = timezone.now()
    days = statements.received_days([now])
    claim = _partitions_named(
        statements.batch_claim_sql(days),
        {
            "ids": [1, 2],
            "received": [now],
            "now": now,
            "lease": now,
            "worker": "w",
            "lock_timeout": "1s",
        },
    )
    read = _partitions_named(
        statements.batch_read_sql(days), {"ids": [1, 2], "received": [now], "now": now}
    )
    finish = _partitions_named(
        statements.batch_finish_sql(days), _finish_params([1, 2], [now, now], now)
    )
    today = {
        p.name
        for p in partitions(INBOX)
        if p.end > now and (p.start is None or p.start <= now)
    }
    assert len(partitions(INBOX)) > 30
    # (The attempts are inserted, routed as they go: no partition of theirs in a plan.)
    assert claim == read == finish == today, (claim, read, finish)


@pytest.mark.slow
def test_a_batchs_statements_by_id_read_their_rows_alone_on_a_day_never_analysed():
    """The claim, a set's read and close, and the relay's stamp are planned for their values
    every run, and on a day's partition that no analyze has visited yet (the first minutes
    of every day, or any day on a server without autovacuum) PostgreSQL has no statistics
    of its received times: it guesses a half percent of the partition for a range of them.
    Naming only the rows' days, these statements then read the whole day through the
    received-time index and filtered it by id, for every batch: 20,200 rows read for a set
    of 50 in a drain of 20,000 events (docs/bench-log/2026-12-07.md, "A day no analyze has
    visited"). Naming each row's own received time as well, every plan finds just the
    batch's rows."""
    inbox_partitions_ensure(ahead_days=3)
    rows = inbox_events_bulk_create(
        [research_event() for _ in range(2000)], received_at=timezone.now() + 2 * DAY
    )
    ids = [row.pk for row in rows]
    # Each row its own received time, in the inbox and in the ledger, as ingest gives them.
    sql(
        f"UPDATE {INBOX.table} SET received_at = received_at"  # noqa: S608
        " + id * interval '1 microsecond' WHERE id = ANY(%s)",
        [ids],
    )
    sql(
        "UPDATE webhooks_inboxkey SET received_at = received_at"
        " + inbox_event_id * interval '1 microsecond' WHERE inbox_event_id = ANY(%s)",
        [ids],
    )
    batch = ids[1000:1050]
    [(received, found)] = sql(statements.BATCH_RECEIVED_SQL, {"ids": batch})
    assert found == len(batch)
    days = statements.received_days(received)
    now = timezone.now()
    read = rows_read(
        statements.batch_read_sql(days),
        {"ids": batch, "now": now, "received": received},
        table=INBOX.table,
    )
    claim = rows_read(
        statements.batch_claim_sql(days),
        {
            "ids": batch,
            "received": received,
            "now": now,
            "lease": now,
            "worker": "w",
            "lock_timeout": "1s",
        },
        table=INBOX.table,
    )
    finish = rows_read(
        statements.batch_finish_sql(days),
        _finish_params(batch, received, now),
        table=INBOX.table,
    )
    stamp = rows_read(
        statements.relay_stamp_sql(days),
        {"ids": batch, "received": received, "now": now},
        table=INBOX.table,
    )
    assert (read, claim, finish, stamp) == (50, 50, 50, 50)


def test_the_relays_claim_reads_its_rows_alone_on_a_day_never_analysed():
    """The relay's claim reads each partition's waiting rows through its partial index in
    id order and stops at the rows it takes (``statements.relay_claim_sql``), on a day no
    analyze has visited as on any other: 50 rows read of 2,000 waiting."""
    inbox_events_bulk_create(
        [research_event() for _ in range(2000)],
        received_at=timezone.now() - timedelta(seconds=5),
    )
    claim = statements.relay_claim_sql(InboxOutbox().claim_starts())
    assert (
        rows_read(claim, {"limit": 50, "now": timezone.now()}, table=INBOX.table) == 50
    )


def test_the_relays_stamp_plans_over_its_rows_days_alone():
    inbox_partitions_ensure(ahead_days=30)
    now = timezone.now()
    stamp = _partitions_named(
        statements.relay_stamp_sql(statements.received_days([now - DAY, now])),
        {"ids": [1, 2], "received": [now - DAY, now], "now": now},
    )
    days = {
        p.name
        for p in partitions(INBOX)
        if p.end > now - DAY and (p.start is None or p.start <= now)
    }
    assert len(partitions(INBOX)) > 30
    assert stamp == days, stamp


def test_the_relay_publishes_rows_received_weeks_apart_in_one_round():
    old = InboxEventFactory(received_at=timezone.now() - 20 * DAY)
    new = InboxEventFactory()
    taken, publications = InboxOutbox().claim(100)
    assert taken == 2
    assert [p.rows for p in publications] == [(old.pk, new.pk)]
    for row in (old, new):
        row.refresh_from_db()
        assert row.dispatched_at is not None


def test_the_relays_look_and_claim_read_from_yesterday_while_nothing_older_waits(
    settings,
):
    """Between its looks for older rows, the relay's look and claim read the partitions from
    yesterday's start on (those created ahead included), however many days the inbox keeps;
    while an older row waits, every partition."""
    settings.RELAY_LOOK_BACK_SECONDS = 3600
    inbox_partitions_ensure(ahead_days=40)
    now = timezone.now()
    assert InboxOutbox().since() == day_start(now) - DAY
    # The test database's older days share one partition: the bound is shown on days ahead.
    since = day_start(now) + 20 * DAY
    claim = _partitions_named(
        statements.relay_claim_sql((since, since + DAY, since + 2 * DAY)),
        {"limit": 500, "now": now},
    )
    look = _partitions_named(statements.relay_has_waiting_sql(since), {"now": now})
    everywhere = {p.name for p in partitions(INBOX)}
    expected = {p.name for p in partitions(INBOX) if p.end > since}
    assert len(everywhere - expected) >= 20 and len(expected) >= 20
    assert claim == expected, claim
    assert look == expected, look
    assert (
        _partitions_named(
            statements.relay_claim_sql((None,)), {"limit": 500, "now": now}
        )
        == everywhere
    )
    # Its ranges: from yesterday's start, one a partition up to now, then every one ahead.
    outbox = InboxOutbox()
    starts = outbox.claim_starts()
    later = [
        p.start for p in partitions(INBOX) if p.start and p.start > day_start(now) - DAY
    ]
    assert starts == (
        day_start(now) - DAY,
        *(start for start in later if start <= now),
        min(start for start in later if start > now),
    )


def _scans(statement: str, params, table: str, *, analyze: bool = True) -> list[dict]:
    """The plan nodes of the statement's scans of ``table``'s partitions, run (in the test's
    transaction) with ``EXPLAIN ANALYZE``: their actual rows and loops (only planned, those
    the planner has not pruned, without ``analyze``)."""
    return plan_nodes(explained(statement, params, analyze=analyze), table)


def _rows_read(statement: str, params: dict) -> int:
    """The inbox rows the statement's scans of the inbox's partitions returned."""
    return sum(
        node["Actual Rows"] * node["Actual Loops"]
        for node in _scans(statement, params, INBOX.table)
    )


def test_a_claim_reads_the_rows_it_takes_not_every_waiting_row(settings):
    """A backlog (the workers behind): thousands of rows waiting, the inbox analysed before
    they came (so the planner counts few). The relay's claim reads one partition's range at
    a time in id order and stops at the rows it takes, and reads nothing of a range once it
    has them; one read over several partitions at once had read every waiting row of all of
    them and sorted them first (docs/bench-log/2026-12-06.md, "The relay's claim read every
    waiting row"). Then, with a row of three weeks ago waiting, likewise over every
    partition."""
    settings.RELAY_LOOK_BACK_SECONDS = 3600
    inbox_partitions_ensure(ahead_days=10)
    sql(f"ANALYZE {INBOX.table}")
    now = timezone.now()
    backlog = inbox_events_bulk_create(
        [research_event() for _ in range(2000)], received_at=now
    )
    # Rows a clock ahead wrote, into a partition ahead: read only for the room left.
    ahead = inbox_events_bulk_create(
        [research_event() for _ in range(300)], received_at=now + 3 * DAY
    )
    outbox = InboxOutbox()
    claim = statements.relay_claim_sql(outbox.claim_starts())
    assert _rows_read(claim, {"limit": 100, "now": now}) <= 110
    taken, _ = outbox.claim(100)
    assert taken == 100
    # Every waiting row, in id order, the rows ahead last: all of them when the limit
    # leaves room.
    with transaction.atomic():
        taken, publications = outbox.claim(5000)
        transaction.set_rollback(True)
    rows = [row for p in publications for row in p.rows]
    assert taken == 2200 and sorted(rows) == sorted(
        [r.pk for r in backlog[100:]] + [r.pk for r in ahead]
    )

    old = InboxEventFactory(received_at=now - 21 * DAY)
    outbox.look_everywhere()
    starts = outbox.claim_starts()
    # From the oldest row: the test database's older days share its first partition.
    assert starts[0] is None
    claim = statements.relay_claim_sql(starts)
    assert _rows_read(claim, {"limit": 100, "now": now}) <= 110
    taken, publications = outbox.claim(5000)
    assert taken == 2201 and old.pk in {row for p in publications for row in p.rows}


def test_a_claim_reads_the_due_retries_it_takes_soonest_due_first(settings):
    """After a downstream outage thousands of retries come due at once. A claim reads them
    in the order they came due, through the partial index ordered by ``next_attempt_at``,
    and stops at the ones it takes; in id order it had read every due retry and sorted
    them, at every claim until they were all published. Retries not due are never read."""
    settings.RELAY_LOOK_BACK_SECONDS = 3600
    sql(f"ANALYZE {INBOX.table}")
    now = timezone.now()

    def retries(count: int, *, received_ago: timedelta, due_in: timedelta):
        return inbox_events_bulk_create(
            [research_event() for _ in range(count)],
            received_at=now - received_ago,
            processing_status="failed",
            attempts=1,
            next_attempt_at=now + due_in,
        )

    due = retries(2000, received_ago=timedelta(hours=1), due_in=-timedelta(minutes=1))
    # The soonest due, received last (the highest ids): claimed first all the same.
    soonest = retries(
        30, received_ago=timedelta(minutes=30), due_in=-timedelta(minutes=10)
    )
    retries(500, received_ago=timedelta(hours=1), due_in=timedelta(minutes=5))
    outbox = InboxOutbox()
    claim = statements.relay_claim_sql(outbox.claim_starts())
    assert _rows_read(claim, {"limit": 100, "now": now}) <= 110
    taken, publications = outbox.claim(100)
    rows = {row for p in publications for row in p.rows}
    assert taken == 100 and {r.pk for r in soonest} <= rows
    taken, publications = outbox.claim(5000)
    assert taken == 1930
    assert {row for p in publications for row in p.rows} | rows == {
        r.pk for r in due + soonest
    }


def test_a_pages_attempt_counts_are_read_from_its_rows_days_alone():
    """The console's list reads the page's attempt counts after its rows, in one statement
    bounded by the rows' received times (``inbox_events_attempts_fill``): PostgreSQL plans
    and reads the attempts partitions of the rows' days alone, where lookups in the rows'
    statement were planned over every attempts partition. Sorted by the counts
    (``inbox_events_attempts_alias``), each row's lookup names its received time, the
    attempts' partition key, and reads that one partition (checked: without the received
    time each lookup read every partition's index)."""
    inbox_partitions_ensure(ahead_days=5)
    now = timezone.now()
    # On three days ahead, each its own partition (today's may be the test database's first).
    events = [InboxEventFactory(received_at=now + n * DAY) for n in (3, 2, 1)]
    for event in events:
        InboxAttemptFactory(event=event)
        InboxAttemptFactory(event=event, number=2)
    InboxAttemptFactory(event=events[0], number=1)  # a replay's round
    attempts_partitions = list(partitions(ATTEMPTS))
    assert len(attempts_partitions) >= 8

    page = list(InboxEvent.objects.order_by("-received_at")[:2])
    read = []

    def kept(execute, statement, params, many, context):
        read.append((statement, params))
        return execute(statement, params, many, context)

    with connection.execute_wrapper(kept):
        rows = inbox_events_attempts_fill(page)
    assert rows is page
    assert [(r.attempts_total, r.attempt_rounds) for r in rows] == [(3, 2), (2, 1)]
    [(statement, params)] = read
    planned = _scans(statement, params, ATTEMPTS.table, analyze=False)
    days = {partition_name(ATTEMPTS, day_start(r.received_at)) for r in rows}
    assert days <= {p.name for p in attempts_partitions}
    assert {node["Relation Name"] for node in planned} == days
    fresh = InboxEventFactory(received_at=now)
    assert inbox_events_attempts_fill([fresh])[0].attempts_total == 0
    assert inbox_events_attempts_fill([]) == []

    ordered = inbox_events_attempts_alias(InboxEvent.objects.all()).order_by(
        "-attempts_total", "received_at"
    )
    assert list(ordered) == [events[0], events[2], events[1], fresh]
    sorted_rows = ordered.filter(pk__in=[e.pk for e in events])
    statement, params = sorted_rows.query.sql_with_params()
    scans = _scans(statement, params, ATTEMPTS.table)
    # The one count sorted by (the rounds are not read), one partition's index a row.
    assert sum(node["Actual Loops"] for node in scans) == len(events)


def _inbox_partitions_planned(statement: str) -> set[str]:
    """The inbox partitions a statement's plan reads (those left once the planner has
    pruned the partitions its values exclude)."""
    return {
        node["Relation Name"]
        for node in _scans(statement, None, f"{INBOX.table}_p", analyze=False)
    }


def test_a_console_search_reads_the_days_of_the_rows_it_finds(operator_client):
    """A search in the console first reads the received times of the rows it finds (one
    statement an id index, over every partition), then the other statements of its page
    (its rows, its date bounds, its count) read only the days they lie in; the type
    filter's choices are the whole inbox's. At ten million rows over 36 days: 48 ms a
    page against 20 on an empty inbox before, 30 against 21 (checked: without the bounds,
    the rows, the date bounds and the count read every partition)."""
    inbox_partitions_ensure(ahead_days=5)
    now = timezone.now()
    older = [
        InboxEventFactory(event_id=f"evt_weeks_ago_{n}", received_at=now - 20 * DAY)
        for n in range(3)
    ]
    for n in range(4):
        InboxEventFactory(event_id=f"evt_recent_{n}", received_at=now - n * DAY)
    kept = {p.name for p in partitions(INBOX)}
    assert len(kept) >= 7
    received = older[0].received_at
    (day,) = (
        p.name
        for p in partitions(INBOX)
        if (p.start is None or p.start <= received) and received < p.end
    )

    with CaptureQueriesContext(connection) as queries:
        response = operator_client.get("/admin/webhooks/inboxevent/?q=evt_weeks_ago")
    assert response.status_code == 200
    assert {row.pk for row in response.context["cl"].result_list} == {
        row.pk for row in older
    }
    read = _inbox_statements_partitions(queries)
    # Every partition: the search's own bounds (one statement an id index), and the type
    # filter's choices (the types of the whole inbox, whatever the page shows).
    assert sorted(types for partitions, types in read if partitions == kept) == [
        False,
        False,
        True,
    ]
    assert [partitions for partitions, _ in read if partitions != kept] == [{day}] * (
        len(read) - 3
    )
    assert len(read) >= 5

    # Nothing found: no other statement reads the inbox's rows.
    with CaptureQueriesContext(connection) as queries:
        response = operator_client.get("/admin/webhooks/inboxevent/?q=evt_nowhere")
    assert response.status_code == 200
    assert response.context["cl"].result_count == 0
    assert sorted(types for _, types in _inbox_statements_partitions(queries)) == [
        False,
        False,
        True,
    ]


def _inbox_statements_partitions(queries) -> list[tuple[set[str], bool]]:
    """The inbox partitions each captured statement reads, and whether it is the type
    filter's loose scan."""
    return [
        (
            _inbox_partitions_planned(query["sql"]),
            "WITH RECURSIVE types" in query["sql"],
        )
        for query in queries.captured_queries
        if INBOX.table in query["sql"]
    ]


def test_a_row_waiting_on_an_older_day_is_claimed_once_the_relay_looks_back(settings):
    """A row of weeks ago that starts waiting (a replay) between the relay's looks waits
    for the next one (at most ``RELAY_LOOK_BACK_SECONDS``); the claims then read every
    partition until it is taken, and the next look narrows them again. A retry of an older
    day that came due turns them likewise."""
    settings.RELAY_LOOK_BACK_SECONDS = 3600
    recent = day_start(timezone.now()) - DAY
    outbox = InboxOutbox()
    new = InboxEventFactory()
    assert outbox.since() == recent
    old = InboxEventFactory(received_at=timezone.now() - 20 * DAY)

    assert [p.rows for p in outbox.claim(100)[1]] == [(new.pk,)]
    old.refresh_from_db()
    assert old.dispatched_at is None

    outbox.look_everywhere()
    assert outbox.has_waiting()
    assert outbox.since() is None
    assert [p.rows for p in outbox.claim(100)[1]] == [(old.pk,)]
    assert not outbox.has_waiting()
    outbox.look_everywhere()
    assert outbox.since() == recent

    retry = InboxEventFactory(
        received_at=timezone.now() - 3 * DAY,
        processing_status="failed",
        next_attempt_at=timezone.now() + timedelta(minutes=5),
    )
    outbox.look_everywhere()
    assert outbox.since() == recent  # not due yet
    InboxEvent.objects.filter(pk=retry.pk).update(next_attempt_at=timezone.now())
    outbox.look_everywhere()
    assert outbox.since() is None
    assert [p.rows for p in outbox.claim(100)[1]] == [(retry.pk,)]


def test_the_relay_looks_back_at_every_claim_with_no_interval(settings):
    settings.RELAY_LOOK_BACK_SECONDS = 0
    outbox = InboxOutbox()
    assert outbox.since() is not None
    old = InboxEventFactory(received_at=timezone.now() - 20 * DAY)
    assert [p.rows for p in outbox.claim(100)[1]] == [(old.pk,)]


def test_a_relays_first_round_looks_everywhere(settings):
    """A relay's first round reads every day's waiting rows, whatever the registered
    outbox last found (another relay of the process, a moment ago)."""
    settings.RELAY_LOOK_BACK_SECONDS = 3600
    assert INBOX_OUTBOX.since() is not None
    old = InboxEventFactory(received_at=timezone.now() - 20 * DAY)
    broker_reset()
    try:
        assert Relay().run_once(sweep=False) == (1, False)
        assert queued_inbox_event_ids() == [old.pk]
    finally:
        broker_reset()


def test_a_batch_of_rows_received_weeks_apart_is_processed_whole():
    """A replayed row of weeks ago in a batch with today's: the claim names every day
    between; a row whose key is gone makes it name none (every partition)."""
    old = InboxEventFactory(received_at=timezone.now() - 20 * DAY)
    new = InboxEventFactory()
    keyless = InboxEventFactory()
    InboxKey.objects.filter(pk=keyless.pk).delete()

    outcomes = inbox_events_process(ids=[old.pk, new.pk], worker="w")
    assert [o.status for o in outcomes] == ["processed", "processed"]
    outcomes = inbox_events_process(ids=[keyless.pk], worker="w")
    assert [o.status for o in outcomes] == ["processed"]
    for row in (old, new, keyless):
        row.refresh_from_db()
        assert row.processing_status == "processed"
        assert row.attempt_log.get().outcome == "succeeded"


@pytest.mark.django_db(transaction=True)
def test_a_delivery_on_a_day_without_a_partition_is_503_and_stores_nothing(
    http, source, caplog
):
    """In autocommit, as the webhook view runs: today's partition detached for the test,
    then attached again."""
    today = day_start(timezone.now())
    [current] = [
        p
        for p in partitions(INBOX)
        if p.end > today and (p.start is None or p.start <= today)
    ]
    bounds = sql(
        "SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE oid = %s::regclass",
        [current.name],
    )[0][0]
    sql(f"ALTER TABLE {INBOX.table} DETACH PARTITION {current.name}")
    try:
        response = signed_post(http, RESEARCH_SOURCE, research_event())
    finally:
        sql(f"ALTER TABLE {INBOX.table} ATTACH PARTITION {current.name} {bounds}")

    assert response.status_code == 503
    assert response.json()["error"] == "temporarily_unavailable"
    assert response["Retry-After"]
    assert InboxKey.objects.count() == 0  # the key went with the statement
    assert InboxEvent.objects.count() == 0
    assert "inbox.partition_missing" in caplog.text


def ahead_family() -> Metric:
    [family] = [
        f
        for f in InboxPartitionsCollector().collect()
        if f.name == "webhook_inbox_partitions_ahead_days"
    ]
    return family


def test_the_gauge_says_how_far_ahead_each_table_reaches(settings):
    family = ahead_family()
    assert isinstance(family, Metric)
    ahead = {s.labels["table"]: s.value for s in family.samples}
    assert set(ahead) == {INBOX.table, ATTEMPTS.table}
    for value in ahead.values():
        assert (
            settings.INBOX_PARTITIONS_AHEAD_DAYS
            < value
            <= (settings.INBOX_PARTITIONS_AHEAD_DAYS + 1)
        )
    partitions_drop_after(day_start(timezone.now()) + DAY)
    assert all(s.value <= 1 for s in ahead_family().samples)


def test_the_command_lists_and_ensures(capsys):
    partitions_drop_after(day_start(timezone.now()) + 2 * DAY)
    call_command("inbox_partitions", "--ensure")
    out = capsys.readouterr().out
    assert (
        f"created {partition_name(INBOX, day_start(timezone.now()) + 2 * DAY)}" in out
    )
    assert f"{INBOX.table}: " in out and "days ahead" in out
    assert "MINVALUE" in out


def test_the_ensure_task_is_in_the_beat_schedule():
    from config.celery_app import app

    entry = app.conf.beat_schedule["inbox-partitions"]
    assert entry["task"] == "webhooks.inbox_partitions"
    assert float(getattr(entry["schedule"], "seconds", entry["schedule"])) == 3600


def test_weekly_partitions_start_on_mondays_after_a_short_one(settings):
    """INBOX_PARTITION_DAYS=7: the partitions created from then on span a week from
    Monday; the first one after the last day's runs to the next Monday."""
    settings.INBOX_PARTITION_DAYS = 7
    newest = partitions(INBOX)[-1].end
    created = inbox_partitions_ensure(ahead_days=40)

    found = [p for p in partitions(INBOX) if p.start is not None and p.start >= newest]
    assert {p.name for p in found} <= set(created)
    first, *weeks = found
    assert first.start == newest
    assert first.end.weekday() == 0 and first.end - first.start <= 7 * DAY
    assert weeks and all(p.start.weekday() == 0 for p in weeks)
    assert all(p.end - p.start == 7 * DAY for p in weeks)
    assert weeks[-1].end >= day_start(timezone.now()) + 41 * DAY
    # Ensured again: nothing more.
    assert inbox_partitions_ensure(ahead_days=40) == []

    # An event and its attempt of a day in a week land in that week's partition.
    week = weeks[1]
    event = InboxEventFactory(received_at=week.start + 3 * DAY + timedelta(hours=5))
    InboxAttemptFactory(event=event)
    assert partition_of(INBOX.table, event.pk) == week.name
    assert partition_of(ATTEMPTS.table, InboxAttempt.objects.get().pk) == (
        partition_name(ATTEMPTS, week.start)
    )


def test_a_week_past_retention_is_dropped_whole(settings):
    settings.INBOX_PARTITION_DAYS = 7
    inbox_partitions_ensure(ahead_days=40)
    week = next(
        p for p in partitions(INBOX) if p.start is not None and p.start.weekday() == 0
    )
    early = InboxEventFactory(received_at=week.start + timedelta(hours=1))
    late = InboxEventFactory(received_at=week.end - timedelta(seconds=1))
    after = InboxEventFactory(received_at=week.end + timedelta(hours=1))
    InboxEvent.objects.update(processing_status="processed")
    settings.INBOX_RETENTION_DAYS = 2
    # Retention's horizon at the week's end: that week, and what came before it, leave.
    retired = inbox_partitions_retire(now=week.end + 2 * DAY + timedelta(hours=3))

    assert week.name in retired.dropped
    assert list(InboxEvent.objects.values_list("pk", flat=True)) == [after.pk]
    action = OperatorAction.objects.get(details__events_partition=week.name)
    assert action.details["start"] == week.start.isoformat()
    assert action.details["end"] == week.end.isoformat()
    assert action.details["events"] == 2
    assert {early.pk, late.pk} == {
        action.details["first_event_id"],
        action.details["last_event_id"],
    }


def test_a_detached_week_keeps_its_end_for_the_run_that_finishes_it(settings):
    """A retention run that stopped after its detach left the week's table behind: its
    bounds come back from its name and the end it was created with."""
    settings.INBOX_PARTITION_DAYS = 7
    inbox_partitions_ensure(ahead_days=40)
    week = next(
        p for p in partitions(INBOX) if p.start is not None and p.start.weekday() == 0
    )
    sql(f"ALTER TABLE {INBOX.table} DETACH PARTITION {week.name}")
    assert _bounds_of_name(week.name) == (week.start, week.end)


@pytest.mark.slow
def test_a_process_refuses_to_start_with_a_partition_of_other_than_a_day_or_a_week():
    result = processes.manage(
        "check", env=processes.child_env(INBOX_PARTITION_DAYS="3"), timeout=60
    )
    assert result.returncode != 0
    assert "INBOX_PARTITION_DAYS must be 1" in result.stderr
