"""The sources admin with a source that holds its producer's Ed25519 public key: the keys shown
with their fingerprints (they are not secrets; a secret is still never shown), and the rotation
action asking for a new public key."""

from __future__ import annotations

import base64
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.test import Client
from django.urls import reverse

from core.actors import Actor
from tests.console import admin_action
from tests.webhooks.factories import WebhookSourceFactory, webhook_post
from trail.models import OperatorAction
from webhooks.models import WebhookSecret, WebhookSource
from webhooks.sources import webhook_source_create, webhook_source_rotate

pytestmark = pytest.mark.django_db

HIDDEN_SECRET = "whsec_" + base64.b64encode(b"s3cr3t-of-a-secret-source-0123").decode()


def whpk(private_key: Ed25519PrivateKey) -> str:
    raw = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return "whpk_" + base64.b64encode(raw).decode()


def ed_source(slug: str, key: Ed25519PrivateKey) -> WebhookSource:
    source, _ = webhook_source_create(
        slug=slug,
        scheme="standard-webhooks",
        handler="research",
        public_key=whpk(key),
        actor=Actor.system(),
    )
    return source


def post_v1a(slug: str, key: Ed25519PrivateKey) -> int:
    """A body that is no envelope, signed: 422 once past the signature, 401 before it."""
    body, ts = b'{"event_id": "evt-admin-1"}', int(time.time())
    signature = key.sign(f"evt-admin-1.{ts}.".encode() + body)
    headers = {
        "webhook-id": "evt-admin-1",
        "webhook-timestamp": str(ts),
        "webhook-signature": "v1a," + base64.b64encode(signature).decode(),
    }
    return webhook_post(Client(), slug, body, headers).status_code


def test_the_source_page_shows_its_public_keys_with_their_fingerprints(auditor_client):
    old_key, new_key = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    source = ed_source("ed-page", old_key)
    webhook_source_rotate(
        source=source,
        public_key=whpk(new_key),
        grace_seconds=600,
        actor=Actor.system(),
    )
    WebhookSourceFactory(
        slug="sw-hidden", scheme="standard-webhooks", secret=HIDDEN_SECRET
    )
    page = auditor_client.get(
        reverse("admin:webhooks_webhooksource_change", args=[source.pk])
    ).content.decode()
    for key in (old_key, new_key):
        row = WebhookSecret.objects.get(secret=whpk(key))
        assert whpk(key) in page
        assert row.fingerprint in page
    # Newest first; the old one says until when it verifies.
    assert page.index(whpk(new_key)) < page.index(whpk(old_key))
    assert "valid until" in page
    assert HIDDEN_SECRET not in page

    listing = auditor_client.get(
        reverse("admin:webhooks_webhooksource_changelist")
    ).content.decode()
    assert '<td class="field-public_key_count">2</td>' in listing
    assert '<td class="field-secret_count">0</td>' in listing
    assert HIDDEN_SECRET not in listing
    secret_page = auditor_client.get(
        reverse(
            "admin:webhooks_webhooksource_change",
            args=[WebhookSource.objects.get(slug="sw-hidden").pk],
        )
    ).content.decode()
    assert HIDDEN_SECRET not in secret_page
    assert "whpk_" not in secret_page


def rotate(http, source, **fields):
    answer = {"post": "yes", "grace_seconds": "600", "reason": "producer key change"}
    return admin_action(
        http,
        "webhooks_webhooksource",
        "rotate_secret",
        source,
        follow=True,
        **(answer | fields),
    )


def test_an_operator_rotates_a_public_key_from_the_admin(operator_client, operator):
    old_key, new_key = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    source = ed_source("ed-rotate", old_key)
    page = admin_action(
        operator_client, "webhooks_webhooksource", "rotate_secret", source
    ).content.decode()
    # A public key is typed in the open, not as a password.
    assert 'name="public_key"' in page
    assert 'type="password"' not in page
    assert "Rotate the public key of ed-rotate" in page

    response = rotate(operator_client, source, public_key=whpk(new_key))
    assert b"Rotated the public key of ed-rotate" in response.content
    new_row = WebhookSecret.objects.get(secret=whpk(new_key))
    assert new_row.kind == WebhookSecret.Kind.PUBLIC_KEY
    action = OperatorAction.objects.get(action="rotate_public_key")
    assert action.actor == operator
    assert action.reason == "producer key change"
    assert action.details["fingerprint"] == new_row.fingerprint
    assert post_v1a(source.slug, new_key) == 422
    assert post_v1a(source.slug, old_key) == 422  # its grace period
    assert post_v1a(source.slug, Ed25519PrivateKey.generate()) == 401


@pytest.mark.parametrize(
    "refused",
    [
        "whsk_" + base64.b64encode(b"k" * 32).decode(),
        "whpk_" + base64.b64encode(b"k" * 31).decode(),
        "whpk_" + base64.b64encode(b"k" * 33).decode(),
        "whpk_not-base64!",
    ],
    ids=["private key", "31 bytes", "33 bytes", "not base64"],
)
def test_the_admin_refuses_anything_but_a_public_key_and_changes_nothing(
    operator_client, refused
):
    source = ed_source("ed-refuse", Ed25519PrivateKey.generate())
    response = rotate(operator_client, source, public_key=refused)
    assert response.status_code == 200
    assert b"whpk_" in response.content  # the message says what a public key is
    if refused.startswith("whsk_"):
        assert refused.encode() not in response.content  # never echoed back
    assert WebhookSecret.objects.filter(source=source).count() == 1
    assert not OperatorAction.objects.filter(action="rotate_public_key").exists()


def test_a_secret_source_is_still_rotated_with_a_secret(operator_client):
    source = WebhookSourceFactory(slug="sw-rotate", scheme="standard-webhooks")
    page = admin_action(
        operator_client, "webhooks_webhooksource", "rotate_secret", source
    ).content.decode()
    assert 'type="password"' in page
    assert 'name="public_key"' not in page


def test_an_event_page_names_the_public_key_that_verified_it(auditor_client):
    from tests.integrations.research.factories import research_event
    from tests.webhooks.factories import encode
    from webhooks.models import InboxEvent

    key = Ed25519PrivateKey.generate()
    source = ed_source("ed-story", key)
    body = research_event()
    raw, ts = encode(body), int(time.time())
    signature = key.sign(f"{body['event_id']}.{ts}.".encode() + raw)
    headers = {
        "webhook-id": body["event_id"],
        "webhook-timestamp": str(ts),
        "webhook-signature": "v1a," + base64.b64encode(signature).decode(),
    }
    assert webhook_post(Client(), source.slug, raw, headers).status_code == 202
    event = InboxEvent.objects.get()
    fingerprint = WebhookSecret.objects.get(source=source).fingerprint
    page = auditor_client.get(
        reverse("admin:webhooks_inboxevent_change", args=[event.pk])
    ).content.decode()
    assert f"signature verified (public key {fingerprint})" in page
