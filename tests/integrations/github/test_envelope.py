"""The GitHub envelope at ingest: the delivery id and event type come from GitHub's headers, the
fingerprint is the SHA-256 of the raw bytes (GitHub's redeliveries are byte-identical)."""

import hashlib
import json

import pytest

from tests.integrations.fixtures import fixture_bytes
from tests.integrations.github.factories import SLUG, github_headers
from tests.webhooks.factories import webhook_post
from webhooks.models import FingerprintMismatch, InboxEvent

pytestmark = pytest.mark.django_db


def test_github_ping_is_accepted_and_redelivery_is_a_duplicate(client, github_source):
    raw = fixture_bytes("github", "ping__basic")
    headers = github_headers(raw, delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958")
    response = webhook_post(client, SLUG, raw, headers)
    assert response.status_code == 202, response.content
    row = InboxEvent.objects.get()
    assert row.event_id == "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    assert row.event_type == "ping"
    assert row.content_fingerprint == hashlib.sha256(raw).hexdigest()
    assert row.headers["x-github-event"] == "ping"
    assert webhook_post(client, SLUG, raw, headers).status_code == 200


def test_github_deployment_status_records_the_repository(client, github_source):
    raw = fixture_bytes("github", "deployment_status__basic")
    response = webhook_post(
        client, SLUG, raw, github_headers(raw, event="deployment_status")
    )
    assert response.status_code == 202
    row = InboxEvent.objects.get()
    assert row.entity_id == json.loads(raw)["repository"]["full_name"]


def test_github_any_byte_change_with_the_same_delivery_is_a_conflict(
    client, github_source
):
    raw = fixture_bytes("github", "ping__basic")
    webhook_post(client, SLUG, raw, github_headers(raw))
    changed = raw.replace(b"\n", b" ", 1)
    response = webhook_post(client, SLUG, changed, github_headers(changed))
    assert response.status_code == 409
    assert FingerprintMismatch.objects.count() == 1


@pytest.mark.parametrize("missing", ["X-GitHub-Event", "X-GitHub-Delivery"])
def test_github_without_event_or_delivery_header_is_422(client, github_source, missing):
    raw = fixture_bytes("github", "ping__basic")
    headers = github_headers(raw)
    del headers[missing]
    response = webhook_post(client, SLUG, raw, headers)
    assert response.status_code == 422
    assert missing in response.json()["details"]


def test_github_body_must_be_a_json_object(client, github_source):
    raw = b"[]"
    response = webhook_post(client, SLUG, raw, github_headers(raw))
    assert response.status_code == 400
    assert response.json() == {"error": "invalid_json"}
