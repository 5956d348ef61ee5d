"""Deeply nested JSON (docs/security.md, "Request bodies"): ingest refuses nesting deeper than
``MAX_NESTING``; a deep body an older deployment stored is dead-lettered on its first attempt,
and every admin page that shows it renders."""

import json

import pytest
from django.urls import reverse

from tests.integrations.github.factories import GitHubInboxEventFactory, github_headers
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    FingerprintMismatchFactory,
    InboxEventFactory,
    encode,
    signed_post,
    webhook_post,
)
from webhooks.envelopes import MAX_NESTING, raw_fingerprint
from webhooks.models import InboxEvent
from webhooks.processing import inbox_event_process

pytestmark = pytest.mark.django_db

DEEP = 5000


def nested(depth: int) -> list:
    """A list ``depth`` levels deep (``[]`` is 1)."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def deep_text(depth: int) -> bytes:
    """A JSON object holding a list ``depth`` levels deep, built as text: Python's own
    encoder could not write it."""
    return b'{"deep": ' + b"[" * depth + b"]" * depth + b"}"


def research_with_depth(total: int) -> dict:
    """A valid research envelope nested ``total`` levels deep in all: the envelope (1) and
    ``data`` (2) around a list."""
    body = research_event()
    body["data"] = {"summary": "deep", "extra": nested(total - 2)}
    return body


# --- ingest ---------------------------------------------------------------------------------


def test_a_body_as_deep_as_the_limit_is_accepted(http, source):
    response = signed_post(http, source.slug, research_with_depth(MAX_NESTING))
    assert response.status_code == 202, response.content


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 900])
def test_a_body_deeper_than_the_limit_is_400_and_stores_nothing(http, source, depth):
    response = signed_post(http, source.slug, research_with_depth(depth))
    assert response.status_code == 400
    assert response.json() == {"error": "invalid_json"}
    assert not InboxEvent.objects.exists()


def test_a_body_too_deep_for_the_decoder_is_400(http, source):
    raw = b'{"event_id": "evt-deep", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    response = signed_post(http, source.slug, raw, event_id="evt-deep")
    assert response.status_code == 400
    assert response.json() == {"error": "invalid_json"}


def test_a_github_body_deeper_than_the_limit_is_400(http, github_source):
    raw = encode({"zen": "deep", "hook": nested(MAX_NESTING)})
    response = webhook_post(http, github_source.slug, raw, github_headers(raw))
    assert response.status_code == 400
    assert response.json() == {"error": "invalid_json"}


# --- what an older deployment stored ------------------------------------------------------------


def test_a_stored_research_body_too_deep_to_read_is_dead_lettered_on_the_first_attempt():
    body = research_event()
    raw = json.dumps(body).encode()[:-1] + b', "deep": ' + deep_text(DEEP) + b"}"
    event = InboxEventFactory(body=body, raw_body=raw)

    outcome = inbox_event_process(inbox_event_id=event.pk)

    assert outcome.status == "dead_lettered"
    event.refresh_from_db()
    assert event.attempts == 1
    assert "nested too deep" in event.error_message


def test_a_stored_github_body_too_deep_to_read_is_dead_lettered_on_the_first_attempt():
    event = GitHubInboxEventFactory(
        payload=deep_text(DEEP),
        event_type="deployment_status",
        entity_id="",  # the repository is not readable from the body either
    )

    outcome = inbox_event_process(inbox_event_id=event.pk)

    assert outcome.status == "dead_lettered"
    event.refresh_from_db()
    assert event.attempts == 1
    assert "nested too deep" in event.error_message


@pytest.mark.parametrize("depth", [900, DEEP, 200_000])
def test_every_admin_page_of_a_deep_body_renders(admin_client, depth):
    event = InboxEventFactory(
        raw_body=deep_text(depth), processing_status="dead_lettered"
    )
    conflicting = deep_text(depth + 1)
    mismatch = FingerprintMismatchFactory(
        event=event,
        body={},  # no parsed body: the columns below come from the bytes
        raw_body=conflicting,
        conflicting_fingerprint=raw_fingerprint(conflicting),
    )
    pages = [
        reverse("admin:webhooks_inboxevent_change", args=[event.pk]),
        reverse("admin:webhooks_deadletteredevent_change", args=[event.pk]),
        reverse("admin:webhooks_fingerprintmismatch_change", args=[mismatch.pk]),
    ]
    for page in pages:
        response = admin_client.get(page)
        assert response.status_code == 200, page
        assert b"[[[[" in response.content, page  # the body is shown, as text
