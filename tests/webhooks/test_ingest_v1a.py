"""Producers that sign with Ed25519 (Standard Webhooks ``v1a``) through the real view and
PostgreSQL: a ``standard-webhooks`` source holding a ``whpk_`` public key, every answer of the
checks table, the failure reasons, rotation and the key recorded on each row.

The keys are made here, with ``cryptography``, and every signature is made here from the
Standard Webhooks rule (``{id}.{timestamp}.{body}``), never by the product's own signer."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.utils import timezone

from core.actors import Actor
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import STANDARD_SECRET, encode, webhook_post
from trail.models import OperatorAction
from webhooks.models import InboxEvent, SignatureFailure, WebhookSecret
from webhooks.sources import webhook_source_create, webhook_source_rotate

pytestmark = pytest.mark.django_db

SLUG = "ed-sync"


def public_key_of(private_key: Ed25519PrivateKey) -> str:
    raw = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return "whpk_" + base64.b64encode(raw).decode()


def v1a(private_key: Ed25519PrivateKey, event_id: str, ts: int, raw: bytes) -> str:
    signed = f"{event_id}.{ts}.".encode() + raw
    return "v1a," + base64.b64encode(private_key.sign(signed)).decode()


def v1(whsec: str, event_id: str, ts: int, raw: bytes) -> str:
    key = base64.b64decode(whsec.removeprefix("whsec_"))
    digest = hmac.new(key, f"{event_id}.{ts}.".encode() + raw, hashlib.sha256)
    return "v1," + base64.b64encode(digest.digest()).decode()


def headers(event_id: str, ts: int, signature: str) -> dict[str, str]:
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": signature,
    }


def failures(reason: str) -> int:
    return sum(
        SignatureFailure.objects.filter(reason=reason).values_list("count", flat=True)
    )


@pytest.fixture
def producer_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def ed_source(db, producer_key):
    source, _ = webhook_source_create(
        slug=SLUG,
        scheme="standard-webhooks",
        handler="research",
        public_key=public_key_of(producer_key),
        actor=Actor.system(),
    )
    return source


def post_signed(http, key, body=None, *, signature=None, ts=None, event_id=None):
    """A research event signed with ``key`` (or the ``signature`` given) and posted."""
    body = body if body is not None else research_event()
    raw = encode(body)
    ts = int(time.time()) if ts is None else ts
    event_id = body["event_id"] if event_id is None else event_id
    if signature is None:
        signature = v1a(key, event_id, ts, raw)
    return webhook_post(http, SLUG, raw, headers(event_id, ts, signature))


def test_the_source_holds_the_public_key_and_no_secret(ed_source, producer_key):
    (stored,) = WebhookSecret.objects.filter(source=ed_source)
    assert stored.kind == WebhookSecret.Kind.PUBLIC_KEY
    assert stored.secret == public_key_of(producer_key)
    assert stored.expires_at is None


def test_a_valid_v1a_delivery_is_accepted_and_names_the_key_that_verified_it(
    http, ed_source, producer_key
):
    body = research_event()
    response = post_signed(http, producer_key, body)
    assert response.status_code == 202, response.content
    assert response.json() == {"status": "accepted", "event_id": body["event_id"]}
    row = InboxEvent.objects.get()
    stored = WebhookSecret.objects.get(source=ed_source)
    assert row.signature_valid is True
    assert row.secret_fingerprint == stored.fingerprint != ""
    assert row.headers["webhook-signature"].startswith("v1a,")
    # The same delivery again is a duplicate, another content under its id a conflict.
    assert post_signed(http, producer_key, body).status_code == 200
    changed = {**body, "data": {"summary": "other"}}
    assert post_signed(http, producer_key, changed).status_code == 409


def test_a_signature_of_another_key_is_401_mismatch(http, ed_source):
    response = post_signed(http, Ed25519PrivateKey.generate())
    assert response.status_code == 401
    assert response.json() == {"error": "unauthorized"}
    assert failures("mismatch") == 1
    assert not InboxEvent.objects.exists()


def test_a_tampered_body_is_401_mismatch(http, ed_source, producer_key):
    body = research_event()
    raw = encode(body)
    ts = int(time.time())
    signature = v1a(producer_key, body["event_id"], ts, raw)
    tampered = raw.replace(
        b'"research.document.updated"', b'"research.document.deleted"'
    )
    assert tampered != raw
    response = webhook_post(
        http, SLUG, tampered, headers(body["event_id"], ts, signature)
    )
    assert response.status_code == 401
    assert failures("mismatch") == 1


def test_a_signature_made_for_another_id_is_401_mismatch(http, ed_source, producer_key):
    body = research_event()
    raw = encode(body)
    ts = int(time.time())
    signature = v1a(producer_key, "evt_some_other_id", ts, raw)
    response = webhook_post(http, SLUG, raw, headers(body["event_id"], ts, signature))
    assert response.status_code == 401
    assert failures("mismatch") == 1


def test_a_signature_made_for_another_timestamp_is_401_mismatch(
    http, ed_source, producer_key
):
    body = research_event()
    raw = encode(body)
    ts = int(time.time())
    signature = v1a(producer_key, body["event_id"], ts - 1, raw)
    response = webhook_post(http, SLUG, raw, headers(body["event_id"], ts, signature))
    assert response.status_code == 401
    assert failures("mismatch") == 1


def test_a_v1_entry_never_verifies_on_a_public_key_source(http, ed_source):
    """Even an HMAC made with a key the source could be thought to hold: a public-key
    source checks ``v1a`` entries only, so a header of ``v1`` entries has nothing it can
    check (``malformed``, as a header of unknown versions)."""
    body = research_event()
    raw = encode(body)
    ts = int(time.time())
    stored = WebhookSecret.objects.get(source=ed_source).secret
    for whsec in (STANDARD_SECRET, "whsec_" + stored.removeprefix("whpk_")):
        signature = v1(whsec, body["event_id"], ts, raw)
        response = webhook_post(
            http, SLUG, raw, headers(body["event_id"], ts, signature)
        )
        assert response.status_code == 401
    assert failures("malformed") == 2
    assert failures("mismatch") == 0


@pytest.mark.parametrize(
    "signature",
    [
        "garbage",
        "v1a,",
        "v1a,%%%not-base64%%%",
        "v1a " + base64.b64encode(b"x" * 64).decode(),  # no comma
        "v2a," + base64.b64encode(b"x" * 64).decode(),  # an unknown version
        # Standard base64 only, as the spec and the reference libraries write it.
        "v1a," + base64.urlsafe_b64encode(b"\xfb" * 64).decode(),
    ],
)
def test_garbage_is_401_malformed(http, ed_source, producer_key, signature):
    response = post_signed(http, producer_key, signature=signature)
    assert response.status_code == 401
    assert failures("malformed") == 1


@pytest.mark.parametrize("length", [0, 32, 63, 65, 128])
def test_a_signature_of_the_wrong_length_is_401_malformed(
    http, ed_source, producer_key, length
):
    """An Ed25519 signature is 64 bytes: a short one (or a long one) is no entry."""
    body = research_event()
    raw = encode(body)
    ts = int(time.time())
    real = base64.b64decode(v1a(producer_key, body["event_id"], ts, raw)[4:])
    cut = (real * 2)[:length]
    signature = "v1a," + base64.b64encode(cut).decode() if cut else "v1a,"
    response = webhook_post(http, SLUG, raw, headers(body["event_id"], ts, signature))
    assert response.status_code == 401
    assert failures("malformed") == 1


def test_a_mixed_list_passes_on_its_valid_v1a_entry(http, ed_source, producer_key):
    body = research_event()
    raw = encode(body)
    ts = int(time.time())
    entries = [
        v1(STANDARD_SECRET, body["event_id"], ts, raw),
        "v2,abc",
        v1a(Ed25519PrivateKey.generate(), body["event_id"], ts, raw),
        v1a(producer_key, body["event_id"], ts, raw),
        "v1a,%%%",
    ]
    response = webhook_post(
        http, SLUG, raw, headers(body["event_id"], ts, " ".join(entries))
    )
    assert response.status_code == 202, response.content
    assert SignatureFailure.objects.count() == 0


@pytest.mark.parametrize("offset", [-301, 301, -86400])
def test_a_stale_timestamp_is_400_after_the_signature(
    http, ed_source, producer_key, offset
):
    response = post_signed(http, producer_key, ts=int(time.time()) + offset)
    assert response.status_code == 400
    assert response.json() == {"error": "timestamp_out_of_window"}
    assert failures("timestamp_out_of_window") == 1
    # A stale timestamp under a bad signature says nothing about the window.
    other = Ed25519PrivateKey.generate()
    response = post_signed(http, other, ts=int(time.time()) + offset)
    assert response.status_code == 401


def test_missing_headers_are_401_missing(http, ed_source, producer_key):
    body = research_event()
    raw = encode(body)
    ts = int(time.time())
    signed = headers(body["event_id"], ts, v1a(producer_key, body["event_id"], ts, raw))
    for name in ("webhook-signature", "webhook-timestamp"):
        without = {k: v for k, v in signed.items() if k != name}
        assert webhook_post(http, SLUG, raw, without).status_code == 401
    assert failures("missing") == 2


def test_rotation_keeps_the_old_key_for_its_grace_then_refuses_it(
    http, ed_source, producer_key
):
    new_key = Ed25519PrivateKey.generate()
    webhook_source_rotate(
        source=ed_source,
        public_key=public_key_of(new_key),
        grace_seconds=3600,
        actor=Actor.system(),
        reason="the producer's yearly key change",
    )
    old_row = WebhookSecret.objects.get(
        source=ed_source, secret=public_key_of(producer_key)
    )
    new_row = WebhookSecret.objects.get(source=ed_source, secret=public_key_of(new_key))
    assert new_row.kind == WebhookSecret.Kind.PUBLIC_KEY
    assert new_row.expires_at is None
    remaining = (old_row.expires_at - timezone.now()).total_seconds()
    assert 3590 < remaining <= 3600

    by_old, by_new = research_event(), research_event()
    assert post_signed(http, producer_key, by_old).status_code == 202
    assert post_signed(http, new_key, by_new).status_code == 202
    recorded = dict(InboxEvent.objects.values_list("event_id", "secret_fingerprint"))
    assert recorded == {
        by_old["event_id"]: old_row.fingerprint,
        by_new["event_id"]: new_row.fingerprint,
    }

    # The grace period ends.
    WebhookSecret.objects.filter(pk=old_row.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert post_signed(http, producer_key).status_code == 401
    assert failures("mismatch") == 1
    assert post_signed(http, new_key).status_code == 202

    action = OperatorAction.objects.get(action="rotate_public_key")
    assert action.reason == "the producer's yearly key change"
    assert action.details == {
        "source": SLUG,
        "grace_seconds": 3600,
        "public_key": public_key_of(new_key),
        "fingerprint": new_row.fingerprint,
    }


def test_a_rotation_with_no_grace_refuses_the_old_key_at_once(
    http, ed_source, producer_key
):
    new_key = Ed25519PrivateKey.generate()
    webhook_source_rotate(
        source=ed_source,
        public_key=public_key_of(new_key),
        grace_seconds=0,
        actor=Actor.system(),
    )
    assert post_signed(http, producer_key).status_code == 401
    assert post_signed(http, new_key).status_code == 202


def test_during_a_rotation_a_header_signed_with_both_keys_passes(
    http, ed_source, producer_key
):
    """A producer rotating its key signs with both (Standard Webhooks' list rule)."""
    new_key = Ed25519PrivateKey.generate()
    webhook_source_rotate(
        source=ed_source,
        public_key=public_key_of(new_key),
        grace_seconds=0,
        actor=Actor.system(),
    )
    body = research_event()
    raw = encode(body)
    ts = int(time.time())
    both = " ".join(
        v1a(key, body["event_id"], ts, raw) for key in (producer_key, new_key)
    )
    response = webhook_post(http, SLUG, raw, headers(body["event_id"], ts, both))
    assert response.status_code == 202
    row = InboxEvent.objects.get()
    new_row = WebhookSecret.objects.get(source=ed_source, expires_at__isnull=True)
    assert row.secret_fingerprint == new_row.fingerprint


@pytest.mark.django_db(transaction=True)
def test_the_log_names_the_public_key_that_verified_an_event(http, producer_key):
    """The event's entry in the verifiable log names the key as it names a secret: its row
    (``secret_id``) and its fingerprint."""
    from audit.leaves import leaf_decode
    from audit.models import LogLeaf
    from audit.sealer import ledger_rows_seal

    source, _ = webhook_source_create(
        slug=SLUG,
        scheme="standard-webhooks",
        handler="research",
        public_key=public_key_of(producer_key),
        actor=Actor.system(),
    )
    assert post_signed(http, producer_key).status_code == 202
    event = InboxEvent.objects.get()
    ledger_rows_seal(now=timezone.now() + timedelta(minutes=5))
    leaf = leaf_decode(LogLeaf.objects.get(kind="inbox_event", record_id=event.pk).leaf)
    key = WebhookSecret.objects.get(source=source)
    assert (leaf["secret_id"], leaf["secret_fingerprint"]) == (key.pk, key.fingerprint)


@pytest.fixture
def cached(settings):
    from webhooks.selectors import webhook_source_snapshot_forget

    settings.WEBHOOK_SOURCE_CACHE_SECONDS = 600
    webhook_source_snapshot_forget()
    yield
    webhook_source_snapshot_forget()


def test_a_key_rotated_in_another_process_verifies_at_once(
    http, ed_source, producer_key, cached
):
    """A web process keeps a source's keys for WEBHOOK_SOURCE_CACHE_SECONDS; a signature
    none of them verifies is checked again against the keys as stored now, as for secrets."""
    assert post_signed(http, producer_key).status_code == 202  # the keys are kept now
    new_key = Ed25519PrivateKey.generate()
    # Another process's rotation: the rows change, this process's copy does not.
    WebhookSecret.objects.create(
        source=ed_source, secret=public_key_of(new_key), kind="public_key"
    )
    assert post_signed(http, new_key).status_code == 202
    assert failures("mismatch") == 0
