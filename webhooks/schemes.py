"""Signature schemes (docs/http-api.md, "Signature schemes"): a registry from a source's
``scheme`` to one class that verifies a delivery, signs one (for ``send_test_webhook`` and the
tests) and generates and validates its secrets.

Every verifier works on the raw bytes as received (never re-serialised JSON), compares in
constant time with ``hmac.compare_digest``, accepts several signatures in one header (any valid
one against any valid secret passes) and skips entries of an unknown version (``v0=``, ``v2,``).
A header present with no parsable entry of a known version is ``malformed``; a parsable entry
that matches no secret is ``mismatch``; a missing or empty header is ``missing``.

The registry is the ``WEBHOOK_SCHEMES`` setting, from a scheme's name to the dotted path of its
class: a producer's own scheme lives in its integration's package (GitHub's in
``integrations.github.scheme``), the generic ones here. Each declares the headers it reads, so
that what the inbox keeps of a delivery, the headers a request's correlation id comes from and
the endpoint's OpenAPI description all follow from the registry. Adding a scheme is one class
and one entry.

Every ``verify`` is ``sensitive_variables``: an error page or report shows none of the values
of its frame or of the frames it calls (the secrets, the keys derived from them, the expected
digests), with ``DEBUG`` on too (``core/reporting.py``).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import re
import secrets as random_secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings
from django.utils.module_loading import import_string
from django.views.decorators.debug import sensitive_variables

from core.errors import InvalidPayload

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
    the signature, so that an unsigned request never learns about the window.
    ``event_id_signed``: the id header is part of the signed bytes (the scheme's
    ``signs_event_id``); when it is not, anyone holding a signed body can send it again under
    an id of their choosing."""

    event_id: str
    timestamp: str | None
    event_id_signed: bool = False


class SignatureScheme(Protocol):
    """What a scheme does. ``verify`` raises ``InvalidSignature`` with its reason.

    Its headers: ``id_header`` (the event id, kept on the inbox row and the request's
    correlation id), ``timestamp_header`` (kept; ``None`` for a scheme without one),
    ``signature_header`` (kept as a short prefix only), and ``header_descriptions`` (each
    header's meaning, for the endpoint's OpenAPI description)."""

    name: str
    label: str
    signs_event_id: bool
    id_header: str
    timestamp_header: str | None
    signature_header: str
    header_descriptions: Mapping[str, str]

    def verify(
        self, *, raw_body: bytes, headers: Mapping[str, str], secrets: Sequence[str]
    ) -> Verified: ...

    def sign(
        self, *, raw_body: bytes, secret: str, event_id: str, timestamp: int
    ) -> dict[str, str]: ...

    def secret_generate(self) -> str: ...

    def secret_validate(self, secret: str) -> None: ...


def secret_fingerprint(secret: str) -> str:
    """A name for a secret that reveals nothing of it: the first 16 hex digits (64 bits) of
    SHA-256 over a fixed prefix and the secret's UTF-8 bytes. Secrets carry at least 16 bytes
    of key material, so the fingerprint cannot be searched back to one; the prefix keeps it
    from being any other use's hash of the same secret (docs/security.md, "What the log
    holds")."""
    digest = hashlib.sha256(b"webhook-secret-fingerprint\n" + secret.encode())
    return digest.hexdigest()[:16]


def header_bytes(headers: Mapping[str, str], name: str) -> bytes:
    """A header's value as the bytes sent (a WSGI server hands each byte over as one
    Latin-1 character, PEP 3333), without the spaces and tabs around it, which HTTP does
    not count (RFC 9110's OWS), and nothing else: ``"\u3000x"`` is a value of its own."""
    return (headers.get(name) or "").strip(" \t").encode("latin-1", "replace")


def header_value(headers: Mapping[str, str], name: str) -> str:
    """A header's value as text: its bytes read as UTF-8, as producers write them, or one
    character a byte where they are not UTF-8."""
    raw = header_bytes(headers, name)
    try:
        return raw.decode("utf-8")
    except UnicodeError:
        return raw.decode("latin-1")


def _signature_and_timestamp(
    headers: Mapping[str, str], signature_header: str, timestamp_header: str
) -> tuple[str, str]:
    """Both headers of a timestamped scheme; ``missing`` when either is absent or empty."""
    signature = header_value(headers, signature_header)
    timestamp = header_value(headers, timestamp_header)
    if not signature or not timestamp:
        raise InvalidSignature(REASON_MISSING)
    return signature, timestamp


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def any_match(candidates: Sequence[bytes], expected: Sequence[bytes]) -> bool:
    # Every comparison runs: no early exit that would tell which secret or entry matched.
    matched = False
    for candidate in candidates:
        for digest in expected:
            matched |= hmac.compare_digest(candidate, digest)
    return matched


def hex_entries(header: str, prefix: str) -> list[bytes]:
    """Digests of the ``<prefix><hex>`` entries of a header; other versions are skipped."""
    digests = []
    for entry in _SEPARATORS.split(header):
        if entry.startswith(prefix):
            value = entry[len(prefix) :]
            if _HEX_SHA256.fullmatch(value):
                digests.append(bytes.fromhex(value))
    return digests


# The least key material a secret may hold (docs/security.md, "Secrets"): below it a secret can
# be guessed. Generated secrets hold 32 bytes.
SECRET_MIN_BYTES = 16
# Standard Webhooks' own range for the decoded key of a ``whsec_`` secret.
WHSEC_MIN_BYTES, WHSEC_MAX_BYTES = 24, 64


def secret_length_check(secret: str, *, key: bytes | None = None) -> None:
    """A secret as the ``secret`` column holds it (1-255 characters, no NUL) whose key
    material (``key``: the secret's UTF-8 bytes unless given) is at least
    ``SECRET_MIN_BYTES``; ``InvalidPayload`` naming the rule otherwise."""
    if not secret or len(secret) > 255 or "\x00" in secret:
        raise InvalidPayload(details={"secret": ["1-255 characters, no NUL."]})
    material = secret.encode() if key is None else key
    if len(material) < SECRET_MIN_BYTES:
        raise InvalidPayload(
            f"a secret holds at least {SECRET_MIN_BYTES} bytes of key material",
            details={
                "secret": [
                    f"At least {SECRET_MIN_BYTES} bytes of key material "
                    f"(this one has {len(material)})."
                ]
            },
        )


class HmacSha256Scheme:
    """``X-Webhook-Signature: v1=<hex>`` over ``b"<timestamp>." + raw_body``; the key is the
    secret's UTF-8 bytes."""

    name = "hmac-sha256"
    label = "HMAC-SHA256 (timestamp.body)"
    signs_event_id = False  # X-Webhook-Id is not in the signed bytes
    id_header = "X-Webhook-Id"
    timestamp_header = "X-Webhook-Timestamp"
    signature_header = "X-Webhook-Signature"
    header_descriptions = {
        id_header: "hmac-sha256: the event id (must equal the body's `event_id`).",
        timestamp_header: "hmac-sha256: unix seconds; outside the tolerance is a 400.",
        signature_header: "hmac-sha256: `v1=<hex>` entries, space or comma separated, "
        "HMAC-SHA256 of `<timestamp>.` + the raw body.",
    }

    @sensitive_variables()
    def verify(
        self, *, raw_body: bytes, headers: Mapping[str, str], secrets: Sequence[str]
    ) -> Verified:
        signature, timestamp = _signature_and_timestamp(
            headers, self.signature_header, self.timestamp_header
        )
        candidates = hex_entries(signature, "v1=")
        if not candidates:
            raise InvalidSignature(REASON_MALFORMED)
        message = header_bytes(headers, self.timestamp_header) + b"." + raw_body
        expected = [hmac_sha256(secret.encode(), message) for secret in secrets]
        if not any_match(candidates, expected):
            raise InvalidSignature(REASON_MISMATCH)
        return Verified(
            event_id=header_value(headers, self.id_header),
            timestamp=timestamp,
            event_id_signed=self.signs_event_id,
        )

    def sign(
        self, *, raw_body: bytes, secret: str, event_id: str, timestamp: int
    ) -> dict[str, str]:
        digest = hmac_sha256(secret.encode(), f"{timestamp}.".encode() + raw_body)
        return {
            self.id_header: event_id,
            self.timestamp_header: str(timestamp),
            self.signature_header: f"v1={digest.hex()}",
        }

    def secret_generate(self) -> str:
        return random_secrets.token_urlsafe(32)

    def secret_validate(self, secret: str) -> None:
        secret_length_check(secret)


def standard_webhooks_key(secret: str) -> bytes:
    """The key of a ``whsec_<base64>`` secret, as the reference library derives it."""
    return base64.b64decode(secret.removeprefix("whsec_"))


class StandardWebhooksScheme:
    """Standard Webhooks: ``webhook-signature: v1,<base64>`` (space-separated list) over
    ``b"<id>.<timestamp>." + raw_body``; the key is the base64 part of ``whsec_<base64>``."""

    name = "standard-webhooks"
    label = "Standard Webhooks"
    signs_event_id = True
    id_header = "webhook-id"
    timestamp_header = "webhook-timestamp"
    signature_header = "webhook-signature"
    header_descriptions = {
        id_header: "standard-webhooks: the event id.",
        timestamp_header: "standard-webhooks: unix seconds.",
        signature_header: "standard-webhooks: `v1,<base64>` entries, space separated, "
        "over `<id>.<timestamp>.` + the raw body, keyed by the base64 part of "
        "`whsec_...`.",
    }

    @sensitive_variables()
    def verify(
        self, *, raw_body: bytes, headers: Mapping[str, str], secrets: Sequence[str]
    ) -> Verified:
        signature, timestamp = _signature_and_timestamp(
            headers, self.signature_header, self.timestamp_header
        )
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
        event_id = header_value(headers, self.id_header)
        # Over the bytes the producer signed: the headers as sent.
        message = b".".join(
            [
                header_bytes(headers, self.id_header),
                header_bytes(headers, self.timestamp_header),
                raw_body,
            ]
        )
        expected = [
            hmac_sha256(standard_webhooks_key(secret), message) for secret in secrets
        ]
        if not any_match(candidates, expected):
            raise InvalidSignature(REASON_MISMATCH)
        return Verified(
            event_id=event_id, timestamp=timestamp, event_id_signed=self.signs_event_id
        )

    def sign(
        self, *, raw_body: bytes, secret: str, event_id: str, timestamp: int
    ) -> dict[str, str]:
        digest = hmac_sha256(
            standard_webhooks_key(secret),
            f"{event_id}.{timestamp}.".encode() + raw_body,
        )
        return {
            self.id_header: event_id,
            self.timestamp_header: str(timestamp),
            self.signature_header: f"v1,{base64.b64encode(digest).decode()}",
        }

    def secret_generate(self) -> str:
        return "whsec_" + base64.b64encode(random_secrets.token_bytes(32)).decode()

    def secret_validate(self, secret: str) -> None:
        try:
            if not secret.startswith("whsec_"):
                raise ValueError(secret)
            key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
        except ValueError as exc:
            raise InvalidPayload(
                "a standard-webhooks secret is whsec_<base64>",
                details={"secret": ["A standard-webhooks secret is whsec_<base64>."]},
            ) from exc
        if not WHSEC_MIN_BYTES <= len(key) <= WHSEC_MAX_BYTES:
            raise InvalidPayload(
                f"a whsec_ secret holds {WHSEC_MIN_BYTES} to {WHSEC_MAX_BYTES} bytes of "
                "key material",
                details={
                    "secret": [
                        f"{WHSEC_MIN_BYTES} to {WHSEC_MAX_BYTES} bytes of key material, "
                        f"decoded (this one has {len(key)})."
                    ]
                },
            )
        secret_length_check(secret, key=key)


DEFAULT_SCHEME = HmacSha256Scheme.name


@functools.cache
def schemes() -> dict[str, SignatureScheme]:
    """The registered schemes by name (``WEBHOOK_SCHEMES``), one instance each."""
    return {
        name: import_string(path)() for name, path in settings.WEBHOOK_SCHEMES.items()
    }


def scheme_names() -> list[str]:
    return list(settings.WEBHOOK_SCHEMES)


def scheme_get(name: str) -> SignatureScheme:
    return schemes()[name]


def scheme_choices() -> list[tuple[str, str]]:
    """The ``WebhookSource.scheme`` choices: the registry's schemes."""
    return [(name, scheme.label) for name, scheme in schemes().items()]


def signature_headers(
    *, scheme: str, secret: str, raw_body: bytes, event_id: str, timestamp: int
) -> dict[str, str]:
    """The headers a producer sends: used by ``send_test_webhook`` and the tests."""
    return scheme_get(scheme).sign(
        raw_body=raw_body, secret=secret, event_id=event_id, timestamp=timestamp
    )
