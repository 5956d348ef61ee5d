"""``POST /webhooks/<slug>/`` through the real view and PostgreSQL: every row of the
checks table, in order, with the exact status and error codes."""

import hashlib
import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone
from prometheus_client import REGISTRY
from standardwebhooks.webhooks import Webhook

from core.actors import Actor
from core.canonical import canonical_json
from core.logging import CELERY_HEADER
from core.relay.outbox import relay_round
from tests.broker import broker_messages, broker_reset
from tests.integrations.fixtures import fixture_json
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    HMAC_SECRET,
    RESEARCH_SOURCE,
    STANDARD_SECRET,
    encode,
    signed_headers,
    signed_post,
    webhook_post,
)
from webhooks.models import (
    FingerprintMismatch,
    InboxEvent,
    InboxKey,
    SignatureFailure,
    WebhookSecret,
)
from webhooks.outbox import INBOX_OUTBOX
from webhooks.sources import webhook_source_rotate

pytestmark = pytest.mark.django_db


def post(http, raw_body: bytes, headers: dict, slug: str = RESEARCH_SOURCE, **extra):
    return webhook_post(http, slug, raw_body, headers, **extra)


def post_signed(http, body, *, slug: str = RESEARCH_SOURCE, **signing):
    return signed_post(http, slug, body, **signing)


def metric(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def failures(reason: str) -> int:
    return sum(
        SignatureFailure.objects.filter(reason=reason).values_list("count", flat=True)
    )


# --- accepted, duplicate, conflict -------------------------------------------------------------


def test_new_event_is_accepted_and_stored_with_every_field(http, source):
    body = fixture_json("research", "research.document.updated__basic")
    raw = encode(body)
    before = metric("webhook_requests_total", source="research-sync", status="202")
    response = post(http, raw, signed_headers(raw_body=raw, event_id=body["event_id"]))

    assert response.status_code == 202, response.content
    assert response.json() == {"status": "accepted", "event_id": body["event_id"]}
    row = InboxEvent.objects.get()
    assert row.source == source
    assert row.event_id == body["event_id"]
    assert row.event_type == "research.document.updated"
    assert (row.entity_id, row.entity_type) == ("doc-42", "research_document")
    assert row.source_version == 7
    assert row.occurred_at == datetime(2026, 11, 30, 18, 0, 0, 123000, tzinfo=UTC)
    assert row.tenant_id == "tenant-7"
    assert row.idempotency_key == "sync-2026-11-30-0001"
    assert bytes(row.raw_body) == raw
    assert row.payload_hash == hashlib.sha256(raw).hexdigest()
    without_delivery = {
        k: v for k, v in body.items() if k not in ("delivered_at", "delivery_attempt")
    }
    assert (
        row.content_fingerprint
        == hashlib.sha256(canonical_json(without_delivery)).hexdigest()
    )
    assert row.processing_status == "received"
    assert row.signature_valid is True
    assert row.delivery_count == 1
    assert row.attempts == 0
    assert row.remote_addr == "127.0.0.1"
    assert row.headers["x-webhook-id"] == body["event_id"]
    signature = signed_headers(raw_body=raw, event_id="x")["X-Webhook-Signature"]
    assert row.headers["x-webhook-signature"].endswith("...")
    assert len(row.headers["x-webhook-signature"]) < len(signature)
    assert (
        metric("webhook_requests_total", source="research-sync", status="202")
        == before + 1
    )


def test_accepted_event_publishes_nothing_and_waits_for_the_relay(http, source):
    """The request commits the row and answers: no broker call, nothing left to run after
    the commit. The row waits in the outbox; one relay round publishes it once."""
    from django.test import TestCase

    broker_reset()
    body = research_event()
    with TestCase.captureOnCommitCallbacks(execute=True) as callbacks:
        response = post_signed(http, body)
    assert response.status_code == 202
    assert callbacks == []
    assert broker_messages() == []
    row = InboxEvent.objects.get()
    assert row.dispatched_at is None
    assert INBOX_OUTBOX.has_waiting()
    assert INBOX_OUTBOX.oldest_waiting() == row.received_at

    assert relay_round(INBOX_OUTBOX, INBOX_OUTBOX.claim, 10) == 1
    (message,) = broker_messages()
    assert (message["task"], message["args"]) == (
        "webhooks.process_inbox_events",
        [[row.pk]],
    )
    assert message["headers"][CELERY_HEADER] == body["event_id"]
    row.refresh_from_db()
    assert row.dispatched_at is not None
    assert not INBOX_OUTBOX.has_waiting()
    assert relay_round(INBOX_OUTBOX, INBOX_OUTBOX.claim, 10) == 0
    assert len(broker_messages()) == 1
    broker_reset()


def test_redelivery_changing_only_delivery_fields_is_a_duplicate(http, source):
    first = research_event()
    assert post_signed(http, first).status_code == 202
    before = metric("webhook_duplicates_total")
    retry = first | {"delivered_at": "2026-11-30T18:10:00Z", "delivery_attempt": 2}

    response = post_signed(http, retry)

    assert response.status_code == 200, response.content
    assert response.json() == {
        "status": "duplicate",
        "event_id": first["event_id"],
        "processing_status": "received",
    }
    row = InboxEvent.objects.get()
    assert row.delivery_count == 2
    assert row.last_seen_at > row.received_at
    assert bytes(row.raw_body) == encode(first)  # the stored body never changes
    assert metric("webhook_duplicates_total") == before + 1


def hot_updates_in_this_transaction() -> int:
    """Of the inbox's partitions (docs/scaling.md, "Time partitions of the inbox")."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(SUM(pg_stat_get_xact_tuples_hot_updated(inhrelid)), 0)"
            " FROM pg_inherits WHERE inhparent = %s::regclass",
            [InboxEvent._meta.db_table],
        )
        return cursor.fetchone()[0]


def key_updates_in_this_transaction() -> tuple[int, int]:
    """The ledger's updates in this transaction, and how many of them were HOT."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_stat_get_xact_tuples_updated(%s::regclass),"
            " pg_stat_get_xact_tuples_hot_updated(%s::regclass)",
            [InboxKey._meta.db_table] * 2,
        )
        return cursor.fetchone()


def test_a_duplicate_counts_itself_on_its_row_without_touching_an_index(http, source):
    """The count and the last-seen time are read by no index, and the inbox's pages keep
    room (fillfactor 85, ``webhooks.0021``): the update of a duplicate is a HOT update even
    on a page that inserts filled, with no entry written in the inbox's indexes. Its key in
    the ledger likewise (fillfactor 95, ``webhooks.0034``), on a page of keys filled."""
    events = [research_event() for _ in range(120)]  # the first pages filled
    for event in events:
        assert post_signed(http, event).status_code == 202
    before = hot_updates_in_this_transaction()
    keys_before = key_updates_in_this_transaction()

    assert post_signed(http, events[0]).status_code == 200

    assert hot_updates_in_this_transaction() == before + 1
    updated, hot = key_updates_in_this_transaction()
    assert (updated - keys_before[0], hot - keys_before[1]) == (1, 1)
    assert InboxEvent.objects.get(event_id=events[0]["event_id"]).delivery_count == 2


def test_same_id_with_other_content_is_409_with_evidence_and_original_untouched(
    http, source
):
    original = research_event()
    post_signed(http, original)
    row_before = InboxEvent.objects.values().get()
    before = metric("webhook_inconsistent_duplicates_total")
    conflicting = original | {"data": {"summary": "rewritten"}}

    response = post_signed(http, conflicting)

    assert response.status_code == 409
    assert response.json() == {
        "status": "rejected_inconsistent_duplicate",
        "error": "inconsistent_duplicate",
        "event_id": original["event_id"],
    }
    assert InboxEvent.objects.values().get() == row_before  # not even delivery_count
    evidence = FingerprintMismatch.objects.get()
    assert evidence.event_id == row_before["id"]
    assert bytes(evidence.raw_body) == encode(conflicting)
    assert evidence.original_fingerprint == row_before["content_fingerprint"]
    assert evidence.conflicting_fingerprint != row_before["content_fingerprint"]
    assert (
        evidence.conflicting_payload_hash
        == hashlib.sha256(encode(conflicting)).hexdigest()
    )
    assert evidence.remote_addr == "127.0.0.1"
    assert evidence.headers["x-webhook-id"] == original["event_id"]
    assert metric("webhook_inconsistent_duplicates_total") == before + 1


def test_duplicate_reports_the_current_processing_status(http, source):
    body = research_event()
    post_signed(http, body)
    InboxEvent.objects.update(processing_status="processed")
    response = post_signed(http, body)
    assert response.json()["processing_status"] == "processed"


# --- source, method, size -------------------------------------------------------------------


def test_unknown_source_is_404_for_any_method(http, db):
    assert post_signed(http, research_event(), slug="nope").status_code == 404
    response = http.get("/webhooks/nope/")
    assert response.status_code == 404
    assert response.json() == {"error": "unknown_source"}


def test_disabled_source_is_404_and_stores_nothing(http, source):
    source.is_enabled = False
    source.save()
    response = post_signed(http, research_event())
    assert response.status_code == 404
    assert response.json() == {"error": "unknown_source"}
    assert not InboxEvent.objects.exists()


@pytest.mark.parametrize("method", ["get", "put", "patch", "delete"])
def test_other_methods_are_405(http, source, method):
    response = getattr(http, method)(f"/webhooks/{RESEARCH_SOURCE}/")
    assert response.status_code == 405
    assert response["Allow"] == "POST"


def test_body_over_the_limit_is_413_before_the_signature(http, source, settings):
    settings.WEBHOOK_MAX_BODY_BYTES = 2048
    body = research_event(data={"summary": "x" * 3000})
    response = post_signed(http, body)
    assert response.status_code == 413
    assert response.json() == {"error": "payload_too_large"}
    assert not InboxEvent.objects.exists()
    assert not SignatureFailure.objects.exists()  # refused before any verification


def test_body_at_the_limit_is_accepted(http, source, settings):
    body = research_event()
    raw = encode(body)
    settings.WEBHOOK_MAX_BODY_BYTES = len(raw)
    assert post_signed(http, raw, event_id=body["event_id"]).status_code == 202


def test_declared_length_over_the_limit_is_413_without_reading(http, source, settings):
    settings.WEBHOOK_MAX_BODY_BYTES = 2048
    body = research_event()
    raw = encode(body)
    response = post(
        http,
        raw,
        signed_headers(raw_body=raw, event_id=body["event_id"]),
        CONTENT_LENGTH="5000000",
    )
    assert response.status_code == 413


# --- authentication -------------------------------------------------------------------------


def test_missing_signature_is_401_counted_with_its_reason(http, source):
    before = metric(
        "webhook_signature_failures_total", source="research-sync", reason="missing"
    )
    response = post(http, encode(research_event()), {})
    assert response.status_code == 401
    assert response.json() == {"error": "unauthorized"}
    assert failures("missing") == 1
    assert (
        metric(
            "webhook_signature_failures_total", source="research-sync", reason="missing"
        )
        == before + 1
    )
    assert not InboxEvent.objects.exists()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"X-Webhook-Signature": ""}, "missing"),
        ({"X-Webhook-Timestamp": ""}, "missing"),
        ({"X-Webhook-Signature": "sha256=abc"}, "malformed"),
        ({"X-Webhook-Signature": "v2=" + "a" * 64}, "malformed"),
        ({"X-Webhook-Signature": "v1=" + "a" * 64}, "mismatch"),
    ],
)
def test_bad_signature_headers_are_401(http, source, change, reason):
    body = research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"]) | change
    response = post(http, raw, headers)
    assert response.status_code == 401
    assert response.json() == {"error": "unauthorized"}
    assert failures(reason) == 1
    assert not InboxEvent.objects.exists()


def test_signature_over_other_bytes_is_401(http, source):
    body = research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])
    response = post(http, json.dumps(body, indent=1).encode(), headers)
    assert response.status_code == 401
    assert failures("mismatch") == 1


def test_failures_are_one_bounded_counter_row_per_reason_and_minute(http, source):
    for _ in range(30):
        post(
            http,
            encode(research_event()),
            {"X-Webhook-Signature": "v1=" + "a" * 64, "X-Webhook-Timestamp": "1"},
        )
    # 30 failures cost one counter row (two if the run straddles a minute boundary).
    assert SignatureFailure.objects.count() in (1, 2)
    assert failures("mismatch") == 30


def test_several_signatures_one_valid_with_unknown_versions_skipped(http, source):
    body = research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])
    headers["X-Webhook-Signature"] = (
        f"v0=zz v1={'f' * 64},{headers['X-Webhook-Signature']} v2=abc"
    )
    assert post(http, raw, headers).status_code == 202


def test_rotation_old_secret_valid_during_grace_then_refused(http, source):
    old_signed = research_event(event_id="evt-old-1")
    webhook_source_rotate(
        source=source,
        secret="the-new-secret-0123456789",
        grace_seconds=3600,
        actor=Actor.system(),
    )
    assert post_signed(http, old_signed, event_id="evt-old-1").status_code == 202
    new_signed = research_event(event_id="evt-new-1")
    assert (
        post_signed(
            http, new_signed, event_id="evt-new-1", secret="the-new-secret-0123456789"
        ).status_code
        == 202
    )
    # The grace period ends.
    WebhookSecret.objects.filter(expires_at__isnull=False).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    expired = research_event(event_id="evt-old-2")
    assert post_signed(http, expired, event_id="evt-old-2").status_code == 401
    assert failures("mismatch") == 1
    still_good = research_event(event_id="evt-new-2")
    response = post_signed(
        http, still_good, event_id="evt-new-2", secret="the-new-secret-0123456789"
    )
    assert response.status_code == 202


def test_each_event_records_which_secret_verified_it_never_the_secret(http, source):
    """By its fingerprint (``WebhookSecret.fingerprint``), also during a rotation's grace
    period, when two secrets verify: what an evidence bundle names."""
    old = WebhookSecret.objects.get(source=source)
    before = research_event(event_id="evt-before")
    assert post_signed(http, before, event_id="evt-before").status_code == 202
    webhook_source_rotate(
        source=source,
        secret="the-new-secret-of-the-source",
        grace_seconds=3600,
        actor=Actor.system(),
    )
    new = WebhookSecret.objects.get(source=source, expires_at__isnull=True)
    by_old = research_event(event_id="evt-old")
    by_new = research_event(event_id="evt-new")
    assert post_signed(http, by_old, event_id="evt-old").status_code == 202
    assert (
        post_signed(
            http, by_new, event_id="evt-new", secret="the-new-secret-of-the-source"
        ).status_code
        == 202
    )

    recorded = dict(InboxEvent.objects.values_list("event_id", "secret_fingerprint"))

    assert recorded == {
        "evt-before": old.fingerprint,
        "evt-old": old.fingerprint,
        "evt-new": new.fingerprint,
    }
    assert len(old.fingerprint) == 16 and old.fingerprint != new.fingerprint
    assert HMAC_SECRET not in str(recorded) and HMAC_SECRET[:16] != old.fingerprint


def test_rotation_with_zero_grace_refuses_the_old_secret_at_once(http, source):
    webhook_source_rotate(
        source=source,
        secret="the-new-secret-0123456789",
        grace_seconds=0,
        actor=Actor.system(),
    )
    assert post_signed(http, research_event()).status_code == 401


# --- timestamp ------------------------------------------------------------------------------


# The future side starts up to a second nearer than its offset (the whole seconds of a
# timestamp) and comes nearer while the request is handled: 305 s, not 301, so that a loaded
# machine does not carry it back into the 300 s window.
@pytest.mark.parametrize("offset", [-301, 305, -86400, 10**6])
def test_timestamp_outside_the_window_either_way_is_400(http, source, offset):
    response = post_signed(http, research_event(), timestamp=int(time.time()) + offset)
    assert response.status_code == 400
    assert response.json() == {"error": "timestamp_out_of_window"}
    assert failures("timestamp_out_of_window") == 1
    assert not InboxEvent.objects.exists()


@pytest.mark.parametrize("offset", [-290, 290])
def test_timestamp_inside_the_window_either_way_is_accepted(http, source, offset):
    response = post_signed(http, research_event(), timestamp=int(time.time()) + offset)
    assert response.status_code == 202


def test_source_tolerance_overrides_the_default(http, source):
    source.timestamp_tolerance_seconds = 10
    source.save()
    response = post_signed(http, research_event(), timestamp=int(time.time()) - 60)
    assert response.status_code == 400


@pytest.mark.parametrize(
    "timestamp",
    ["1.5e9", "soon", "0x10", "17e8", "9" * 400, "-" + "9" * 400, "9" * 5000],
)
def test_signed_timestamp_that_is_not_an_integer_is_400(http, source, timestamp):
    body = research_event()
    raw = encode(body)
    digest = hashlib.sha256  # the signature must be valid for the 400 to apply
    import hmac

    signature = hmac.new(
        HMAC_SECRET.encode(), f"{timestamp}.".encode() + raw, digest
    ).hexdigest()
    headers = {
        "X-Webhook-Id": body["event_id"],
        "X-Webhook-Timestamp": timestamp,
        "X-Webhook-Signature": f"v1={signature}",
    }
    response = post(http, raw, headers)
    assert response.status_code == 400
    assert response.json() == {"error": "timestamp_out_of_window"}


def test_bad_signature_with_stale_timestamp_is_401_not_400(http, source):
    raw = encode(research_event())
    headers = {
        "X-Webhook-Id": "x",
        "X-Webhook-Timestamp": "1",
        "X-Webhook-Signature": "v1=" + "a" * 64,
    }
    assert post(http, raw, headers).status_code == 401


# --- JSON and envelope ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"event_id": "caf\xe9"}',  # Latin-1, not UTF-8
        b"\xff\xfe{}",
        b"[1, 2]",
        b'"a string"',
        b"null",
        b"",
        b"{not json",
        b'{"a": NaN}',
        b'{"a": "\\ud800"}',  # a lone surrogate cannot be stored as UTF-8
    ],
)
def test_signed_body_that_is_not_a_utf8_json_object_is_400(http, source, raw):
    response = post_signed(http, raw, event_id="evt-1")
    assert response.status_code == 400
    assert response.json() == {"error": "invalid_json"}
    assert not InboxEvent.objects.exists()


# --- the other schemes ----------------------------------------------------------------------


def test_standard_webhooks_signed_by_the_reference_library(http, standard_source):
    body = research_event()
    raw = encode(body)
    now = datetime.now(tz=UTC)
    signature = Webhook(STANDARD_SECRET).sign(body["event_id"], now, raw.decode())
    headers = {
        "webhook-id": body["event_id"],
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": f"v1,{'A' * 43}= {signature}",
    }
    response = post(http, raw, headers, slug="sw-sync")
    assert response.status_code == 202, response.content
    assert post(http, raw, headers, slug="sw-sync").status_code == 200


def test_standard_webhooks_id_is_part_of_the_signed_content(http, standard_source):
    body = research_event()
    raw = encode(body)
    now = datetime.now(tz=UTC)
    headers = {
        "webhook-id": "evt-other",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(STANDARD_SECRET).sign(
            body["event_id"], now, raw.decode()
        ),
    }
    assert post(http, raw, headers, slug="sw-sync").status_code == 401


def test_view_is_csrf_exempt_under_csrf_checks(source):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    assert post_signed(strict, research_event()).status_code == 202


def test_source_whose_secrets_all_expired_is_401_not_404(http, source):
    WebhookSecret.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = post_signed(http, research_event())
    assert response.status_code == 401
    assert failures("mismatch") == 1


def test_a_peer_address_that_is_not_an_ip_is_stored_as_none(http, source):
    body = research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])
    response = post(http, raw, headers, REMOTE_ADDR="unix:/run/gunicorn.sock")
    assert response.status_code == 202
    assert InboxEvent.objects.get().remote_addr is None


def test_logs_carry_the_reason_but_never_body_signature_or_secret(http, source, caplog):
    body = research_event(data={"summary": "a very private summary"})
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])
    signature = headers["X-Webhook-Signature"].removeprefix("v1=")
    bad = headers | {"X-Webhook-Signature": "v1=" + "ab" * 32}
    with caplog.at_level("INFO"):
        assert post(http, raw, bad).status_code == 401
        assert post(http, raw, headers).status_code == 202
    records = [vars(record) for record in caplog.records]
    assert any(r.get("reason") == "mismatch" for r in records)
    assert any(r.get("msg") == "inbox.accepted" for r in records)
    dumped = repr(records)
    for secret_or_body in (HMAC_SECRET, signature, "ab" * 32, "a very private summary"):
        assert secret_or_body not in dumped


def test_unknown_slugs_share_one_metrics_label(http, db):
    before = metric("webhook_requests_total", source="unknown", status="404")
    for slug in ("probe-1", "probe-2", "probe-3"):
        http.post(f"/webhooks/{slug}/", data=b"{}", content_type="application/json")
    assert (
        metric("webhook_requests_total", source="unknown", status="404") == before + 3
    )
    assert metric("webhook_requests_total", source="probe-1", status="404") == 0


def test_a_host_outside_allowed_hosts_is_400_on_the_fast_lane_too(
    http, source, settings
):
    """The webhook lane skips CommonMiddleware, which checks the Host header for every other
    request: it checks it itself, before anything is read or stored."""
    settings.ALLOWED_HOSTS = ["inbox.example.com"]
    body = research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])
    refused = post(http, raw, headers, HTTP_HOST="attacker.example")
    assert refused.status_code == 400
    assert not InboxEvent.objects.exists()
    assert http.get("/healthz", HTTP_HOST="attacker.example").status_code == 400
    accepted = post(http, raw, headers, HTTP_HOST="inbox.example.com")
    assert accepted.status_code == 202


def test_behind_a_trusted_proxy_the_stored_address_is_the_clients(
    http, source, settings
):
    """Behind deploy/nginx/ (TRUSTED_PROXY_COUNT=1) the peer is the proxy: the address kept
    with the event (and with a mismatch's evidence) is the one the proxy saw."""
    settings.TRUSTED_PROXY_COUNT = 1
    body = research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])
    response = post(
        http,
        raw,
        headers,
        REMOTE_ADDR="127.0.0.1",
        HTTP_X_FORWARDED_FOR="203.0.113.66, 198.51.100.7",
    )
    assert response.status_code == 202
    assert InboxEvent.objects.get().remote_addr == "198.51.100.7"
