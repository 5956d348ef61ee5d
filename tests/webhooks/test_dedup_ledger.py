"""The deduplication ledger (docs/subsystems/inbox.md, "The deduplication ledger"): one key
per accepted event, written by the statement that records the delivery, deciding new,
duplicate and conflict whether or not the inbox row is still there. Runs on PostgreSQL and,
through ``tests/core/test_embedded_default_inputs.py``, on SQLite."""

from __future__ import annotations

import hashlib
import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from tests.integrations.github.factories import github_headers
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    RESEARCH_SOURCE,
    encode,
    signed_post,
    webhook_post,
)
from webhooks import statements
from webhooks.models import FingerprintMismatch, InboxEvent, InboxKey

pytestmark = pytest.mark.django_db


def _row_leaves(event_id: str) -> int:
    """The inbox row of ``event_id`` removed by hand, as retention removes rows: its key
    stays. Returns the row's id."""
    row = InboxEvent.objects.get(event_id=event_id)
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {InboxEvent._meta.db_table} WHERE id = %s",  # noqa: S608
            [row.pk],
        )
    return row.pk


def test_a_new_event_writes_its_key_with_the_row_under_the_same_id(http, source):
    body = research_event()
    assert signed_post(http, RESEARCH_SOURCE, body).status_code == 202

    row = InboxEvent.objects.get()
    key = InboxKey.objects.get()
    assert key.inbox_event_id == row.pk
    assert (key.source_id, key.event_id) == (row.source_id, row.event_id)
    # The fingerprint as its 32 bytes (webhooks.0037), read back as the row holds it.
    assert bytes(key.content_digest) == bytes.fromhex(row.content_fingerprint)
    assert key.content_fingerprint is None
    assert key.fingerprint == row.content_fingerprint
    assert key.received_at == row.received_at
    assert key.body_key is None  # a signed id: no body key
    assert key.delivery_count == 1


def test_a_duplicate_counts_on_the_key_and_on_the_row(http, source):
    body = research_event()
    for _ in range(3):
        signed_post(http, RESEARCH_SOURCE, body)

    assert InboxKey.objects.get().delivery_count == 3
    assert InboxEvent.objects.get().delivery_count == 3
    assert InboxEvent.objects.count() == 1


def test_a_duplicate_after_the_row_left_is_still_a_duplicate(http, source):
    body = research_event()
    signed_post(http, RESEARCH_SOURCE, body)
    row_id = _row_leaves(body["event_id"])

    response = signed_post(http, RESEARCH_SOURCE, body)

    assert response.status_code == 200
    answer = response.json()
    assert answer["status"] == "duplicate"
    assert answer["event_id"] == body["event_id"]
    assert InboxEvent.objects.count() == 0  # nothing stored again
    key = InboxKey.objects.get()
    assert (key.inbox_event_id, key.delivery_count) == (row_id, 2)


def test_a_conflict_after_the_row_left_is_409_with_its_evidence(http, source):
    original = research_event()
    signed_post(http, RESEARCH_SOURCE, original)
    fingerprint = InboxEvent.objects.get().content_fingerprint
    row_id = _row_leaves(original["event_id"])
    conflicting = original | {"data": {"summary": "rewritten"}}

    response = signed_post(http, RESEARCH_SOURCE, conflicting)

    assert response.status_code == 409
    assert response.json() == {
        "status": "rejected_inconsistent_duplicate",
        "error": "inconsistent_duplicate",
        "event_id": original["event_id"],
    }
    evidence = FingerprintMismatch.objects.get()
    assert evidence.event_id == row_id
    assert evidence.original_fingerprint == fingerprint
    assert bytes(evidence.raw_body) == encode(conflicting)
    assert InboxEvent.objects.count() == 0
    assert InboxKey.objects.get().delivery_count == 1  # a conflict counts nothing


def _key_as_written_before_0037(event_id: str) -> str:
    """The key of ``event_id`` made as migration 0037 finds the keys stored before it: the
    fingerprint as hex text, no digest. Returns that text."""
    key = InboxKey.objects.get(event_id=event_id)
    fingerprint = key.fingerprint
    InboxKey.objects.filter(pk=key.pk).update(
        content_fingerprint=fingerprint, content_digest=None
    )
    return fingerprint


@pytest.mark.parametrize("row_left", [False, True], ids=["row-stored", "row-left"])
def test_a_key_stored_before_the_digest_answers_duplicates_and_conflicts_as_before(
    http, source, row_left
):
    original = research_event()
    assert signed_post(http, RESEARCH_SOURCE, original).status_code == 202
    fingerprint = _key_as_written_before_0037(original["event_id"])
    row_id = InboxEvent.objects.get().pk
    if row_left:
        _row_leaves(original["event_id"])

    again = signed_post(http, RESEARCH_SOURCE, original)
    conflicting = original | {"data": {"summary": "rewritten"}}
    refused = signed_post(http, RESEARCH_SOURCE, conflicting)

    assert again.status_code == 200
    assert again.json()["event_id"] == original["event_id"]
    assert refused.status_code == 409
    assert refused.json()["error"] == "inconsistent_duplicate"
    evidence = FingerprintMismatch.objects.get()
    assert (evidence.event_id, evidence.original_fingerprint) == (row_id, fingerprint)
    key = InboxKey.objects.get()
    assert (key.delivery_count, key.content_digest) == (2, None)  # left as it was
    assert InboxEvent.objects.count() == (0 if row_left else 1)


def test_a_github_body_under_a_fresh_id_after_the_row_left_names_the_stored_event(
    http, github_source
):
    raw = b'{"zen": "Keep it logically awesome.", "hook_id": 1}'
    first = webhook_post(http, "github", raw, github_headers(raw, delivery="d-first"))
    assert first.status_code == 202
    _row_leaves("d-first")

    again = webhook_post(http, "github", raw, github_headers(raw, delivery="d-copy"))

    assert again.status_code == 200
    assert again.json()["event_id"] == "d-first"
    key = InboxKey.objects.get()
    assert key.body_key == hashlib.sha256(raw).hexdigest()
    assert key.delivery_count == 2
    assert InboxEvent.objects.count() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="one writer at a time on SQLite"
)
def test_a_duplicate_waiting_on_its_first_delivery_counts_on_the_row_it_committed(
    http, source
):
    """The first delivery's transaction holds its new key; a copy arriving meanwhile waits
    on the ledger's unique index and, once the first commits, counts on a row its own
    statement began too early to see: the count still reaches the row, and the answer
    carries the row's status."""
    body = research_event()
    first_in = threading.Event()
    release = threading.Event()

    def first_delivery() -> None:
        try:
            with transaction.atomic():
                assert signed_post(http, RESEARCH_SOURCE, body).status_code == 202
                first_in.set()
                release.wait(10)
        finally:
            connections.close_all()

    answers = []

    def copy() -> None:
        try:
            answers.append(signed_post(http, RESEARCH_SOURCE, body))
        finally:
            connections.close_all()

    holder = threading.Thread(target=first_delivery)
    holder.start()
    assert first_in.wait(10)
    waiting = threading.Thread(target=copy)
    waiting.start()
    waiting.join(1.0)
    assert waiting.is_alive()  # held on the first delivery's key
    release.set()
    holder.join(10)
    waiting.join(10)

    [answer] = answers
    assert answer.status_code == 200
    assert answer.json()["processing_status"] == "received"
    assert InboxEvent.objects.get().delivery_count == 2
    assert InboxKey.objects.get().delivery_count == 2


def test_two_copies_counted_on_another_day_s_row_in_either_order_keep_the_higher_count(
    http, source
):
    """A copy of an event whose row is on a day the recording statement does not read is
    counted on its key, committed, then on its row by a second statement. Two such copies,
    counted 2 and 3 on the key, may reach the row in either order: the row keeps 3 and the
    later of their times (seen lost in the live race of ten copies across a midnight)."""
    body = research_event()
    assert signed_post(http, RESEARCH_SOURCE, body).status_code == 202
    row = InboxEvent.objects.get()
    earlier, later = timezone.now(), timezone.now() + timedelta(seconds=1)
    count = statements.inbox_duplicate_count_sql(connection.vendor)
    instant = connection.ops.adapt_datetimefield_value  # as ingest passes them
    with connection.cursor() as cursor:
        cursor.execute(count, [3, instant(later), row.pk, instant(row.received_at)])
        cursor.execute(count, [2, instant(earlier), row.pk, instant(row.received_at)])
    row.refresh_from_db()
    assert (row.delivery_count, row.last_seen_at) == (3, later)
