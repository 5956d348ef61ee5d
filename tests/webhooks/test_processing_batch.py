"""A batch applied as a set (docs/subsystems/processing.md, "A batch of inbox events on a worker"):
the research integration's ``handle_batch`` gives every event exactly the outcome the
per-event path gives it, in a number of statements that does not grow with the batch."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.db import set_statement_sql
from research import services as research_services
from research import statements as research_statements
from research.models import Citation, DocumentRevision, ResearchDocument
from tests.examples import max_examples
from tests.integrations.research.factories import (
    BASE_TIME,
    DOCUMENT_CREATED,
    DOCUMENT_DELETED,
    DOCUMENT_UPDATED,
    research_event,
)
from tests.webhooks.factories import inbox_events_bulk_create
from webhooks.integrations import integration_batch_get
from webhooks.models import InboxAttempt, InboxEvent, InboxKey
from webhooks.processing import (
    _batch_read,
    _claims_batch_run,
    inbox_event_process,
    inbox_events_process,
)

pytestmark = pytest.mark.django_db

POISON = {"citations": [{"text": "q", "reference_url": "not a url"}]}

# (document, version or None, kind, poison): applied, out of order, duplicate version,
# tombstone, a late update after the tombstone, a resurrection, an unversioned pair, an
# unsupported type, one poison event between two that apply.
MIXED = [
    ("a", 2, DOCUMENT_CREATED, False),
    ("a", 1, DOCUMENT_UPDATED, False),  # out of order
    ("a", 2, DOCUMENT_UPDATED, False),  # duplicate version
    ("a", 3, DOCUMENT_UPDATED, True),  # poison: dead-lettered, changes nothing
    ("a", 3, DOCUMENT_UPDATED, False),  # applies: the poison left no state
    ("b", 5, DOCUMENT_UPDATED, False),
    ("b", 6, DOCUMENT_DELETED, False),  # tombstone
    ("b", 5, DOCUMENT_UPDATED, False),  # never resurrects it
    ("b", 7, DOCUMENT_UPDATED, False),  # a newer one does
    ("c", None, DOCUMENT_UPDATED, False),
    ("c", None, DOCUMENT_UPDATED, False),
    ("c", None, "research.document.archived", False),  # unsupported
    ("d", 1, DOCUMENT_DELETED, False),  # a tombstone for a document never seen
]


def rows_for(events, *, prefix: str) -> list[InboxEvent]:
    """One row per ``(document, version, kind, poison)``, on documents and event ids of
    ``prefix``: two calls with two prefixes build the same events for other documents."""
    bodies = []
    for number, (doc, version, kind, poison) in enumerate(events):
        body = research_event(
            entity_id=f"{prefix}_{doc}",
            source_version=version,
            number=number,
            event_id=f"{prefix}_evt_{number:03d}",
            event_type=kind,
            occurred_at=BASE_TIME + timedelta(seconds=number % 3),
        )
        if poison:
            body["data"] = POISON
        bodies.append(body)
    return inbox_events_bulk_create(bodies)


def outcome_of(rows: list[InboxEvent], *, prefix: str) -> dict:
    """Everything processing left, with the prefix taken out of every name."""

    def plain(value):
        return value.replace(prefix, "P") if isinstance(value, str) else value

    events = [
        tuple(plain(v) for v in row)
        for row in InboxEvent.objects.filter(pk__in=[r.pk for r in rows])
        .order_by("id")
        .values_list(
            "processing_status",
            "error_message",
            "dead_letter_cause",
            "attempts",
            "next_attempt_at",
            "lease_expires_at",
        )
    ]
    attempts = [
        tuple(plain(v) for v in row)
        for row in InboxAttempt.objects.filter(event__in=[r.pk for r in rows])
        .order_by("event_id", "number")
        .values_list("number", "outcome", "resulting_status", "error")
    ]
    documents = ResearchDocument.objects.filter(entity_id__startswith=f"{prefix}_")
    states = sorted(
        tuple(plain(v) for v in row)
        for row in documents.values_list(
            "entity_id",
            "entity_type",
            "current_source_version",
            "last_occurred_at",
            "last_event_id",
            "source_url",
            "title",
            "source_content_hash",
            "published_at",
            "summary",
            "is_deleted",
        )
    )
    authors = sorted(
        (plain(e), a) for e, a in documents.values_list("entity_id", "authors")
    )
    citations = sorted(
        tuple(plain(v) for v in row)
        for row in Citation.objects.filter(document__in=documents).values_list(
            "document__entity_id", "position", "text", "reference_url"
        )
    )
    revisions = [
        (plain(entity), plain(event_id), kind, version, str(snapshot))
        for entity, event_id, kind, version, snapshot in DocumentRevision.objects.filter(
            document__in=documents
        )
        .order_by("id")
        .values_list(
            "document__entity_id", "event_id", "kind", "source_version", "snapshot"
        )
    ]
    return {
        "events": events,
        "attempts": attempts,
        "documents": states,
        "authors": authors,
        "citations": [tuple(map(plain, c)) for c in citations],
        "revisions": [tuple(plain(str(v)) for v in r) for r in revisions],
    }


def both_paths(events) -> tuple[dict, dict]:
    """The events processed as one batch, and the same events (on other documents) one
    event at a time in id order."""
    batch_prefix, single_prefix = (f"x{uuid.uuid4().hex[:8]}" for _ in range(2))
    batch_rows = rows_for(events, prefix=batch_prefix)
    single_rows = rows_for(events, prefix=single_prefix)
    inbox_events_process(ids=[r.pk for r in batch_rows], worker="w")
    for row in single_rows:
        inbox_event_process(inbox_event_id=row.pk, worker="w")
    return (
        outcome_of(batch_rows, prefix=batch_prefix),
        outcome_of(single_rows, prefix=single_prefix),
    )


def test_a_batch_of_mixed_outcomes_ends_as_the_per_event_path_does():
    batch, single = both_paths(MIXED)

    assert batch == single
    assert [status for status, *_ in batch["events"]] == [
        "processed",
        "ignored_out_of_order",
        "ignored_duplicate_version",
        "dead_lettered",
        "processed",
        "processed",
        "processed",
        "ignored_out_of_order",
        "processed",
        "processed",
        "processed",
        "ignored_unsupported",
        "processed",
    ]
    assert "reference_url" in batch["events"][3][1]
    assert batch["events"][3][2] == "rejected"
    assert len(batch["revisions"]) == 8


def test_the_statement_binds_its_arrays_in_binary_where_the_server_binds(monkeypatch):
    """Server-side binding on (the test settings, as production): the arrays go in binary;
    off (a client-side cursor, which binds no binary parameter), the text form, which gives
    the same outcome."""
    assert connection.settings_dict["OPTIONS"]["server_side_binding"] is True
    sql = set_statement_sql(research_statements.DOCUMENTS_APPLY_SQL)
    assert "%(d_summary)b::text[]" in sql and ")s::text[]" not in sql

    monkeypatch.setitem(
        connection.settings_dict["OPTIONS"], "server_side_binding", False
    )
    assert (
        set_statement_sql(research_statements.DOCUMENTS_APPLY_SQL)
        == research_statements.DOCUMENTS_APPLY_SQL
    )
    batch, single = both_paths(MIXED)

    assert batch == single
    assert len(batch["revisions"]) == 8


@settings(
    max_examples=max_examples(30),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    events=st.lists(
        st.tuples(
            st.sampled_from("abc"),
            st.one_of(st.none(), st.integers(0, 4)),
            st.sampled_from(
                [DOCUMENT_CREATED, DOCUMENT_UPDATED, DOCUMENT_UPDATED, DOCUMENT_DELETED]
            ),
            st.sampled_from([False, False, False, False, True]),  # poison
        ),
        min_size=2,
        max_size=16,
    )
)
def test_any_batch_ends_as_the_per_event_path_does(events):
    batch, single = both_paths(events)
    assert batch == single


def test_the_statements_of_a_batch_do_not_grow_with_its_size():
    def statements(size: int) -> int:
        prefix = f"x{uuid.uuid4().hex[:8]}"
        # A few documents with several events each, a poison event among them.
        events = [
            (f"d{n % 7}", n // 7 + 1, DOCUMENT_UPDATED, n == size // 2)
            for n in range(size)
        ]
        rows = rows_for(events, prefix=prefix)
        with CaptureQueriesContext(connection) as queries:
            outcomes = inbox_events_process(ids=[r.pk for r in rows], worker="w")
        assert outcomes[size // 2].status == "dead_lettered"
        assert {o.status for o in outcomes} == {"processed", "dead_lettered"}
        # The test's own transaction turns the batch's into a savepoint: not counted.
        return sum("SAVEPOINT" not in q["sql"] for q in queries.captured_queries)

    small, large = statements(5), statements(50)
    assert small == large, (small, large)
    # The rows' days from the ledger (for the read and the close to name their time
    # partitions), the read, the documents' lock, their write, the close: the lock sets
    # its transaction's lock_timeout itself, nothing sets or resets the session's.
    assert large <= 5, large


def test_a_set_statement_the_database_refuses_falls_back_to_one_event_at_a_time():
    """A value the database refuses fails the batch's statement: the batch is rolled back
    and run per event, which gives the event it concerns its own failure (here transient,
    a retry) and applies the others."""
    revisions = DocumentRevision._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {revisions} ADD CONSTRAINT test_no_version_13"
            " CHECK (source_version IS DISTINCT FROM 13)"
        )
    prefix = f"x{uuid.uuid4().hex[:8]}"
    rows = rows_for(
        [
            ("a", 12, DOCUMENT_UPDATED, False),
            ("a", 13, DOCUMENT_UPDATED, False),
            ("b", 1, DOCUMENT_UPDATED, False),
            ("a", 14, DOCUMENT_UPDATED, False),
        ],
        prefix=prefix,
    )

    outcomes = inbox_events_process(ids=[r.pk for r in rows], worker="w")

    assert [o.status for o in outcomes] == [
        "processed",
        "failed",
        "processed",
        "processed",
    ]
    assert outcomes[1].retry_at is not None
    failed = InboxEvent.objects.get(pk=rows[1].pk)
    assert "test_no_version_13" in failed.error_message
    assert failed.dispatched_at is None and failed.next_attempt_at is not None
    assert list(
        DocumentRevision.objects.filter(document__entity_id=f"{prefix}_a")
        .order_by("id")
        .values_list("source_version", flat=True)
    ) == [12, 14]
    # One attempt each, the failed one closed as a retry, each with its event's time.
    assert InboxAttempt.objects.filter(event__in=rows).count() == 4
    assert InboxAttempt.objects.get(event=rows[1]).outcome == "retry"
    assert_attempts_carry_their_events_time(rows)


def assert_attempts_carry_their_events_time(rows: list[InboxEvent]) -> None:
    received = dict(
        InboxEvent.objects.filter(pk__in=[r.pk for r in rows]).values_list(
            "pk", "received_at"
        )
    )
    attempts = InboxAttempt.objects.filter(event__in=rows)
    assert attempts.exists()
    for event_pk, event_received_at in attempts.values_list(
        "event_id", "event_received_at"
    ):
        assert event_received_at == received[event_pk]


def test_a_batch_writes_each_attempt_with_its_events_received_time():
    """What storing an event and its attempts together by the event's time needs."""
    rows = rows_for(
        [("a", 1, DOCUMENT_UPDATED, False), ("b", 1, DOCUMENT_UPDATED, False)],
        prefix=f"t{uuid.uuid4().hex[:8]}",
    )
    for days, row in enumerate(rows, start=1):
        # The row and its key in the ledger, where a batch reads the days of its rows.
        earlier = row.received_at - timedelta(days=days, microseconds=7)
        InboxEvent.objects.filter(pk=row.pk).update(received_at=earlier)
        InboxKey.objects.filter(inbox_event_id=row.pk).update(received_at=earlier)
    with CaptureQueriesContext(connection) as queries:
        outcomes = inbox_events_process(ids=[r.pk for r in rows], worker="w")
    assert [o.status for o in outcomes] == ["processed", "processed"]
    assert any("closed AS" in q["sql"] for q in queries.captured_queries)
    assert_attempts_carry_their_events_time(rows)


def test_a_set_whose_row_was_claimed_since_its_read_commits_nothing():
    """A set reads its rows without a lock or a write; its close takes each only if nothing
    claimed it meanwhile. One taken by another run fails the set: no document, no revision,
    no attempt of its own, and the other run's claim untouched."""
    prefix = f"x{uuid.uuid4().hex[:8]}"
    rows = rows_for(
        [("a", 1, DOCUMENT_UPDATED, False), ("b", 1, DOCUMENT_UPDATED, False)],
        prefix=prefix,
    )
    started = timezone.now()
    claims = _batch_read(ids=[r.pk for r in rows], now=started)
    assert [c.event.attempts for c in claims] == [1, 1]
    # Another run claimed the second meanwhile (a message delivered twice).
    InboxEvent.objects.filter(pk=rows[1].pk).update(
        processing_status="processing", attempts=1
    )

    assert (
        _claims_batch_run(
            claims, integration_batch_get("research"), worker="w", started=started
        )
        is None
    )

    assert not DocumentRevision.objects.filter(inbox_event__in=rows).exists()
    assert not ResearchDocument.objects.filter(entity_id__startswith=prefix).exists()
    assert list(
        InboxEvent.objects.filter(pk__in=[r.pk for r in rows])
        .order_by("pk")
        .values_list("processing_status", "attempts")
    ) == [("received", 0), ("processing", 1)]
    assert not InboxAttempt.objects.filter(event__in=rows).exists()


def test_a_set_writes_each_row_once_and_its_attempt_whole():
    """A set's rows go from ``received`` to their outcome in one new version each, written
    in the transaction of the domain change, their attempts inserted with start and end: no
    claim of their own is ever committed (docs/subsystems/processing.md, "A set in one
    transaction")."""
    rows = rows_for(
        [("a", 1, DOCUMENT_UPDATED, False), ("b", 1, DOCUMENT_UPDATED, False)],
        prefix=f"x{uuid.uuid4().hex[:8]}",
    )
    with CaptureQueriesContext(connection) as queries:
        outcomes = inbox_events_process(ids=[r.pk for r in rows], worker="w")
    assert [o.status for o in outcomes] == ["processed", "processed"]
    inbox_writes = [
        q["sql"]
        for q in queries.captured_queries
        if f'UPDATE "{InboxEvent._meta.db_table}"' in q["sql"]
        or f"UPDATE {InboxEvent._meta.db_table}" in q["sql"]
    ]
    assert len(inbox_writes) == 1, inbox_writes
    assert "closed AS" in inbox_writes[0]
    attempts = InboxAttempt.objects.filter(event__in=rows).order_by("event_id")
    assert [(a.number, a.outcome, a.resulting_status, a.worker) for a in attempts] == [
        (1, "succeeded", "processed", "w")
    ] * 2
    assert all(a.started_at <= a.finished_at for a in attempts)
    assert set(
        InboxEvent.objects.filter(pk__in=[r.pk for r in rows]).values_list(
            "attempts", "lease_expires_at"
        )
    ) == {(1, None)}


def test_a_message_delivered_again_claims_its_rows_before_running_them():
    """``sets=False`` (a message the broker delivered again: its worker may have died in
    the run): the rows are claimed and committed ``processing`` with their lease first, so
    that a row that kills its worker is counted; they still end as a set would end them."""
    rows = rows_for(
        [("a", 1, DOCUMENT_UPDATED, False), ("a", 2, DOCUMENT_UPDATED, False)],
        prefix=f"x{uuid.uuid4().hex[:8]}",
    )
    with CaptureQueriesContext(connection) as queries:
        outcomes = inbox_events_process(
            ids=[r.pk for r in rows], worker="w", sets=False
        )
    assert [o.status for o in outcomes] == ["processed", "processed"]
    assert any("WITH claimed AS" in q["sql"] for q in queries.captured_queries)
    assert not any("closed AS" in q["sql"] for q in queries.captured_queries)
    assert (
        list(
            InboxAttempt.objects.filter(event__in=rows)
            .order_by("event_id")
            .values_list("number", "outcome")
        )
        == [(1, "succeeded")] * 2
    )


def test_a_document_created_meanwhile_falls_back_to_one_event_at_a_time(monkeypatch):
    """The set decides a document it did not find as new and inserts it with its final
    state; if another transaction created it between the lock and the write, the insert
    finds it and the set is rolled back: per event, the existing document's state decides."""
    prefix = f"x{uuid.uuid4().hex[:8]}"
    first, *rest = rows_for(
        [
            ("a", 5, DOCUMENT_UPDATED, False),
            ("a", 4, DOCUMENT_UPDATED, False),
            ("a", 6, DOCUMENT_UPDATED, False),
        ],
        prefix=prefix,
    )
    assert inbox_event_process(inbox_event_id=first.pk).status == "processed"
    # As if the lock had run before that document existed.
    monkeypatch.setattr(research_services, "_documents_lock", lambda entity_ids: {})

    outcomes = inbox_events_process(ids=[r.pk for r in rest], worker="w")

    assert [o.status for o in outcomes] == ["ignored_out_of_order", "processed"]
    assert ResearchDocument.objects.filter(entity_id=f"{prefix}_a").count() == 1
    assert list(
        DocumentRevision.objects.filter(document__entity_id=f"{prefix}_a")
        .order_by("id")
        .values_list("source_version", flat=True)
    ) == [5, 6]
