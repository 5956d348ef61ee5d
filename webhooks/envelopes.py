"""What the ingest path reads from a verified body: the envelope, and the checks every
integration's envelope is built from (docs/http-api.md, "Envelopes").

Each integration (``webhooks.integrations``) turns a verified body into an ``Envelope``: it
validates what ingest needs (ids, type, ordering fields) and leaves its domain's data to its
handler at processing time. Every check here runs before anything is stored, so a value the
database could not hold never becomes an inbox row.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core.canonical import canonical_json
from core.errors import InvalidJson
from core.times import INSTANT_RANGE_MESSAGE, instant_in_range

DELIVERY_FIELDS = ("delivered_at", "delivery_attempt")
MAX_ID_LENGTH = 128
# JSON deeper than this is refused at ingest (400 invalid_json): no producer needs it, and
# every later reader (the handler, the admin's pretty-printer) must be able to walk it.
MAX_NESTING = 64

# RFC 3339 date-time with a mandatory offset or Z; a bare date is not an instant.
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})"
)


@dataclass(frozen=True)
class Envelope:
    """The columns of an inbox row that come from the body (or the producer's headers).

    ``event_id_signed``: the event id is covered by the signature (it is in the signed body,
    or in a header the scheme signs). When it is not, the signed body itself is what
    identifies the event: the same bytes under another id are a duplicate of the stored
    event, not a new one (docs/security.md, "Replays")."""

    event_id: str
    event_type: str
    content_fingerprint: str
    entity_id: str = ""
    entity_type: str = ""
    source_version: int | None = None
    occurred_at: datetime | None = None
    tenant_id: str = ""
    idempotency_key: str = ""
    event_id_signed: bool = False


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _depth_within(value: Any, limit: int) -> bool:
    """Iterative, so that measuring a deep value cannot exhaust the stack either."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


def body_parse(raw_body: bytes) -> dict:
    """The body as a JSON object, or ``InvalidJson``: strict UTF-8, no NaN/Infinity, no lone
    surrogates (they cannot be stored or fingerprinted as UTF-8), nested at most
    ``MAX_NESTING`` levels."""
    try:
        text = raw_body.decode("utf-8")
        body = json.loads(text, parse_constant=_reject_constant)
        # Each walk only where it can find something: a value is no deeper than the body
        # has brackets, and strict UTF-8 bytes hold no lone surrogate, so only a ``\u``
        # escape can make one (which encoding the canonical form then refuses).
        openers = raw_body.count(b"{") + raw_body.count(b"[")
        if openers > MAX_NESTING and not _depth_within(body, MAX_NESTING):
            raise ValueError("nested too deep")
        if b"\\u" in raw_body:
            canonical_json(body)
    except (UnicodeError, ValueError, RecursionError) as exc:
        raise InvalidJson() from exc
    if not isinstance(body, dict):
        raise InvalidJson()
    return body


def content_fingerprint(body: dict) -> str:
    """SHA-256 of the canonical JSON without the top-level delivery fields: a provider retry that
    only changes ``delivered_at`` or ``delivery_attempt`` is the same content."""
    content = {k: v for k, v in body.items() if k not in DELIVERY_FIELDS}
    return hashlib.sha256(canonical_json(content)).hexdigest()


def raw_fingerprint(raw_body: bytes) -> str:
    """SHA-256 of the raw body: for producers whose redeliveries are byte-identical."""
    return hashlib.sha256(raw_body).hexdigest()


# --- the checks envelopes are built from: each returns an error message, or None --------------


def text_error(
    value: Any, *, required: bool, max_length: int = MAX_ID_LENGTH
) -> str | None:
    """A string the database can store: at most ``max_length`` characters, no NUL."""
    if value is None:
        return "This field is required." if required else None
    if not isinstance(value, str):
        return "Must be a string."
    if required and not value:
        return "Must not be empty."
    if len(value) > max_length:
        return f"At most {max_length} characters."
    if "\x00" in value:
        return "Must not contain NUL characters."
    return None


def instant_parse(value: Any, *, required: bool) -> tuple[datetime | None, str | None]:
    """An RFC 3339 date-time with a UTC offset or ``Z``, converted to UTC and within
    ``core.times.EARLIEST_INSTANT``..``LATEST_INSTANT``; ``(value, None)`` or ``(None,
    message)``."""
    if value is None:
        return None, ("This field is required." if required else None)
    message = "Must be an RFC 3339 date-time with a UTC offset or Z."
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        return None, message
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z").replace("t", "T"))
        parsed = parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        # A valid local time whose UTC instant falls outside year 1..9999.
        return None, INSTANT_RANGE_MESSAGE
    if not instant_in_range(parsed):
        return None, INSTANT_RANGE_MESSAGE
    return parsed, None


def non_negative_int_error(value: Any, *, maximum: int = 2**63 - 1) -> str | None:
    """An integer in ``0..maximum`` (JSON booleans are not integers)."""
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not 0 <= value <= maximum
    ):
        return "Must be an integer >= 0."
    return None
