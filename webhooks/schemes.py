"""Signature schemes: a registry from a source's ``scheme`` to a small verifier.

Every verifier works on the raw bytes as received (never re-serialised JSON), compares in
constant time with ``hmac.compare_digest``, accepts several signatures in one header (any valid
one against any valid secret passes) and skips entries of an unknown version (``v0=``, ``v2,``).
A header present with no parsable entry of a known version is ``malformed``; a parsable entry
that matches no secret is ``mismatch``; a missing or empty header is ``missing``.

Adding a scheme is one class and one line in ``SCHEMES``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .errors import InvalidSignature

REASON_MISSING = "missing"
REASON_MALFORMED = "malformed"
REASON_MISMATCH = "mismatch"

_SEPARATORS = re.compile(r"[\s,]+")
_HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


@dataclass(frozen=True)
class Verified:
    """What a valid signature vouches for: the id header (may be empty) and the raw timestamp
    header (``None`` when the scheme has none). The timestamp is checked by the caller, after
    the signature, so that an unsigned request never learns about the window."""

    event_id: str
    timestamp: str | None


def _header(headers: Mapping[str, str], name: str) -> str:
    return (headers.get(name) or "").strip()


def _hmac_sha256(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def _any_match(candidates: Sequence[bytes], expected: Sequence[bytes]) -> bool:
    # Every comparison runs: no early exit that would tell which secret or entry matched.
    matched = False
    for candidate in candidates:
        for digest in expected:
            matched |= hmac.compare_digest(candidate, digest)
    return matched


def _hex_entries(header: str, prefix: str) -> list[bytes]:
    """Digests of the ``<prefix><hex>`` entries of a header; other versions are skipped."""
    digests = []
    for entry in _SEPARATORS.split(header):
        if entry.startswith(prefix):
            value = entry[len(prefix) :]
            if _HEX_SHA256.fullmatch(value):
                digests.append(bytes.fromhex(value))
    return digests


class HmacSha256Scheme:
    """``X-Webhook-Signature: v1=<hex>`` over ``b"<timestamp>." + raw_body``; the key is the
    secret's UTF-8 bytes."""

    id_header = "X-Webhook-Id"
    timestamp_header = "X-Webhook-Timestamp"
    signature_header = "X-Webhook-Signature"

    def verify(
        self, *, raw_body: bytes, headers: Mapping[str, str], secrets: Sequence[str]
    ) -> Verified:
        signature = _header(headers, self.signature_header)
        timestamp = _header(headers, self.timestamp_header)
        if not signature or not timestamp:
            raise InvalidSignature(REASON_MISSING)
        candidates = _hex_entries(signature, "v1=")
        if not candidates:
            raise InvalidSignature(REASON_MALFORMED)
        message = timestamp.encode("latin-1", "replace") + b"." + raw_body
        expected = [_hmac_sha256(secret.encode(), message) for secret in secrets]
        if not _any_match(candidates, expected):
            raise InvalidSignature(REASON_MISMATCH)
        return Verified(event_id=_header(headers, self.id_header), timestamp=timestamp)


def standard_webhooks_key(secret: str) -> bytes:
    """The key of a ``whsec_<base64>`` secret, as the reference library derives it."""
    return base64.b64decode(secret.removeprefix("whsec_"))


class StandardWebhooksScheme:
    """Standard Webhooks: ``webhook-signature: v1,<base64>`` (space-separated list) over
    ``b"<id>.<timestamp>." + raw_body``; the key is the base64 part of ``whsec_<base64>``."""

    id_header = "webhook-id"
    timestamp_header = "webhook-timestamp"
    signature_header = "webhook-signature"

    def verify(
        self, *, raw_body: bytes, headers: Mapping[str, str], secrets: Sequence[str]
    ) -> Verified:
        signature = _header(headers, self.signature_header)
        timestamp = _header(headers, self.timestamp_header)
        if not signature or not timestamp:
            raise InvalidSignature(REASON_MISSING)
        candidates = []
        for entry in signature.split():
            version, _, value = entry.partition(",")
            if version != "v1" or not value:
                continue
            try:
                digest = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                continue
            if len(digest) == hashlib.sha256().digest_size:
                candidates.append(digest)
        if not candidates:
            raise InvalidSignature(REASON_MALFORMED)
        event_id = _header(headers, self.id_header)
        message = f"{event_id}.{timestamp}.".encode("latin-1", "replace") + raw_body
        expected = [
            _hmac_sha256(standard_webhooks_key(secret), message) for secret in secrets
        ]
        if not _any_match(candidates, expected):
            raise InvalidSignature(REASON_MISMATCH)
        return Verified(event_id=event_id, timestamp=timestamp)


class GitHubScheme:
    """GitHub: ``X-Hub-Signature-256: sha256=<hex>`` over the raw body; no timestamp."""

    id_header = "X-GitHub-Delivery"
    timestamp_header = None
    signature_header = "X-Hub-Signature-256"

    def verify(
        self, *, raw_body: bytes, headers: Mapping[str, str], secrets: Sequence[str]
    ) -> Verified:
        signature = _header(headers, self.signature_header)
        if not signature:
            raise InvalidSignature(REASON_MISSING)
        candidates = _hex_entries(signature, "sha256=")
        if not candidates:
            raise InvalidSignature(REASON_MALFORMED)
        expected = [_hmac_sha256(secret.encode(), raw_body) for secret in secrets]
        if not _any_match(candidates, expected):
            raise InvalidSignature(REASON_MISMATCH)
        return Verified(event_id=_header(headers, self.id_header), timestamp=None)


SCHEMES = {
    "hmac-sha256": HmacSha256Scheme(),
    "standard-webhooks": StandardWebhooksScheme(),
    "github": GitHubScheme(),
}


def scheme_get(name: str) -> HmacSha256Scheme | StandardWebhooksScheme | GitHubScheme:
    return SCHEMES[name]


def signature_headers(
    *, scheme: str, secret: str, raw_body: bytes, event_id: str, timestamp: int
) -> dict[str, str]:
    """The headers a producer sends: used by ``send_test_webhook`` and the tests."""
    if scheme == "hmac-sha256":
        digest = hmac.new(
            secret.encode(), f"{timestamp}.".encode() + raw_body, hashlib.sha256
        )
        return {
            "X-Webhook-Id": event_id,
            "X-Webhook-Timestamp": str(timestamp),
            "X-Webhook-Signature": f"v1={digest.hexdigest()}",
        }
    if scheme == "standard-webhooks":
        digest = _hmac_sha256(
            standard_webhooks_key(secret),
            f"{event_id}.{timestamp}.".encode() + raw_body,
        )
        return {
            "webhook-id": event_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": f"v1,{base64.b64encode(digest).decode()}",
        }
    if scheme == "github":
        digest = hmac.new(secret.encode(), raw_body, hashlib.sha256)
        return {
            "X-GitHub-Delivery": event_id,
            "X-Hub-Signature-256": f"sha256={digest.hexdigest()}",
        }
    raise KeyError(scheme)
