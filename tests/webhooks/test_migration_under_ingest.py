"""Migration ``webhooks.0031`` as a deployment meets it (docs/scaling.md, "Partitioning an
existing inbox"): the code of this release already serving deliveries on a real gunicorn,
the database still at ``0030`` with a populated inbox (its rows over several days, each with
an attempt and its key in the ledger), and the migration run while signed deliveries keep
arriving. Every delivery is answered 202 or the documented 503 ``temporarily_unavailable``
(which stores nothing), every accepted one is in the partitioned inbox with its key, the ids
go on from the same sequence, and ingest is held up for a short time only: the longest a
delivery took while the migration ran is printed with the migration's own time."""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass

import pytest
import requests
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.integrations.research.factories import research_event
from tests.webhooks.factories import WebhookSourceFactory, encode, signed_headers
from tests.webhooks.test_ingest_live import start_server
from tests.webhooks.test_migrations import (
    id_index_definitions,
    ledger_digest_column,
    migrate,
)
from webhooks.partitions import INBOX, is_partitioned

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.migrations,
    pytest.mark.slow,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="SQLite keeps one table each"
    ),
]

BEFORE = "0030_attempts_event_received_at"
PARTITIONED = "0031_inbox_time_partitions"
# The migrations after it run under ingest too, up to 0037, whose column this code writes
# (the fixture adds it to the database at 0030, and it is dropped before 0037 runs).
LAST_UNDER_INGEST = "0036_field_indexes_led_by_others"
# Raised for a larger proof (docs/scaling.md, "Partitioning an existing inbox"):
# MIGRATION_UNDER_INGEST_ROWS=2000000.
ROWS = int(os.environ.get("MIGRATION_UNDER_INGEST_ROWS", "50000"))
DAYS = 5
POSTERS = 4
# The design claims one short lock (its wait bounded by 5 s): generously above what it takes.
MAX_BLOCKED_SECONDS = 5.0


@pytest.fixture
def at_0030():
    """The database at 0030 (with this release's code); it ends at the newest migration."""
    migrate([("webhooks", BEFORE)])
    with ledger_digest_column():
        yield
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def columns(table: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = %s AND column_name <> 'id' ORDER BY ordinal_position",
            [table],
        )
        return [row[0] for row in cursor.fetchall()]


def copied(
    table: str, template_id: int, overrides: dict[str, str], rows: str, where: str = ""
) -> str:
    """``INSERT ... SELECT`` of the row ``template_id`` of ``table``, once per row of
    ``rows`` (a FROM item), with ``overrides`` as SQL expressions."""
    names = columns(table)
    values = [overrides.get(name, f"t.{name}") for name in names]
    return (
        f"INSERT INTO {table} ({', '.join(names)})"  # noqa: S608 - names of the catalog
        f" SELECT {', '.join(values)} FROM {table} t, {rows}"
        f" WHERE t.id = {int(template_id)}{where}"
    )


def inbox_fill(apps, *, source_id: int, rows: int, days: int) -> None:
    """``rows`` processed events of the source spread over the last ``days`` days, each with
    one finished attempt and its key, written set-based from one row of each made by the
    models of 0030 (copies of it with their own ids, event ids, fingerprints and times)."""
    event = apps.get_model("webhooks", "InboxEvent")
    attempt = apps.get_model("webhooks", "InboxAttempt")
    template = event.objects.create(
        source_id=source_id,
        event_id="template",
        event_type="research.document.updated",
        payload_hash="0" * 64,
        content_fingerprint="1" * 64,
        raw_body=encode(research_event()),
        processing_status="processed",
    )
    template_attempt = attempt.objects.create(
        event_id=template.pk,
        event_received_at=template.received_at,
        number=1,
        outcome="succeeded",
        worker="w1@host",
    )
    received = f"now() - (n % {int(days)}) * interval '1 day' - (n % 86400) * interval '1 second'"
    with connection.cursor() as cursor:
        cursor.execute(
            copied(
                "webhooks_inboxevent",
                template.pk,
                {
                    "event_id": "'stored-' || n",
                    "entity_id": "'doc-' || (n % 5000)",
                    "content_fingerprint": "md5(n::text) || md5(n::text)",
                    "received_at": received,
                    "last_seen_at": received,
                    "processed_at": received,
                },
                f"generate_series(1, {int(rows)}) AS n",
            )
        )
        cursor.execute(
            copied(
                "webhooks_inboxattempt",
                template_attempt.pk,
                {
                    "event_id": "e.id",
                    "event_received_at": "e.received_at",
                    "started_at": "e.received_at",
                    "finished_at": "e.received_at",
                },
                "webhooks_inboxevent e",
                where=f" AND e.id <> {int(template.pk)}",
            )
        )
        cursor.execute(
            "DELETE FROM webhooks_inboxattempt WHERE id = %s", [template_attempt.pk]
        )
        cursor.execute("DELETE FROM webhooks_inboxevent WHERE id = %s", [template.pk])
        cursor.execute(
            "INSERT INTO webhooks_inboxkey (inbox_event_id, source_id, event_id,"
            " body_key, content_fingerprint, received_at, delivery_count)"
            " SELECT id, source_id, event_id, body_key, content_fingerprint,"
            " received_at, delivery_count FROM webhooks_inboxevent"
        )
        cursor.execute("ANALYZE webhooks_inboxevent")
        cursor.execute("ANALYZE webhooks_inboxattempt")


@dataclass
class Delivery:
    event_id: str
    started: float
    ended: float
    status: int | None = None
    error: str = ""

    @property
    def seconds(self) -> float:
        return self.ended - self.started


class Producers:
    """``POSTERS`` threads, each posting new signed events one after the other, as fast as
    they are answered, until stopped; every delivery and its answer is kept."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stopped = threading.Event()
        self.deliveries: list[Delivery] = []
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._post, daemon=True) for _ in range(POSTERS)
        ]

    def __enter__(self) -> Producers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def _post(self) -> None:
        with requests.Session() as session:
            while not self.stopped.is_set():
                body = research_event()
                raw = encode(body)
                headers = signed_headers(raw_body=raw, event_id=body["event_id"])
                delivery = Delivery(body["event_id"], time.monotonic(), 0.0)
                try:
                    answer = session.post(
                        self.url, data=raw, headers=headers, timeout=60
                    )
                    delivery.status = answer.status_code
                    if answer.status_code >= 300:
                        delivery.error = answer.json().get("error", "")
                except (requests.RequestException, ValueError) as exc:
                    delivery.error = repr(exc)
                delivery.ended = time.monotonic()
                with self.lock:
                    self.deliveries.append(delivery)

    def count(self) -> int:
        with self.lock:
            return len(self.deliveries)


def migrated_under_ingest(tmp_path, slug: str, *targets: str, settle: float):
    """The migrations ``targets`` of webhooks run one after the other while ``Producers``
    post to the source ``slug`` on a live server (from its 50th delivery on), ``settle``
    seconds of ingest after them. Returns the stopped server, the producers and the
    monotonic times before the first migration and after each."""
    server, url = start_server(tmp_path)
    try:
        with Producers(f"{url}/webhooks/{slug}/") as producers:
            while producers.count() < 50:
                time.sleep(0.05)
            time.sleep(settle)
            times = [time.monotonic()]
            for target in targets:
                migrate([("webhooks", target)])
                times.append(time.monotonic())
            time.sleep(settle)
    finally:
        server.stop()
    return server, producers, times


def scalar(sql: str, params: list | None = None):
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchone()[0]


def test_the_inbox_is_partitioned_while_deliveries_keep_arriving(
    at_0030, tmp_path, capsys
):
    old = migrate([("webhooks", BEFORE)])
    stored = WebhookSourceFactory(slug="stored")
    live = WebhookSourceFactory(slug="live")
    inbox_fill(old, source_id=stored.pk, rows=ROWS, days=DAYS)
    assert not is_partitioned(INBOX)
    rows_before = scalar("SELECT count(*) FROM webhooks_inboxevent")
    last_stored_id = scalar("SELECT max(id) FROM webhooks_inboxevent")
    assert rows_before == ROWS

    # Ingest under way on the unpartitioned inbox first.
    server, producers, (started, partitioned, ended) = migrated_under_ingest(
        tmp_path, "live", PARTITIONED, LAST_UNDER_INGEST, settle=1.0
    )

    deliveries = producers.deliveries
    # Every delivery answered: accepted, or refused for a retry with nothing stored.
    unanswered = [d for d in deliveries if d.status not in (202, 503)]
    assert unanswered == [], (unanswered[:5], server.log()[-3000:])
    refused = [d for d in deliveries if d.status == 503]
    assert {d.error for d in refused} <= {"temporarily_unavailable"}
    accepted = {d.event_id for d in deliveries if d.status == 202}
    assert len(accepted) == len(deliveries) - len(refused)

    assert is_partitioned(INBOX)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT e.event_id, e.id, k.inbox_event_id, e.tableoid::regclass::text"
            "  FROM webhooks_inboxevent e"
            "  LEFT JOIN webhooks_inboxkey k ON k.source_id = e.source_id"
            "   AND k.event_id = e.event_id"
            " WHERE e.source_id = %s",
            [live.pk],
        )
        stored_live = cursor.fetchall()
    # Every accepted event is there once, with its key under its id; nothing refused is.
    assert sorted(row[0] for row in stored_live) == sorted(accepted)
    assert all(row[1] == row[2] for row in stored_live)
    assert not {d.event_id for d in refused} & {row[0] for row in stored_live}
    assert scalar(
        "SELECT count(*) FROM webhooks_inboxkey k WHERE source_id = %s", [live.pk]
    ) == len(accepted)
    # Nothing lost or doubled; the ids went on from the same sequence.
    assert scalar("SELECT count(*) FROM webhooks_inboxevent") == rows_before + len(
        accepted
    )
    assert scalar("SELECT count(*) - count(DISTINCT id) FROM webhooks_inboxevent") == 0
    assert min(row[1] for row in stored_live) > last_stored_id
    assert scalar("SELECT count(*) FROM webhooks_inboxattempt") == ROWS
    assert (
        scalar(
            "SELECT count(*) FROM webhooks_inboxevent"
            " WHERE tableoid = 'webhooks_inboxevent_p0'::regclass AND source_id = %s",
            [stored.pk],
        )
        == ROWS
    )

    before = [d.seconds for d in deliveries if d.ended < started]
    during = [
        d.seconds for d in deliveries if d.ended >= started and d.started <= ended
    ]
    blocked = max(during)
    with capsys.disabled():
        print(
            f"\n0031 on {ROWS:,} rows over {DAYS} days (and {ROWS:,} attempts) under"
            f" ingest: {partitioned - started:.2f} s (0032-0036: {ended - partitioned:.2f} s);"
            f" {len(deliveries)} deliveries, {len(during)} while migrating, {len(refused)}"
            f" refused (503); latency before p50 {statistics.median(before):.3f} s, max"
            f" {max(before):.3f} s; while migrating p50 {statistics.median(during):.3f} s,"
            f" max {blocked:.3f} s"
        )
    assert blocked < MAX_BLOCKED_SECONDS


BEFORE_COVERING = "0037_inbox_key_content_digest"
COVERING = "0038_inbox_id_indexes_hold_received_at"


def test_the_id_indexes_are_built_again_while_deliveries_keep_arriving(
    tmp_path, capsys
):
    """0038 builds the two id indexes again with the received time, on every partition,
    beside the old ones (``CREATE INDEX CONCURRENTLY``), while signed deliveries keep
    arriving: every delivery is accepted and stored once, and afterwards the parent index
    and each partition's copy hold the received time."""
    migrate([("webhooks", BEFORE_COVERING)])
    try:
        live = WebhookSourceFactory(slug="live")
        server, producers, (started, ended) = migrated_under_ingest(
            tmp_path, "live", COVERING, settle=0.5
        )
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    deliveries = producers.deliveries
    assert [d for d in deliveries if d.status != 202] == [], server.log()[-3000:]
    accepted = sorted(d.event_id for d in deliveries)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT event_id FROM webhooks_inboxevent WHERE source_id = %s ORDER BY 1",
            [live.pk],
        )
        assert [row[0] for row in cursor.fetchall()] == accepted
    definitions, partitions = id_index_definitions()
    # Two a partition and the parent's two, nothing left of the old ones.
    assert len(definitions) == 2 * (partitions + 1), definitions
    assert all("INCLUDE (received_at)" in d for d in definitions.values()), definitions
    during = [
        d.seconds for d in deliveries if d.ended >= started and d.started <= ended
    ]
    assert during  # ingest went on while it ran
    with capsys.disabled():
        print(
            f"\n0038 on {partitions} partitions under ingest: {ended - started:.2f} s;"
            f" {len(deliveries)} deliveries, {len(during)} while migrating, the longest"
            f" {max(during):.3f} s"
        )
    assert max(during) < MAX_BLOCKED_SECONDS
