"""Standard Webhooks' ``v1`` signature (docs/security.md, "What the trigger secret
protects"): HMAC-SHA256 keyed by a ``whsec_`` secret over ``<id>.<timestamp>.<body>``, as the
reference library computes it.

One implementation: the ``http`` executor signs its triggers with it, and the inbox's
``standard-webhooks`` scheme (``webhooks.schemes``) verifies and signs ``v1`` entries with
the same functions."""

from __future__ import annotations

import base64
import hashlib
import hmac

from django.views.decorators.debug import sensitive_variables

from .secrets import secret_problem

WHSEC_PREFIX = "whsec_"
# Standard Webhooks' own range for the decoded key of a ``whsec_`` secret.
WHSEC_MIN_BYTES, WHSEC_MAX_BYTES = 24, 64

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


@sensitive_variables()
def standard_webhooks_key(secret: str) -> bytes:
    """The key of a ``whsec_<base64>`` secret, as the reference library derives it."""
    return base64.b64decode(secret.removeprefix(WHSEC_PREFIX))


def standard_webhooks_content(
    message_id: bytes, timestamp: bytes, body: bytes
) -> bytes:
    """The signed bytes: ``<id>.<timestamp>.`` and the body, the id and timestamp as the
    headers carry them."""
    return b".".join([message_id, timestamp, body])


@sensitive_variables()
def v1_digest(secret: str, content: bytes) -> bytes:
    """The ``v1`` signature of ``content`` (``standard_webhooks_content``) under a
    ``whsec_`` secret."""
    return hmac_sha256(standard_webhooks_key(secret), content)


@sensitive_variables()
def v1_entry(secret: str, content: bytes) -> str:
    """The ``v1,<base64>`` entry of a ``webhook-signature`` header."""
    return f"v1,{base64.b64encode(v1_digest(secret, content)).decode()}"


@sensitive_variables()
def standard_webhooks_sign(
    *, body: bytes, secret: str, message_id: str, timestamp: int
) -> dict[str, str]:
    """The three Standard Webhooks headers of ``body``, signed with a ``whsec_`` secret."""
    content = standard_webhooks_content(
        message_id.encode(), str(timestamp).encode(), body
    )
    return {
        ID_HEADER: message_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: v1_entry(secret, content),
    }


@sensitive_variables()
def whsec_problem(secret: str) -> str:
    """What makes ``secret`` no ``whsec_`` secret a receiver accepts ("" when nothing): a
    stray character (``core.secrets.secret_problem``), another prefix, text that is not
    base64, or a key outside Standard Webhooks' range. Never quotes the secret."""
    problem = secret_problem(secret)
    if problem:
        return f"the secret {problem}"
    shape = "a Standard Webhooks secret is whsec_<base64>"
    if not secret.startswith(WHSEC_PREFIX):
        return shape
    try:
        key = base64.b64decode(secret.removeprefix(WHSEC_PREFIX), validate=True)
    except ValueError:
        return shape
    if not WHSEC_MIN_BYTES <= len(key) <= WHSEC_MAX_BYTES:
        return (
            f"a whsec_ secret holds {WHSEC_MIN_BYTES} to {WHSEC_MAX_BYTES} bytes of key "
            "material"
        )
    return ""
