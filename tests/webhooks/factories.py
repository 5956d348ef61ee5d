"""Factories and signing helpers of the webhook tests. Payloads come from files in
``tests/fixtures/webhooks/<source>/<event>__<variant>.json`` and are signed with real HMAC."""

from __future__ import annotations

import json
import time
from pathlib import Path

import factory

from webhooks.models import HandlerName, SignatureScheme, WebhookSecret, WebhookSource
from webhooks.schemes import signature_headers

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "webhooks"
HMAC_SECRET = "test-secret-hmac-0123456789abcdef"
STANDARD_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
GITHUB_SECRET = "It's a Secret to Everybody"
SECRETS = {
    SignatureScheme.HMAC_SHA256: HMAC_SECRET,
    SignatureScheme.STANDARD_WEBHOOKS: STANDARD_SECRET,
    SignatureScheme.GITHUB: GITHUB_SECRET,
}


class WebhookSourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = WebhookSource
        skip_postgeneration_save = True

    slug = factory.Sequence(lambda n: f"source-{n}")
    scheme = SignatureScheme.HMAC_SHA256
    handler = HandlerName.RESEARCH

    @factory.post_generation
    def secret(obj, create, extracted, **kwargs):
        if create:
            WebhookSecret.objects.create(
                source=obj, secret=extracted or SECRETS[obj.scheme]
            )


def fixture_bytes(source: str, name: str) -> bytes:
    return (FIXTURES / source / f"{name}.json").read_bytes()


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
    scheme: str = SignatureScheme.HMAC_SHA256,
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
