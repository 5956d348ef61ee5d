"""The inbox's migrations carry existing state over, as an existing deployment would be
migrated: a paused or draining source keeps its hold (0013), a row dead-lettered before causes
were recorded gets one (0014); the inbox tables get their autovacuum settings (0020), and the
inbox room on its pages (0021); the secrets stored before public keys were held stay
secrets (0023); every stored event gets its key in the deduplication ledger (0029), and
every stored attempt a time for its event (0030); the stored rows become the first time
partition, and come back, and a run that stopped before its swap refuses deliveries past its
bound with a 503 until it is run again (0031)."""

from __future__ import annotations

import contextlib
import importlib
from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.migrations]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state(targets).apps


@contextlib.contextmanager
def ledger_digest_column():
    """The ledger's ``content_digest`` (0037), which this code's ingest writes, on a database
    migrated back before it: what lets this code serve deliveries there, as a test of an
    earlier migration under live ingest needs. Gone again before the database is migrated
    forward, where 0037 adds it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE webhooks_inboxkey ADD COLUMN content_digest bytea NULL,"
            " ALTER COLUMN content_fingerprint DROP NOT NULL"
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE webhooks_inboxkey DROP COLUMN content_digest")


def id_index_definitions() -> tuple[dict[str, str], int]:
    """The inbox's id indexes (those of the pattern operator class), the parent's and each
    partition's, by name with their definition; and how many partitions the inbox has."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_indexdef(c.oid) FROM pg_class c"
            " JOIN pg_index i ON i.indexrelid = c.oid"
            " JOIN pg_class t ON t.oid = i.indrelid"
            " WHERE (t.relname = 'webhooks_inboxevent' OR t.relispartition)"
            "   AND t.relname LIKE 'webhooks\\_inboxevent%%'"
            "   AND pg_get_indexdef(c.oid) LIKE '%%varchar_pattern_ops%%'"
        )
        definitions = dict(cursor.fetchall())
        cursor.execute(
            "SELECT count(*) FROM pg_inherits"
            " WHERE inhparent = 'webhooks_inboxevent'::regclass"
        )
        return definitions, cursor.fetchone()[0]


@pytest.fixture
def migrated_back():
    """The inbox as it was at the migration asked for; the database ends where it started."""
    yield lambda name: migrate([("webhooks", name)])
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_a_paused_and_a_draining_source_keep_their_state_as_holds(migrated_back):
    old = migrated_back("0012_source_pause")
    source = old.get_model("webhooks", "WebhookSource")
    now = timezone.now()
    source.objects.create(slug="normal", handler="research")
    source.objects.create(
        slug="paused",
        handler="research",
        paused_at=now - timedelta(minutes=5),
        paused_by_name="os:oncall",
        pause_reason="indexer down",
    )
    source.objects.create(
        slug="draining",
        handler="research",
        drain_started_at=now,
        drain_rate=2.5,
        drain_released=7,
        drain_tokens=0.5,
        drain_tokens_at=now,
    )

    new = migrate([("webhooks", "0013_source_hold")])
    holds = {
        h.source.slug: h
        for h in new.get_model("webhooks", "SourceHold").objects.select_related(
            "source"
        )
    }
    assert set(holds) == {"paused", "draining"}
    paused, draining = holds["paused"], holds["draining"]
    assert (paused.paused_by_name, paused.pause_reason) == ("os:oncall", "indexer down")
    assert paused.drain_started_at is None
    assert (draining.paused_at, draining.drain_rate, draining.drain_released) == (
        None,
        2.5,
        7,
    )

    # And back: the source's own columns again.
    old = migrate([("webhooks", "0012_source_pause")])
    restored = old.get_model("webhooks", "WebhookSource").objects.get(slug="paused")
    assert restored.pause_reason == "indexer down"


def test_a_row_dead_lettered_before_causes_were_recorded_gets_one(migrated_back):
    old = migrated_back("0013_source_hold")
    source = old.get_model("webhooks", "WebhookSource").objects.create(
        slug="lab", handler="research"
    )
    inbox = old.get_model("webhooks", "InboxEvent")
    for event_id, status, cause in [
        ("old-dead", "dead_lettered", ""),
        ("new-dead", "dead_lettered", "rejected"),
        ("done", "processed", ""),
    ]:
        inbox.objects.create(
            source=source,
            event_id=event_id,
            event_type="t",
            payload_hash="0" * 64,
            content_fingerprint="0" * 64,
            processing_status=status,
            dead_letter_cause=cause,
        )

    new = migrate([("webhooks", "0014_dead_letter_cause_unrecorded")])
    causes = dict(
        new.get_model("webhooks", "InboxEvent").objects.values_list(
            "event_id", "dead_letter_cause"
        )
    )
    assert causes == {"old-dead": "unrecorded", "new-dead": "rejected", "done": ""}


def reloptions(table: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE relname = %s",
            [table],
        )
        return set(cursor.fetchone()[0])


def stored_reloptions(table: str) -> set[str]:
    """Of the table's newest time partition once it is partitioned (0031: a partitioned
    table has no storage of its own; each partition takes the one before's settings)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = to_regclass(%s) ORDER BY c.relname DESC LIMIT 1",
            [table],
        )
        newest = cursor.fetchone()
    return reloptions(newest[0] if newest else table)


def test_the_inbox_tables_get_a_queues_autovacuum_settings_and_lose_them_back(
    migrated_back,
):
    events, attempts = "webhooks_inboxevent", "webhooks_inboxattempt"
    assert "autovacuum_vacuum_scale_factor=0.01" in stored_reloptions(events)
    assert {"autovacuum_vacuum_threshold=5000", "fillfactor=70"} <= stored_reloptions(
        attempts
    )

    migrated_back("0019_prefix_search_indexes")

    assert reloptions(events) == set()
    assert reloptions(attempts) == set()


def test_the_inbox_keeps_room_on_its_pages_and_loses_it_back(migrated_back):
    events = "webhooks_inboxevent"
    assert "fillfactor=85" in stored_reloptions(events)

    migrated_back("0020_inbox_autovacuum_settings")

    assert "fillfactor=85" not in reloptions(events)
    assert "autovacuum_vacuum_scale_factor=0.01" in reloptions(events)


def test_the_ledger_keeps_room_on_its_pages_and_loses_it_back(migrated_back):
    keys = "webhooks_inboxkey"
    assert "fillfactor=95" in reloptions(keys)

    migrated_back("0033_inbox_key_purges")

    assert "fillfactor=95" not in reloptions(keys)


def test_secrets_stored_before_public_keys_were_held_are_secrets(migrated_back):
    """0023: every secret already stored is of kind ``secret``; a row of kind
    ``public_key`` must hold a 32-byte ``whpk_`` key, which the database enforces."""
    from django.db import IntegrityError, transaction

    old = migrated_back("0022_inbox_sweep_reads_the_status_index")
    source = old.get_model("webhooks", "WebhookSource").objects.create(
        slug="before", handler="research", scheme="standard-webhooks"
    )
    old.get_model("webhooks", "WebhookSecret").objects.create(
        source=source, secret="whsec_" + "A" * 40
    )

    new = migrate([("webhooks", "0023_public_keys")])
    secret_model = new.get_model("webhooks", "WebhookSecret")
    assert list(secret_model.objects.values_list("kind", flat=True)) == ["secret"]
    for not_a_key in (
        "whsec_" + "A" * 40,
        "whpk_" + "A" * 40,
        "whpk_" + "A" * 43 + "=x",
    ):
        with pytest.raises(IntegrityError), transaction.atomic():
            secret_model.objects.create(
                source_id=source.pk, secret=not_a_key, kind="public_key"
            )
    secret_model.objects.create(
        source_id=source.pk, secret="whpk_" + "A" * 43 + "=", kind="public_key"
    )


def test_every_stored_event_gets_its_key_and_the_ledger_decides_from_then_on(
    migrated_back,
):
    """0029: one key per existing row, under the row's id, with its fingerprint, body key,
    received time and count; the ledger's unique index refuses a second key of an id."""
    from django.db import IntegrityError, transaction

    old = migrated_back("0028_traceparent")
    source = old.get_model("webhooks", "WebhookSource").objects.create(
        slug="before", handler="research"
    )
    event = old.get_model("webhooks", "InboxEvent")
    now = timezone.now()
    common = {"source": source, "event_type": "t", "payload_hash": "h" * 64}
    signed = event.objects.create(
        event_id="evt-1", content_fingerprint="a" * 64, delivery_count=3, **common
    )
    by_body = event.objects.create(
        event_id="d-1",
        content_fingerprint="b" * 64,
        body_key="c" * 64,
        received_at=now - timedelta(days=40),
        **common,
    )

    new = migrate([("webhooks", "0029_inbox_key_ledger")])
    keys = new.get_model("webhooks", "InboxKey")
    assert sorted(
        keys.objects.values_list(
            "inbox_event_id",
            "event_id",
            "body_key",
            "content_fingerprint",
            "delivery_count",
        )
    ) == sorted(
        [
            (signed.pk, "evt-1", None, "a" * 64, 3),
            (by_body.pk, "d-1", "c" * 64, "b" * 64, 1),
        ]
    )
    assert keys.objects.get(pk=by_body.pk).received_at == by_body.received_at
    with pytest.raises(IntegrityError), transaction.atomic():
        keys.objects.create(
            inbox_event_id=by_body.pk + 100,
            source_id=source.pk,
            event_id="evt-1",
            content_fingerprint="a" * 64,
            received_at=now,
        )


def test_attempts_stored_before_their_events_time_was_kept_hold_1970(migrated_back):
    """0030: the column is added with a constant for the attempts already stored (no
    rewrite of the table); an attempt no longer needs its event's row to be stored."""
    from datetime import UTC, datetime

    old = migrated_back("0029_inbox_key_ledger")
    source = old.get_model("webhooks", "WebhookSource").objects.create(
        slug="before", handler="research"
    )
    event = old.get_model("webhooks", "InboxEvent").objects.create(
        source=source,
        event_id="evt-1",
        event_type="t",
        payload_hash="h" * 64,
        content_fingerprint="a" * 64,
    )
    old.get_model("webhooks", "InboxAttempt").objects.create(event=event, number=1)

    new = migrate([("webhooks", "0030_attempts_event_received_at")])
    attempt = new.get_model("webhooks", "InboxAttempt")
    assert list(attempt.objects.values_list("event_received_at", flat=True)) == [
        datetime(1970, 1, 1, tzinfo=UTC)
    ]
    attempt.objects.create(
        event_id=event.pk + 1000, event_received_at=timezone.now(), number=1
    )


def test_partitioning_keeps_the_stored_rows_as_they_are_and_their_ids_going_on(
    migrated_back,
):
    """0031: the rows stored before become the first partition (from MINVALUE), ids go on
    from the same sequence, new rows land in their day's partition; and back, every row
    returns to one table with its identity column."""
    old = migrated_back("0030_attempts_event_received_at")
    source = old.get_model("webhooks", "WebhookSource").objects.create(
        slug="before", handler="research"
    )
    common = {
        "source_id": source.pk,
        "event_type": "t",
        "payload_hash": "h" * 64,
        "content_fingerprint": "a" * 64,
    }
    stored = old.get_model("webhooks", "InboxEvent").objects.create(
        event_id="evt-old", received_at=timezone.now() - timedelta(days=400), **common
    )

    new = migrate([("webhooks", "0031_inbox_time_partitions")])
    event = new.get_model("webhooks", "InboxEvent")
    assert event.objects.get(pk=stored.pk).event_id == "evt-old"
    tomorrow = (timezone.now() + timedelta(days=1)).replace(
        hour=12, minute=0, second=0, microsecond=0
    )
    later = event.objects.create(event_id="evt-new", received_at=tomorrow, **common)
    assert later.pk > stored.pk
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, tableoid::regclass::text FROM webhooks_inboxevent ORDER BY id"
        )
        assert cursor.fetchall() == [
            (stored.pk, "webhooks_inboxevent_p0"),
            (later.pk, f"webhooks_inboxevent_p{tomorrow:%Y%m%d}"),
        ]

    back = migrate([("webhooks", "0030_attempts_event_received_at")])
    event = back.get_model("webhooks", "InboxEvent")
    assert sorted(event.objects.values_list("event_id", flat=True)) == [
        "evt-new",
        "evt-old",
    ]
    assert event.objects.create(event_id="evt-after", **common).pk > later.pk


def stopped_before_its_swap(table: str, key: str, *, cutover) -> None:
    """What a run of 0031 that stopped before its swap (its lock not taken in time) leaves
    on ``table``: the bound, checked on every row written since, and the key's index."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {table}_p0_bound CHECK ({key} IS"
            f" NOT NULL AND {key} < '{cutover.isoformat()}'::timestamptz) NOT VALID"
        )
        cursor.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {table}_p0_bound")
        cursor.execute(
            f"CREATE UNIQUE INDEX CONCURRENTLY {table}_p0_key ON {table} (id, {key})"
        )


def test_a_delivery_past_the_bound_of_a_run_that_stopped_is_503_and_run_again_it_goes(
    migrated_back, http
):
    """0031 checks its bound on every row from its first step: a run that stopped before
    its swap, past the midnight its bound ends at, leaves deliveries refused (503, nothing
    stored) until it is run again, which makes its bound again from the rows as they are."""
    from tests.integrations.research.factories import research_event
    from tests.webhooks.factories import RESEARCH_SOURCE, research_source, signed_post
    from webhooks.partitions import DAY, INBOX, day_start, partitions, table_partition

    migrated_back("0030_attempts_event_received_at")
    with ledger_digest_column():
        research_source()
        midnight = timezone.now() - timedelta(minutes=5)
        stopped_before_its_swap("webhooks_inboxevent", "received_at", cutover=midnight)

        refused = signed_post(http, RESEARCH_SOURCE, research_event())

        assert refused.status_code == 503
        assert refused.json()["error"] == "temporarily_unavailable"
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT (SELECT count(*) FROM webhooks_inboxevent),"
                " (SELECT count(*) FROM webhooks_inboxkey)"
            )
            assert cursor.fetchone() == (0, 0)

        migrate([("webhooks", "0031_inbox_time_partitions")])

        accepted = signed_post(http, RESEARCH_SOURCE, research_event())
        assert accepted.status_code == 202
        [first, *_] = partitions(INBOX)
        assert (first.name, first.start) == ("webhooks_inboxevent_p0", None)
        assert first.end == day_start(timezone.now()) + DAY
        # Once partitioned, a table is left as it is.
        table_partition("webhooks_inboxevent", "received_at", cutover=timezone.now())
        assert partitions(INBOX)[0] == first


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite's indexes hold no other column"
)
def test_the_id_indexes_run_that_stopped_after_one_is_run_again(
    migrated_back, monkeypatch
):
    """0038 stopped after it made the first of the two id indexes again (a run is not
    atomic): run again, it leaves that one as it is and makes the other; every copy, the
    parent's and each partition's, holds the received time."""
    covering = importlib.import_module(
        "webhooks.migrations.0038_inbox_id_indexes_hold_received_at"
    )
    migrated_back("0037_inbox_key_content_digest")
    first = dict(list(covering.INDEXES.items())[:1])
    with monkeypatch.context() as patch:
        patch.setattr(covering, "INDEXES", first)
        with connection.schema_editor(atomic=False) as editor:
            covering.covering_build(None, editor)

    migrate([("webhooks", "0038_inbox_id_indexes_hold_received_at")])

    definitions, partitions = id_index_definitions()
    assert len(definitions) == 2 * (partitions + 1), definitions
    assert all("INCLUDE (received_at)" in d for d in definitions.values()), definitions
    assert {"webhooks_inbox_event_id_like", "webhooks_inbox_entity_like"} <= set(
        definitions
    )
