"""GitHub deliveries: the fixture payloads signed as GitHub signs them, and inbox rows as the
GitHub envelope has ingest store them (the id and type from the headers, the fingerprint of the
raw bytes: GitHub's redeliveries are byte-identical)."""

from __future__ import annotations

import copy
import json

import factory

from tests.integrations.fixtures import fixture_json
from tests.webhooks.factories import (
    InboxEventFactory,
    WebhookSourceFactory,
    encode,
    signed_headers,
)
from webhooks.envelopes import raw_fingerprint
from webhooks.models import WebhookSource

SLUG = "github"


def github_source_create(slug: str = SLUG) -> WebhookSource:
    return WebhookSourceFactory(slug=slug, scheme="github", handler="github")


def github_headers(
    raw: bytes, *, event: str = "ping", delivery: str = "d-1"
) -> dict[str, str]:
    """The headers GitHub sends with ``raw``: signed delivery id and the event's type."""
    headers = signed_headers(scheme="github", raw_body=raw, event_id=delivery)
    headers["X-GitHub-Event"] = event
    return headers


def deployment_status_payload(
    state: str, status_id: int, **deployment_overrides
) -> dict:
    """GitHub's real ``deployment_status`` payload with another state and status id."""
    payload = copy.deepcopy(fixture_json("github", "deployment_status__basic"))
    payload["deployment_status"]["state"] = state
    payload["deployment_status"]["id"] = status_id
    payload["deployment"].update(deployment_overrides)
    return payload


def _repository(raw: bytes) -> str:
    try:
        body = json.loads(raw)
        return body["repository"]["full_name"]
    except (ValueError, TypeError, KeyError):
        return ""


class GitHubInboxEventFactory(InboxEventFactory):
    """``payload`` (a dict, or bytes stored as they are) as a stored GitHub delivery."""

    class Params:
        payload = factory.LazyFunction(lambda: fixture_json("github", "ping__basic"))

    source = factory.LazyFunction(
        lambda: (
            WebhookSource.objects.filter(slug=SLUG).first() or github_source_create()
        )
    )
    event_id = factory.Sequence(lambda n: f"delivery-{n}")
    event_type = "ping"
    entity_id = factory.LazyAttribute(lambda o: _repository(bytes(o.raw_body)))
    entity_type = factory.LazyAttribute(lambda o: "repository" if o.entity_id else "")
    source_version = None
    occurred_at = None
    tenant_id = ""
    idempotency_key = ""
    raw_body = factory.LazyAttribute(
        lambda o: o.payload if isinstance(o.payload, bytes) else encode(o.payload)
    )
    content_fingerprint = factory.LazyAttribute(
        lambda o: raw_fingerprint(bytes(o.raw_body))
    )
    headers = factory.LazyAttribute(
        lambda o: {
            "content-type": "application/json",
            "x-github-delivery": o.event_id,
            "x-github-event": o.event_type,
            "x-hub-signature-256": "sha256=75710...",
        }
    )
