"""Signature schemes (docs/http-api.md, "Signature schemes"; docs/subsystems/inbox.md,
"Adding a signature scheme"): a registry from a source's ``scheme`` to one class that
verifies a delivery, signs one (``send_test_webhook``, the tests) and generates and
validates its secrets.

A verifier works on the raw bytes as received, compares in constant time, accepts several
entries in one header (any valid one against any valid secret passes; ``Verified`` names the
secret that matched) and skips entries of an unknown version. The refusals are
``SignatureFailureReason``: ``missing`` (no header), ``malformed`` (no parsable entry of a
version the source checks), ``mismatch`` (no entry matches). A ``standard-webhooks`` source may
hold Ed25519 public keys (``whpk_``) and check ``v1a`` entries instead of ``v1``.

The registry is ``WEBHOOK_SCHEMES`` (name to dotted path); each scheme declares the headers it
reads, from which the stored headers, the correlation id and the OpenAPI description follow.
Every ``verify`` is ``sensitive_variables``: an error report shows none of its secrets
(``core/reporting.py``).
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

from cryptography.exceptions import InvalidSignature as Ed25519Mismatch
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings
from django.utils.module_loading import import_string
from django.views.decorators.debug import sensitive_variables

from core.errors import InvalidPayload
from core.secrets import secret_problem
from core.signing import (
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WHSEC_MAX_BYTES,
    WHSEC_MIN_BYTES,
    hmac_sha256,
    standard_webhooks_content,
    v1_digest,
    v1_entry,
)

from .errors import InvalidSignature, SignatureFailureReason

_SEPARATORS = re.compile(r"[\s,]+")
_HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


@dataclass(frozen=True)
class Verified:
    """What a valid signature vouches for: the id header (may be empty) and the raw timestamp
    header (``None`` when the scheme has none). The timestamp is checked by the caller, after
    the signature, so that an unsigned request never learns about the window.
    ``event_id_signed``: the id header is part of the signed bytes (the scheme's
    ``signs_event_id``); when it is not, anyone holding a signed body can send it again under
    an id of their choosing. ``secret_fingerprint`` names the secret that matched."""

    event_id: str
    timestamp: str | None
    event_id_signed: bool = False
    # The fingerprint (``secret_fingerprint``) of the secret or public key that verified the
    # signature: during a rotation's grace period, the first of the source's that does.
    # Evidence bundles name it; the secret itself is never stored with the event.
    secret_fingerprint: str = ""


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
    holds"). A public key (``whpk_...``, as stored) is named the same way: anyone holding
    the key can compute its fingerprint."""
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
        raise InvalidSignature(SignatureFailureReason.MISSING)
    return signature, timestamp


def first_match(candidates: Sequence[bytes], expected: Sequence[bytes]) -> int | None:
    """The index of the first of ``expected`` (one digest per secret, in the source's order)
    that one of ``candidates`` equals, or ``None``."""
    # Every comparison runs: no early exit that would tell which secret or entry matched.
    matched = len(expected)
    for candidate in candidates:
        for index, digest in enumerate(expected):
            hit = hmac.compare_digest(candidate, digest)
            matched = min(matched, index if hit else matched)
    return None if matched == len(expected) else matched


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

# Standard Webhooks' asymmetric keys: ``whpk_`` + base64 of the 32-byte Ed25519 public key,
# ``whsk_`` + base64 of the 32-byte Ed25519 private key (RFC 8032's private key, the seed), as
# the reference library reads them.
PUBLIC_KEY_PREFIX = "whpk_"
PRIVATE_KEY_PREFIX = "whsk_"
ED25519_KEY_BYTES = 32
ED25519_SIGNATURE_BYTES = 64
# The DER header of an Ed25519 SubjectPublicKeyInfo (RFC 8410): 12 bytes, then the raw key.
_ED25519_SPKI_HEADER = bytes.fromhex("302a300506032b6570032100")
PRIVATE_KEY_REFUSED = (
    "a whsk_ key is the producer's private signing key: it stays with the producer, and "
    "the source holds its public key (whpk_..., --public-key)"
)
# The v1a entries of one header that are checked, at most: a producer signs with one key,
# two during its own rotation. An Ed25519 check costs a fraction of a millisecond, so that a
# header full of entries would otherwise buy an unsigned request tens of them
# (docs/security.md, "Public-key sources").
V1A_MAX_ENTRIES = 8


def _private_key_refuse(secret: str) -> None:
    if secret.startswith(PRIVATE_KEY_PREFIX):
        raise InvalidPayload(
            PRIVATE_KEY_REFUSED, details={"secret": [PRIVATE_KEY_REFUSED + "."]}
        )


def secret_characters_check(secret: str) -> None:
    """A secret without a leading or trailing space or a control character (a paste's or
    a CRLF file's leftover: ``core.secrets.secret_problem``); ``InvalidPayload`` saying
    which, never quoting the secret, otherwise."""
    problem = secret_problem(secret)
    if problem:
        raise InvalidPayload(
            f"the secret {problem}",
            details={"secret": [f"The secret {problem}: give it again without it."]},
        )


def secret_length_check(secret: str, *, key: bytes | None = None) -> None:
    """A secret as the ``secret`` column holds it (1-255 characters, no NUL, no stray
    character: ``secret_characters_check``) whose key material (``key``: the secret's
    UTF-8 bytes unless given) is at least ``SECRET_MIN_BYTES``; ``InvalidPayload`` naming
    the rule otherwise. An Ed25519 private key (``whsk_``) is never a source's secret,
    whatever its scheme: the inbox holds the producer's public key only."""
    secret_characters_check(secret)
    if not secret or len(secret) > 255 or "\x00" in secret:
        raise InvalidPayload(details={"secret": ["1-255 characters, no NUL."]})
    _private_key_refuse(secret)
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
            raise InvalidSignature(SignatureFailureReason.MALFORMED)
        message = header_bytes(headers, self.timestamp_header) + b"." + raw_body
        expected = [hmac_sha256(secret.encode(), message) for secret in secrets]
        matched = first_match(candidates, expected)
        if matched is None:
            raise InvalidSignature(SignatureFailureReason.MISMATCH)
        return Verified(
            event_id=header_value(headers, self.id_header),
            timestamp=timestamp,
            event_id_signed=self.signs_event_id,
            secret_fingerprint=secret_fingerprint(secrets[matched]),
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


def _public_key_refused(message: str) -> InvalidPayload:
    return InvalidPayload(
        message, details={"public_key": [message[:1].upper() + message[1:] + "."]}
    )


def public_key_parse(text: str) -> str:
    """The public key of a producer that signs ``v1a`` entries, as a source holds it:
    ``whpk_`` + the standard base64 of the 32-byte Ed25519 public key, written the one
    canonical way (so that its fingerprint names the key, not its spelling). Anything else
    is refused with a message (``InvalidPayload``): a ``whsk_`` private key, another prefix,
    text that is not base64, a decoded key that is not 32 bytes (a DER
    SubjectPublicKeyInfo, which some producers write after ``whpk_``, is named as such)."""
    text = text.strip()
    if text.startswith(PRIVATE_KEY_PREFIX):
        raise _public_key_refused(PRIVATE_KEY_REFUSED)
    shape = (
        "a public key is whpk_ followed by the base64 of the 32-byte Ed25519 public key"
    )
    if not text.startswith(PUBLIC_KEY_PREFIX):
        raise _public_key_refused(shape)
    try:
        raw = base64.b64decode(text.removeprefix(PUBLIC_KEY_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise _public_key_refused(f"{shape} (this one is not base64)") from None
    if len(raw) != ED25519_KEY_BYTES:
        message = f"{shape}: it holds 32 bytes (this one has {len(raw)})"
        if len(raw) == len(_ED25519_SPKI_HEADER) + ED25519_KEY_BYTES and raw.startswith(
            _ED25519_SPKI_HEADER
        ):
            message += (
                "; this one is a DER SubjectPublicKeyInfo, whose last 32 bytes are "
                "the key"
            )
        raise _public_key_refused(message)
    return PUBLIC_KEY_PREFIX + base64.b64encode(raw).decode()


def is_public_key(credential: str) -> bool:
    """Whether a source's credential is a public key (``whpk_``), not a secret: the prefix
    is the type, as Standard Webhooks intends it (a ``whsec_`` secret never starts so)."""
    return credential.startswith(PUBLIC_KEY_PREFIX)


@functools.lru_cache(maxsize=256)
def _ed25519_public_key(public_key: str) -> Ed25519PublicKey:
    """A stored ``whpk_`` key, loaded once per process (public: nothing secret is kept)."""
    raw = base64.b64decode(public_key.removeprefix(PUBLIC_KEY_PREFIX))
    return Ed25519PublicKey.from_public_bytes(raw)


def _ed25519_private_key(private_key: str) -> Ed25519PrivateKey:
    """The signing key of a ``whsk_`` private key (a producer's: ``send_test_webhook``)."""
    shape = "a private key is whsk_ followed by the base64 of the 32-byte Ed25519 seed"
    try:
        seed = base64.b64decode(
            private_key.removeprefix(PRIVATE_KEY_PREFIX), validate=True
        )
    except (binascii.Error, ValueError):
        raise InvalidPayload(shape) from None
    if len(seed) != ED25519_KEY_BYTES:
        raise InvalidPayload(f"{shape} (this one has {len(seed)} bytes)")
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_key_of(private_key: str) -> str:
    """The ``whpk_`` public key of a ``whsk_`` private key."""
    raw = (
        _ed25519_private_key(private_key)
        .public_key()
        .public_bytes(Encoding.Raw, PublicFormat.Raw)
    )
    return PUBLIC_KEY_PREFIX + base64.b64encode(raw).decode()


def key_pair_generate() -> tuple[str, str]:
    """A new Ed25519 key pair for a producer that signs ``v1a`` entries: ``(whsk_...,
    whpk_...)``, the private key first."""
    seed = random_secrets.token_bytes(ED25519_KEY_BYTES)
    private_key = PRIVATE_KEY_PREFIX + base64.b64encode(seed).decode()
    return private_key, public_key_of(private_key)


def _ed25519_match(
    candidates: Sequence[bytes], public_keys: Sequence[str], message: bytes
) -> str | None:
    """The first of ``public_keys`` that one of ``candidates`` verifies under, or ``None``."""
    # No constant-time concern here: the keys are public and so is everything compared.
    for public_key in public_keys:
        for candidate in candidates:
            try:
                _ed25519_public_key(public_key).verify(candidate, message)
            except Ed25519Mismatch:
                continue
            return public_key
    return None


class StandardWebhooksScheme:
    """Standard Webhooks: ``webhook-signature: v1,<base64>`` (space-separated list) over
    ``b"<id>.<timestamp>." + raw_body``; the key is the base64 part of ``whsec_<base64>``.
    A source holding ``whpk_`` public keys instead checks ``v1a,<base64>`` entries, Ed25519
    signatures of the same bytes, and no ``v1`` entry."""

    name = "standard-webhooks"
    label = "Standard Webhooks"
    signs_event_id = True
    id_header = ID_HEADER
    timestamp_header = TIMESTAMP_HEADER
    signature_header = SIGNATURE_HEADER
    header_descriptions = {
        id_header: "standard-webhooks: the event id.",
        timestamp_header: "standard-webhooks: unix seconds.",
        signature_header: "standard-webhooks: `v1,<base64>` entries, space separated, "
        "over `<id>.<timestamp>.` + the raw body, keyed by the base64 part of "
        "`whsec_...`; on a source holding a `whpk_...` public key, `v1a,<base64>` "
        "entries: Ed25519 signatures of the same bytes.",
    }

    @sensitive_variables()
    def verify(
        self, *, raw_body: bytes, headers: Mapping[str, str], secrets: Sequence[str]
    ) -> Verified:
        signature, timestamp = _signature_and_timestamp(
            headers, self.signature_header, self.timestamp_header
        )
        public_keys = [s for s in secrets if is_public_key(s)]
        secrets = [s for s in secrets if not is_public_key(s)]
        # The versions this source checks: v1a for its public keys, v1 for its secrets (and
        # for a source with neither, as before public keys were held).
        sizes = {}
        if secrets or not public_keys:
            sizes["v1"] = hashlib.sha256().digest_size
        if public_keys:
            sizes["v1a"] = ED25519_SIGNATURE_BYTES
        candidates: dict[str, list[bytes]] = {"v1": [], "v1a": []}
        for entry in signature.split():
            version, _, value = entry.partition(",")
            if version not in sizes or not value:
                continue
            try:
                digest = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                continue
            if len(digest) == sizes[version]:
                candidates[version].append(digest)
        if not (candidates["v1"] or candidates["v1a"]):
            raise InvalidSignature(SignatureFailureReason.MALFORMED)
        event_id = header_value(headers, self.id_header)
        # Over the bytes the producer signed: the headers as sent.
        message = standard_webhooks_content(
            header_bytes(headers, self.id_header),
            header_bytes(headers, self.timestamp_header),
            raw_body,
        )
        expected = [v1_digest(secret, message) for secret in secrets]
        index = first_match(candidates["v1"], expected)
        matched = (
            secrets[index]
            if index is not None
            else _ed25519_match(
                candidates["v1a"][:V1A_MAX_ENTRIES], public_keys, message
            )
        )
        if matched is None:
            raise InvalidSignature(SignatureFailureReason.MISMATCH)
        return Verified(
            event_id=event_id,
            timestamp=timestamp,
            event_id_signed=self.signs_event_id,
            secret_fingerprint=secret_fingerprint(matched),
        )

    def sign(
        self, *, raw_body: bytes, secret: str, event_id: str, timestamp: int
    ) -> dict[str, str]:
        """A ``v1`` entry under a ``whsec_`` secret, a ``v1a`` entry under a ``whsk_``
        private key."""
        message = standard_webhooks_content(
            event_id.encode(), str(timestamp).encode(), raw_body
        )
        if secret.startswith(PRIVATE_KEY_PREFIX):
            signed = _ed25519_private_key(secret).sign(message)
            entry = f"v1a,{base64.b64encode(signed).decode()}"
        elif is_public_key(secret):
            raise InvalidPayload(
                "a public key (whpk_) verifies signatures; its private key (whsk_) signs"
            )
        else:
            entry = v1_entry(secret, message)
        return {
            self.id_header: event_id,
            self.timestamp_header: str(timestamp),
            self.signature_header: entry,
        }

    def secret_generate(self) -> str:
        return "whsec_" + base64.b64encode(random_secrets.token_bytes(32)).decode()

    def secret_validate(self, secret: str) -> None:
        secret_characters_check(secret)
        if is_public_key(secret):
            raise InvalidPayload(
                "a whpk_ public key is given with --public-key, not as a secret",
                details={
                    "secret": [
                        "A whpk_ public key is given as the source's public key, "
                        "not as a secret."
                    ]
                },
            )
        _private_key_refuse(secret)
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

    def public_key_validate(self, public_key: str) -> str:
        """The source's public key as it is stored (``public_key_parse``)."""
        return public_key_parse(public_key)


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


def public_key_validate(*, scheme: str, public_key: str) -> str:
    """``public_key`` as a source of ``scheme`` holds it (``whpk_...``, canonical), or
    ``InvalidPayload``: also when the scheme verifies with secrets only (a scheme takes
    public keys when it has ``public_key_validate``, as ``standard-webhooks`` does)."""
    validate = getattr(scheme_get(scheme), "public_key_validate", None)
    if validate is None:
        message = (
            f"the {scheme} scheme verifies with secrets only; a public key needs "
            "--scheme standard-webhooks"
        )
        raise InvalidPayload(message, details={"public_key": [message]})
    return validate(public_key)


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
