"""GitHub's signature scheme (docs/http-api.md, "Signature schemes"): ``X-Hub-Signature-256:
sha256=<hex>``, HMAC-SHA256 of the raw body under the webhook's secret; no timestamp. Registered
as ``github`` in ``WEBHOOK_SCHEMES``."""

from __future__ import annotations

import secrets as random_secrets
from collections.abc import Mapping, Sequence

from django.views.decorators.debug import sensitive_variables

from webhooks.errors import InvalidSignature, SignatureFailureReason
from webhooks.schemes import (
    Verified,
    first_match,
    header_value,
    hex_entries,
    hmac_sha256,
    secret_fingerprint,
    secret_length_check,
)

DELIVERY_HEADER = "X-GitHub-Delivery"
SIGNATURE_HEADER = "X-Hub-Signature-256"


class GitHubScheme:
    name = "github"
    label = "GitHub (X-Hub-Signature-256)"
    signs_event_id = False  # GitHub signs the body only: X-GitHub-Delivery is not in it
    id_header = DELIVERY_HEADER
    timestamp_header = None
    signature_header = SIGNATURE_HEADER
    header_descriptions = {
        DELIVERY_HEADER: "github: the event id.",
        SIGNATURE_HEADER: "github: `sha256=<hex>` of the raw body.",
    }

    @sensitive_variables()
    def verify(
        self, *, raw_body: bytes, headers: Mapping[str, str], secrets: Sequence[str]
    ) -> Verified:
        signature = header_value(headers, self.signature_header)
        if not signature:
            raise InvalidSignature(SignatureFailureReason.MISSING)
        candidates = hex_entries(signature, "sha256=")
        if not candidates:
            raise InvalidSignature(SignatureFailureReason.MALFORMED)
        expected = [hmac_sha256(secret.encode(), raw_body) for secret in secrets]
        matched = first_match(candidates, expected)
        if matched is None:
            raise InvalidSignature(SignatureFailureReason.MISMATCH)
        return Verified(
            event_id=header_value(headers, self.id_header),
            timestamp=None,
            event_id_signed=self.signs_event_id,
            secret_fingerprint=secret_fingerprint(secrets[matched]),
        )

    def sign(
        self, *, raw_body: bytes, secret: str, event_id: str, timestamp: int
    ) -> dict[str, str]:
        digest = hmac_sha256(secret.encode(), raw_body)
        return {
            self.id_header: event_id,
            self.signature_header: f"sha256={digest.hex()}",
        }

    def secret_generate(self) -> str:
        return random_secrets.token_urlsafe(32)

    def secret_validate(self, secret: str) -> None:
        secret_length_check(secret)
