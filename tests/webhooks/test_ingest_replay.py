"""A signed GitHub body posted again under a fresh ``X-GitHub-Delivery``: GitHub signs the body
only, so the delivery id is the attacker's to choose. The body already stored for the source is
the event; a copy under another id is its duplicate (docs/security.md, "Replays")."""

import hashlib
import json

import pytest
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import REGISTRY

from tests.integrations.fixtures import fixture_bytes
from tests.integrations.github.factories import github_headers
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    WebhookSourceFactory,
    encode,
    signed_headers,
    signed_post,
    webhook_post,
)
from webhooks.models import FingerprintMismatch, InboxEvent

pytestmark = pytest.mark.django_db


def duplicates() -> float:
    return REGISTRY.get_sample_value("webhook_duplicates_total") or 0.0


def test_a_github_body_under_a_fresh_delivery_id_is_a_duplicate_of_the_original(
    http, github_source, caplog
):
    raw = fixture_bytes("github", "deployment_status__basic")
    first = webhook_post(
        http,
        github_source.slug,
        raw,
        github_headers(raw, event="deployment_status", delivery="d-orig"),
    )
    assert first.status_code == 202, first.content
    before = duplicates()

    with (
        caplog.at_level("INFO"),
        TestCase.captureOnCommitCallbacks(execute=False) as published,
    ):
        replay = webhook_post(
            http,
            github_source.slug,
            raw,
            github_headers(raw, event="deployment_status", delivery="d-replayed"),
        )

    assert replay.status_code == 200, replay.content
    assert replay.json() == {
        "status": "duplicate",
        "event_id": "d-orig",
        "processing_status": "received",
    }
    row = InboxEvent.objects.get()  # no second row, no second body
    assert row.event_id == "d-orig"
    assert row.delivery_count == 2
    assert row.last_seen_at > row.received_at
    assert published == []  # nothing new to process
    assert duplicates() == before + 1
    logged = [vars(r) for r in caplog.records if r.msg == "inbox.duplicate"]
    assert logged, [r.msg for r in caplog.records]
    assert logged[-1]["event_id"] == "d-orig"
    assert logged[-1]["delivery_id"] == "d-replayed"


def test_a_replay_with_another_event_header_is_still_the_same_event(
    http, github_source
):
    raw = fixture_bytes("github", "ping__basic")
    webhook_post(
        http, github_source.slug, raw, github_headers(raw, event="ping", delivery="d-1")
    )
    replay = webhook_post(
        http,
        github_source.slug,
        raw,
        github_headers(raw, event="deployment_status", delivery="d-2"),
    )
    assert replay.status_code == 200
    assert replay.json()["event_id"] == "d-1"
    row = InboxEvent.objects.get()
    assert row.event_type == "ping"  # the unsigned header changed nothing stored


def test_the_duplicate_reports_the_original_rows_current_status(http, github_source):
    raw = fixture_bytes("github", "ping__basic")
    webhook_post(http, github_source.slug, raw, github_headers(raw, delivery="d-1"))
    InboxEvent.objects.update(processing_status="processed")
    replay = webhook_post(
        http, github_source.slug, raw, github_headers(raw, delivery="d-2")
    )
    assert replay.json() == {
        "status": "duplicate",
        "event_id": "d-1",
        "processing_status": "processed",
    }


def test_a_purged_body_still_identifies_its_event(http, github_source):
    raw = fixture_bytes("github", "ping__basic")
    webhook_post(http, github_source.slug, raw, github_headers(raw, delivery="d-1"))
    InboxEvent.objects.update(
        raw_body=None, body_purged_at=timezone.now(), processing_status="processed"
    )
    replay = webhook_post(
        http, github_source.slug, raw, github_headers(raw, delivery="d-2")
    )
    assert replay.status_code == 200
    assert replay.json()["event_id"] == "d-1"
    assert InboxEvent.objects.count() == 1


def test_same_delivery_id_with_another_body_is_still_the_409_with_evidence(
    http, github_source
):
    raw = fixture_bytes("github", "ping__basic")
    webhook_post(http, github_source.slug, raw, github_headers(raw, delivery="d-1"))
    original = InboxEvent.objects.values().get()
    other = fixture_bytes("github", "deployment_status__basic")

    response = webhook_post(
        http, github_source.slug, other, github_headers(other, delivery="d-1")
    )

    assert response.status_code == 409
    assert response.json()["error"] == "inconsistent_duplicate"
    assert InboxEvent.objects.values().get() == original
    evidence = FingerprintMismatch.objects.get()
    assert bytes(evidence.raw_body) == other
    assert evidence.conflicting_payload_hash == hashlib.sha256(other).hexdigest()


def test_same_delivery_id_and_body_is_the_plain_duplicate(http, github_source):
    raw = fixture_bytes("github", "ping__basic")
    headers = github_headers(raw, delivery="d-1")
    webhook_post(http, github_source.slug, raw, headers)
    again = webhook_post(http, github_source.slug, raw, headers)
    assert again.status_code == 200
    assert again.json()["event_id"] == "d-1"
    assert InboxEvent.objects.get().delivery_count == 2


def test_other_bodies_are_other_events(http, github_source):
    for n in range(3):
        raw = json.dumps({"zen": f"zen {n}", "hook_id": n}).encode()
        response = webhook_post(
            http, github_source.slug, raw, github_headers(raw, delivery=f"d-{n}")
        )
        assert response.status_code == 202
    assert InboxEvent.objects.count() == 3


def test_two_samples_sent_to_a_github_source_are_two_events(http, github_source):
    from integrations.github import integration

    for delivery in ("sample-1", "sample-2"):
        sample = integration.sample(event_id=delivery)
        headers = github_headers(sample.raw_body, delivery=delivery)
        response = webhook_post(http, github_source.slug, sample.raw_body, headers)
        assert response.status_code == 202, response.content
    assert InboxEvent.objects.count() == 2


def test_one_body_is_one_event_per_source(http, github_source):
    WebhookSourceFactory(slug="github-2", scheme="github", handler="github")
    raw = fixture_bytes("github", "ping__basic")
    webhook_post(http, github_source.slug, raw, github_headers(raw, delivery="d-1"))
    other_source = webhook_post(
        http, "github-2", raw, github_headers(raw, delivery="d-2")
    )
    assert other_source.status_code == 202
    assert InboxEvent.objects.count() == 2


# --- what it costs ----------------------------------------------------------------------------


# On SQLite (the embedded default) a delivery is recorded in three statements of one
# transaction (docs/subsystems/inbox.md, "The deduplication ledger"): the costs are
# PostgreSQL's.
postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="one statement on PostgreSQL only"
)


@postgresql_only
def test_the_research_insert_path_is_still_one_read_and_one_statement(http, source):
    """The body guard is for schemes that do not sign the id: a research event (its id is in
    the signed body) costs the source lookup and the one upsert, as before."""
    body = research_event()
    with CaptureQueriesContext(connection) as queries:
        assert signed_post(http, source.slug, body).status_code == 202
    assert len(queries) == 2, [q["sql"][:80] for q in queries]
    assert "ON CONFLICT" in queries[1]["sql"]
    with CaptureQueriesContext(connection) as queries:
        redelivery = {**body, "delivered_at": "2026-12-01T00:00:00Z"}
        assert signed_post(http, source.slug, redelivery).status_code == 200
    assert len(queries) == 2


@postgresql_only
def test_a_github_event_and_its_replay_cost_one_statement_each(http, github_source):
    raw = fixture_bytes("github", "ping__basic")
    for delivery, status in (("d-1", 202), ("d-2", 200)):
        with CaptureQueriesContext(connection) as queries:
            response = webhook_post(
                http, github_source.slug, raw, github_headers(raw, delivery=delivery)
            )
        assert response.status_code == status
        # The source lookup and the upsert (inside the test's transaction, the upsert runs
        # in a savepoint: a conflict on the delivery id must not abort the transaction).
        statements = [q["sql"] for q in queries if "SAVEPOINT" not in q["sql"].upper()]
        assert len(statements) == 2, statements


def test_the_research_scheme_rows_do_not_enter_the_body_index(http, source):
    signed_post(http, source.slug, research_event())
    assert InboxEvent.objects.get().body_key is None


def test_research_events_with_byte_identical_bodies_are_unaffected(http, source):
    body = research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])
    assert webhook_post(http, source.slug, raw, headers).status_code == 202
    assert webhook_post(http, source.slug, raw, headers).status_code == 200
    assert InboxEvent.objects.get().delivery_count == 2
