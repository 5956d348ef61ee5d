"""The research envelope (docs/http-api.md, "The research envelope"), parsed in one place:
at ingest, where a refusal is a 422, and again by the handler, which reads the stored body
with the same rules and adds the ``data`` member's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from core.errors import InvalidPayload
from webhooks.envelopes import (
    MAX_ID_LENGTH,
    instant_parse,
    non_negative_int_error,
    text_error,
)

DOCUMENT_EVENTS_WITH_SOURCE = ("research.document.created", "research.document.updated")
URL_MAX_LENGTH = 8192
CONTENT_HASH_MAX_LENGTH = 255  # the documents' and revisions' column
TEXT_MAX_LENGTH = 100_000


@dataclass(frozen=True)
class ResearchSource:
    url: str = ""
    title: str = ""
    content_hash: str = ""
    published_at: datetime | None = None


@dataclass(frozen=True)
class ResearchEvent:
    event_id: str
    event_type: str
    occurred_at: datetime
    entity_id: str
    entity_type: str
    source_version: int | None
    tenant_id: str
    idempotency_key: str
    source: ResearchSource
    data: Any


class _Errors(dict):
    def check(self, name: str, message: str | None) -> None:
        if message:
            self[name] = [message]


def _entity_parse(entity: Any, errors: _Errors) -> tuple[str, str, int | None]:
    if not isinstance(entity, dict):
        errors["entity"] = ["Must be an object with entity_id and entity_type."]
        return "", "", None
    entity_errors = _Errors()
    for name in ("entity_id", "entity_type"):
        entity_errors.check(name, text_error(entity.get(name), required=True))
    version = entity.get("source_version")
    if version is not None:
        entity_errors.check("source_version", non_negative_int_error(version))
    if entity_errors:
        errors["entity"] = dict(entity_errors)
        return "", "", None
    return entity["entity_id"], entity["entity_type"], version


def _source_parse(source: Any, event_type: Any, errors: _Errors) -> ResearchSource:
    if source is None:
        source = {}
    if not isinstance(source, dict):
        errors["source"] = ["Must be an object."]
        return ResearchSource()
    source_errors = _Errors()
    required = event_type in DOCUMENT_EVENTS_WITH_SOURCE
    for name, limit in (
        ("url", URL_MAX_LENGTH),
        ("content_hash", CONTENT_HASH_MAX_LENGTH),
        ("title", TEXT_MAX_LENGTH),
    ):
        message = text_error(source.get(name), required=False, max_length=limit)
        if message is None and required and name != "title" and not source.get(name):
            message = "This field is required."
        source_errors.check(name, message)
    published_at, message = instant_parse(source.get("published_at"), required=False)
    source_errors.check("published_at", message)
    if source_errors:
        errors["source"] = dict(source_errors)
        return ResearchSource()
    return ResearchSource(
        url=source.get("url") or "",
        title=source.get("title") or "",
        content_hash=source.get("content_hash") or "",
        published_at=published_at,
    )


# The event id as the id header carries it: no control character, no space or tab at either
# end (HTTP drops those): an id without such a header could never be delivered.
EVENT_ID_PATTERN = (
    r"[^\u0000-\u001f\u007f ](?:[^\u0000-\u001f\u007f]*[^\u0000-\u001f\u007f ])?"
)
_EVENT_ID = re.compile(EVENT_ID_PATTERN)


def _event_id_error(value: Any) -> str | None:
    message = text_error(value, required=True)
    if message is None and not _EVENT_ID.fullmatch(value):
        return "Must be what a header carries: no control character, no space at either end."
    return message


def research_event_parse(body: dict) -> ResearchEvent:
    """The envelope's members, checked; ``InvalidPayload`` naming every field that fails.
    Dates are converted to UTC and must lie in the range every time zone can read back."""
    errors = _Errors()
    event_id, event_type = body.get("event_id"), body.get("event_type")
    errors.check("event_id", _event_id_error(event_id))
    errors.check("event_type", text_error(event_type, required=True))
    occurred_at, message = instant_parse(body.get("occurred_at"), required=True)
    errors.check("occurred_at", message)
    errors.check(
        "delivered_at", instant_parse(body.get("delivered_at"), required=False)[1]
    )
    attempt = body.get("delivery_attempt")
    if attempt is not None:
        errors.check("delivery_attempt", non_negative_int_error(attempt))
    for name, limit in (
        ("producer", 255),
        ("tenant_id", MAX_ID_LENGTH),
        ("idempotency_key", 255),
    ):
        errors.check(name, text_error(body.get(name), required=False, max_length=limit))
    entity_id, entity_type, source_version = _entity_parse(body.get("entity"), errors)
    source = _source_parse(body.get("source"), event_type, errors)
    if errors:
        raise InvalidPayload(details=dict(errors))
    # Checked above: the ids are text, the time is there.
    return ResearchEvent(
        event_id=cast(str, event_id),
        event_type=cast(str, event_type),
        occurred_at=cast(datetime, occurred_at),
        entity_id=entity_id,
        entity_type=entity_type,
        source_version=source_version,
        tenant_id=body.get("tenant_id") or "",
        idempotency_key=body.get("idempotency_key") or "",
        source=source,
        data=body.get("data"),
    )


# --- the envelope as the endpoint's OpenAPI schema states it (webhooks/schema.py) ---------
# The same rules as ``research_event_parse``, from the same limits. OpenAPI 3.0: an optional
# member may be null (``nullable``); no text may hold a NUL (PostgreSQL's text cannot).
_NO_NUL = r"^[^\u0000]*$"


def _text_schema(max_length: int, *, required: bool) -> dict:
    schema: dict[str, str | int | bool] = {
        "type": "string",
        "maxLength": max_length,
        "pattern": _NO_NUL,
    }
    if required:
        schema["minLength"] = 1
    else:
        schema["nullable"] = True
    return schema


def _instant_schema(*, required: bool) -> dict:
    schema: dict[str, str | bool] = {
        "type": "string",
        "format": "date-time",
        "description": "RFC 3339 with an offset or Z, between 0001-01-02 and 9999-12-31 "
        "in UTC.",
    }
    if not required:
        schema["nullable"] = True
    return schema


_COUNT = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}

RESEARCH_EVENT_SCHEMA: dict = {
    "type": "object",
    "description": 'The research envelope (docs/http-api.md, "The research envelope"). '
    f"For {' and '.join(DOCUMENT_EVENTS_WITH_SOURCE)}, `source.url` and "
    "`source.content_hash` are required. `data` is the domain's, validated at "
    "processing.",
    "properties": {
        "event_id": {
            **_text_schema(MAX_ID_LENGTH, required=True),
            "pattern": f"^{EVENT_ID_PATTERN}$",
            "description": "Named by the id header too: no control character, no space "
            "at either end.",
        },
        "event_type": _text_schema(MAX_ID_LENGTH, required=True),
        "occurred_at": _instant_schema(required=True),
        "delivered_at": _instant_schema(required=False),
        "delivery_attempt": {**_COUNT, "nullable": True},
        "producer": _text_schema(255, required=False),
        "tenant_id": _text_schema(MAX_ID_LENGTH, required=False),
        "idempotency_key": _text_schema(255, required=False),
        "entity": {
            "type": "object",
            "properties": {
                "entity_id": _text_schema(MAX_ID_LENGTH, required=True),
                "entity_type": _text_schema(MAX_ID_LENGTH, required=True),
                "source_version": {**_COUNT, "nullable": True},
            },
            "required": ["entity_id", "entity_type"],
        },
        "source": {
            "type": "object",
            "nullable": True,
            "properties": {
                "url": _text_schema(URL_MAX_LENGTH, required=False),
                "title": _text_schema(TEXT_MAX_LENGTH, required=False),
                "content_hash": _text_schema(CONTENT_HASH_MAX_LENGTH, required=False),
                "published_at": _instant_schema(required=False),
            },
        },
        "data": {"description": "Any JSON value."},
    },
    "required": ["event_id", "event_type", "occurred_at", "entity"],
    # A document created or updated names its source; any other type may. Each form a
    # named schema, so that client generators name what they make of it.
    "anyOf": [
        {"$ref": "#/components/schemas/ResearchEventOfAnotherType"},
        {"$ref": "#/components/schemas/ResearchEventWithSource"},
    ],
}
RESEARCH_EVENT_COMPONENTS: dict = {
    "ResearchEventOfAnotherType": {
        "type": "object",
        "properties": {
            "event_type": {"not": {"enum": list(DOCUMENT_EVENTS_WITH_SOURCE)}}
        },
    },
    "ResearchEventWithSource": {
        "type": "object",
        "required": ["source"],
        "properties": {
            "source": {
                "type": "object",
                "required": ["url", "content_hash"],
                "properties": {
                    "url": {"type": "string", "minLength": 1},
                    "content_hash": {"type": "string", "minLength": 1},
                },
            }
        },
    },
}
