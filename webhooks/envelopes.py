"""Envelopes: what the ingest path reads from a verified body, per handler.

A registry from a source's ``handler`` to a parser ``(body, raw_body, headers, verified) ->
Envelope``. It validates only what ingest needs (ids, type, ordering fields); the ``data`` member
is the domain handler's business at processing time.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.canonical import canonical_json
from core.errors import InvalidJson, InvalidPayload

from .schemes import Verified

DELIVERY_FIELDS = ("delivered_at", "delivery_attempt")
DOCUMENT_EVENTS_WITH_SOURCE = ("research.document.created", "research.document.updated")
MAX_ID_LENGTH = 128

# RFC 3339 date-time with a mandatory offset or Z; a bare date is not an instant.
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})"
)


@dataclass(frozen=True)
class Envelope:
    event_id: str
    event_type: str
    content_fingerprint: str
    entity_id: str = ""
    entity_type: str = ""
    source_version: int | None = None
    occurred_at: datetime | None = None
    tenant_id: str = ""
    idempotency_key: str = ""


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def body_parse(raw_body: bytes) -> dict:
    """The body as a JSON object, or ``InvalidJson``: strict UTF-8, no NaN/Infinity, no lone
    surrogates (they cannot be stored or fingerprinted as UTF-8)."""
    try:
        text = raw_body.decode("utf-8")
        body = json.loads(text, parse_constant=_reject_constant)
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


def _text(value: Any, *, required: bool, max_length: int = MAX_ID_LENGTH) -> str | None:
    """An error message, or None when ``value`` is an acceptable identifier."""
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


def _timestamp(value: Any, *, required: bool) -> tuple[datetime | None, str | None]:
    if value is None:
        return None, ("This field is required." if required else None)
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        return None, "Must be an RFC 3339 date-time with a UTC offset or Z."
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z").replace("t", "T"))
    except ValueError:
        return None, "Must be an RFC 3339 date-time with a UTC offset or Z."
    return parsed, None


def research_envelope(
    *, body: dict, raw_body: bytes, headers: Mapping[str, str], verified: Verified
) -> Envelope:
    errors: dict[str, Any] = {}

    def check(name: str, message: str | None) -> None:
        if message:
            errors[name] = [message]

    event_id = body.get("event_id")
    check("event_id", _text(event_id, required=True))
    event_type = body.get("event_type")
    check("event_type", _text(event_type, required=True))
    occurred_at, message = _timestamp(body.get("occurred_at"), required=True)
    check("occurred_at", message)
    for optional in ("delivered_at",):
        check(optional, _timestamp(body.get(optional), required=False)[1])
    attempt = body.get("delivery_attempt")
    if attempt is not None and (
        not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0
    ):
        check("delivery_attempt", "Must be an integer >= 0.")
    for optional, limit in (
        ("producer", 255),
        ("tenant_id", MAX_ID_LENGTH),
        ("idempotency_key", 255),
    ):
        check(optional, _text(body.get(optional), required=False, max_length=limit))

    entity = body.get("entity")
    source_version = None
    if not isinstance(entity, dict):
        errors["entity"] = ["Must be an object with entity_id and entity_type."]
        entity = {}
    else:
        entity_errors: dict[str, list[str]] = {}
        for name in ("entity_id", "entity_type"):
            message = _text(entity.get(name), required=True)
            if message:
                entity_errors[name] = [message]
        source_version = entity.get("source_version")
        if source_version is not None and (
            not isinstance(source_version, int)
            or isinstance(source_version, bool)
            or not 0 <= source_version < 2**63
        ):
            entity_errors["source_version"] = ["Must be an integer >= 0."]
        if entity_errors:
            errors["entity"] = entity_errors

    source = body.get("source")
    if source is not None and not isinstance(source, dict):
        errors["source"] = ["Must be an object."]
    elif event_type in DOCUMENT_EVENTS_WITH_SOURCE:
        source = source or {}
        source_errors = {
            name: ["This field is required."]
            for name in ("url", "content_hash")
            if not isinstance(source.get(name), str) or not source.get(name)
        }
        if source_errors:
            errors["source"] = source_errors

    if not verified.event_id:
        errors["event_id_header"] = ["The event id header is required."]
    elif isinstance(event_id, str) and verified.event_id != event_id:
        errors["event_id_header"] = ["Differs from the body's event_id."]
    if errors:
        raise InvalidPayload(details=errors)
    return Envelope(
        event_id=event_id,
        event_type=event_type,
        content_fingerprint=content_fingerprint(body),
        entity_id=entity["entity_id"],
        entity_type=entity["entity_type"],
        source_version=source_version,
        occurred_at=occurred_at,
        tenant_id=body.get("tenant_id") or "",
        idempotency_key=body.get("idempotency_key") or "",
    )


def github_envelope(
    *, body: dict, raw_body: bytes, headers: Mapping[str, str], verified: Verified
) -> Envelope:
    """GitHub's own envelope: the id is ``X-GitHub-Delivery``, the type ``X-GitHub-Event``;
    the fingerprint is the SHA-256 of the raw body (GitHub redeliveries are byte-identical)."""
    delivery = (headers.get("X-GitHub-Delivery") or "").strip()
    event_type = (headers.get("X-GitHub-Event") or "").strip()
    errors = {}
    for name, value in (
        ("X-GitHub-Delivery", delivery),
        ("X-GitHub-Event", event_type),
    ):
        message = _text(value, required=True)
        if message:
            errors[name] = [message]
    if errors:
        raise InvalidPayload(details=errors)
    repository = body.get("repository")
    entity_id = ""
    if isinstance(repository, dict) and isinstance(repository.get("full_name"), str):
        entity_id = repository["full_name"][:MAX_ID_LENGTH].replace("\x00", "")
    return Envelope(
        event_id=delivery,
        event_type=event_type,
        content_fingerprint=hashlib.sha256(raw_body).hexdigest(),
        entity_id=entity_id,
        entity_type="repository" if entity_id else "",
    )


ENVELOPES = {
    "research": research_envelope,
    "github": github_envelope,
}
