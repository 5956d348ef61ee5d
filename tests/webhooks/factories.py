"""Factories and signing helpers of the webhook tests. Payloads come from the integrations'
fixture files (``integrations/<name>/fixtures/<event>__<variant>.json``) and are signed with
real HMAC."""

from __future__ import annotations

import json
import time
from pathlib import Path

import factory

from webhooks.models import WebhookSecret, WebhookSource
from webhooks.schemes import signature_headers

ROOT = Path(__file__).resolve().parent.parent.parent
HMAC_SECRET = "test-secret-hmac-0123456789abcdef"
STANDARD_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
GITHUB_SECRET = "It's a Secret to Everybody"
SECRETS = {
    "hmac-sha256": HMAC_SECRET,
    "standard-webhooks": STANDARD_SECRET,
    "github": GITHUB_SECRET,
}


class WebhookSourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = WebhookSource
        skip_postgeneration_save = True

    slug = factory.Sequence(lambda n: f"source-{n}")
    scheme = "hmac-sha256"
    handler = "research"

    @factory.post_generation
    def secret(obj, create, extracted, **kwargs):
        if create:
            WebhookSecret.objects.create(
                source=obj, secret=extracted or SECRETS[obj.scheme]
            )


def fixture_bytes(integration: str, name: str) -> bytes:
    """A payload fixture of an integration: ``integrations/<name>/fixtures/<event>.json``."""
    return (
        ROOT / "integrations" / integration / "fixtures" / f"{name}.json"
    ).read_bytes()


def research_event(
    variant: str = "research.document.updated__basic", **changes
) -> dict:
    body = json.loads(fixture_bytes("research", variant))
    body.update(changes)
    return body


def encode(body) -> bytes:
    return json.dumps(body).encode()


def signed_headers(
    *,
    scheme: str = "hmac-sha256",
    raw_body: bytes,
    event_id: str,
    secret: str | None = None,
    timestamp: int | None = None,
) -> dict[str, str]:
    return signature_headers(
        scheme=scheme,
        secret=secret or SECRETS[scheme],
        raw_body=raw_body,
        event_id=event_id,
        timestamp=int(time.time()) if timestamp is None else timestamp,
    )


def as_meta(headers: dict[str, str]) -> dict[str, str]:
    """HTTP headers as the Django test client's WSGI environ keys."""
    return {"HTTP_" + name.upper().replace("-", "_"): v for name, v in headers.items()}
