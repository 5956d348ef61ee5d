"""Ordering as a property: any interleaving and duplication of a set of events, processed by
concurrent workers (threads, each with its own PostgreSQL connection), ends at the newest
state, with strictly increasing revisions and no event applied twice."""

import functools
import random
import uuid
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from research.models import DocumentRevision, ResearchDocument
from tests.examples import max_examples
from tests.integrations.research.factories import BASE_TIME, research_event
from tests.threads import run_together
from tests.webhooks.factories import inbox_events_bulk_create
from webhooks.models import InboxAttempt, InboxEvent
from webhooks.processing import inbox_events_process

pytestmark = [pytest.mark.django_db(transaction=True)]

WORKERS = 3
KINDS = st.sampled_from(
    [
        "research.document.created",
        "research.document.updated",
        "research.document.updated",
        "research.document.deleted",
    ]
)
PROPERTY_SETTINGS = settings(
    max_examples=max_examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def run_concurrently(ids: list[int], schedule: st.DataObject) -> None:
    """Every id once or twice, shuffled, dealt to WORKERS threads that start together; each
    thread runs its ids in batches of 1 to 4 (a batch of several applies as a set)."""
    runs = [pk for pk in ids for _ in range(schedule.draw(st.integers(1, 2)))]
    runs = schedule.draw(st.permutations(runs))
    lanes = [runs[i::WORKERS] for i in range(WORKERS)]
    size = schedule.draw(st.integers(1, 4))

    def worker(lane: list[int], name: str) -> None:
        for start in range(0, len(lane), size):
            inbox_events_process(ids=lane[start : start + size], worker=name)

    _, errors = run_together(
        [functools.partial(worker, lane, f"t{i}") for i, lane in enumerate(lanes)]
    )
    assert not errors, errors


def assert_common_invariants(entity_id: str, events: list[InboxEvent]) -> None:
    rows = InboxEvent.objects.filter(pk__in=[e.pk for e in events])
    statuses = set(rows.values_list("processing_status", flat=True))
    assert statuses <= {
        "processed",
        "ignored_out_of_order",
        "ignored_duplicate_version",
    }, statuses
    # Exactly one attempt per event: a repeated or concurrent run found it claimed or done.
    assert sorted(rows.values_list("attempts", flat=True)) == [1] * len(events)
    assert InboxAttempt.objects.filter(event__in=rows).count() == len(events)
    revisions = DocumentRevision.objects.filter(document__entity_id=entity_id)
    # No event applied twice, and every applied event has its revision.
    assert revisions.count() == rows.filter(processing_status="processed").count()
    assert len(set(revisions.values_list("inbox_event_id", flat=True))) == (
        revisions.count()
    )


@PROPERTY_SETTINGS
@given(
    events=st.lists(st.tuples(st.integers(0, 6), KINDS), min_size=1, max_size=7),
    schedule=st.data(),
)
def test_versioned_events_end_at_the_maximum_version(events, schedule):
    entity_id = f"doc_{uuid.uuid4().hex[:12]}"
    rows = inbox_events_bulk_create(
        [
            research_event(entity_id=entity_id, source_version=v, event_type=kind)
            for v, kind in events
        ]
    )
    run_concurrently([r.pk for r in rows], schedule)

    assert_common_invariants(entity_id, rows)
    top = max(v for v, _ in events)
    doc = ResearchDocument.objects.get(entity_id=entity_id)
    assert doc.current_source_version == top
    winner = InboxEvent.objects.get(event_id=doc.last_event_id)
    assert (winner.source_version, winner.processing_status) == (top, "processed")
    top_kinds = {kind for v, kind in events if v == top}
    winner_kind = winner.event_type
    assert winner_kind in top_kinds
    assert doc.is_deleted is (winner_kind == "research.document.deleted")
    versions = list(
        DocumentRevision.objects.filter(document=doc)
        .order_by("id")
        .values_list("source_version", flat=True)
    )
    assert versions == sorted(set(versions)), versions  # strictly increasing
    assert versions[-1] == top
    # At most one applied event per version; the others are duplicates or out of order.
    for row in InboxEvent.objects.filter(pk__in=[r.pk for r in rows]):
        if row.source_version not in versions:
            assert row.processing_status == "ignored_out_of_order"


@PROPERTY_SETTINGS
@given(
    events=st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from("abcdefgh"), KINDS),
        min_size=1,
        max_size=7,
        unique_by=lambda e: e[1],
    ),
    schedule=st.data(),
)
def test_unversioned_events_end_at_the_latest_occurred_at_then_event_id(
    events, schedule
):
    entity_id = f"doc_{uuid.uuid4().hex[:12]}"
    prefix = uuid.uuid4().hex[:8]
    envelopes = [
        research_event(
            entity_id=entity_id,
            occurred_at=BASE_TIME + timedelta(seconds=second),
            event_id=f"evt_{prefix}_{letter}",
            event_type=kind,
        )
        for second, letter, kind in events
    ]
    rows = inbox_events_bulk_create(envelopes)
    run_concurrently([r.pk for r in rows], schedule)

    assert_common_invariants(entity_id, rows)
    expected = max(rows, key=lambda r: (r.occurred_at, r.event_id))
    doc = ResearchDocument.objects.get(entity_id=entity_id)
    assert doc.last_event_id == expected.event_id
    assert doc.is_deleted is (expected.event_type == "research.document.deleted")
    order = list(
        DocumentRevision.objects.filter(document=doc)
        .order_by("id")
        .values_list("occurred_at", "event_id")
    )
    assert order == sorted(set(order)), order
    assert order[-1] == (expected.occurred_at, expected.event_id)


def test_versions_one_to_twenty_shuffled_with_duplicates_end_at_twenty():
    """Versions 1 to 20 of one document, each twice (two events of one version), shuffled
    and dealt to three workers in batches of five (applied as sets): the document ends at
    20, every applied event has one revision, in increasing versions."""
    entity_id = f"doc_{uuid.uuid4().hex[:12]}"
    versions = [v for v in range(1, 21) for _ in range(2)]
    random.Random(20).shuffle(versions)
    rows = inbox_events_bulk_create(
        [research_event(entity_id=entity_id, source_version=v) for v in versions]
    )
    ids = [r.pk for r in rows]
    random.Random(21).shuffle(ids)
    lanes = [ids[i::WORKERS] for i in range(WORKERS)]

    def worker(lane: list[int], name: str) -> None:
        for start in range(0, len(lane), 5):
            inbox_events_process(ids=lane[start : start + 5], worker=name)

    _, errors = run_together(
        [functools.partial(worker, lane, f"t{i}") for i, lane in enumerate(lanes)]
    )
    assert not errors, errors

    assert_common_invariants(entity_id, rows)
    doc = ResearchDocument.objects.get(entity_id=entity_id)
    assert doc.current_source_version == 20
    applied = list(
        DocumentRevision.objects.filter(document=doc)
        .order_by("id")
        .values_list("source_version", flat=True)
    )
    assert applied == sorted(set(applied)) and applied[-1] == 20
