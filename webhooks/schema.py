"""The OpenAPI description of the webhook endpoint, a plain Django view kept off DRF for speed
(docs/http-api.md, "POST /webhooks/<slug>/"): its headers are those the registered signature
schemes and integrations declare."""

from __future__ import annotations

from core.schema import RETRY_AFTER_HEADER, error_response

from .integrations import integration_get, integration_names
from .schemes import schemes


def webhook_receive_operation() -> dict:
    """``POST /webhooks/<slug>/``: every registered scheme's and integration's headers."""
    header = {"in": "header", "required": False, "schema": {"type": "string"}}
    headers: dict[str, str] = {}
    for scheme in schemes().values():
        headers.update(scheme.header_descriptions)
    for name in integration_names():
        headers.update(integration_get(name).headers)
    accepted = {
        "type": "object",
        "properties": {"status": {"type": "string"}, "event_id": {"type": "string"}},
        "required": ["status", "event_id"],
    }
    duplicate = {
        "type": "object",
        "properties": {
            "status": {"type": "string"},
            "event_id": {"type": "string"},
            "processing_status": {"type": "string"},
        },
        "required": ["status", "event_id", "processing_status"],
    }
    return {
        "operationId": "webhooks_receive",
        "summary": "Receive a signed webhook event",
        "description": (
            "Verifies the signature over the raw body with the source's scheme, deduplicates "
            "on (source, event id) in the database and answers once the event is durably "
            "committed; processing happens later in a worker. Checks run in this order: "
            "source (404), method (405), size (413), signature (401), timestamp (400), "
            "JSON (400), envelope (422), then 202 / 200 / 409."
        ),
        "tags": ["webhooks"],
        "security": [],
        "parameters": [
            {
                "name": "slug",
                "in": "path",
                "required": True,
                "schema": {"type": "string"},
            },
            *(
                {**header, "name": name, "description": text}
                for name, text in headers.items()
            ),
        ],
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "description": "The producer's event envelope, signed as sent.",
                        "additionalProperties": True,
                    }
                }
            },
        },
        "responses": {
            "202": {
                "description": "A new event, durably stored.",
                "content": {"application/json": {"schema": accepted}},
            },
            "200": {
                "description": "The same event id with the same content: a duplicate.",
                "content": {"application/json": {"schema": duplicate}},
            },
            "400": error_response(
                "`timestamp_out_of_window`, `invalid_json`, or `invalid_body` (a body that "
                "cannot be read to its end)."
            ),
            "401": error_response(
                "`unauthorized`: signature or timestamp missing or not valid."
            ),
            "404": error_response(
                "`unknown_source`: no such source, or it is disabled."
            ),
            "409": error_response(
                "`inconsistent_duplicate`: the same event id with other content."
            ),
            "413": error_response("`payload_too_large`."),
            "422": error_response("`invalid_payload`, with `details`."),
            "503": error_response(
                "`temporarily_unavailable`: retry after `Retry-After` seconds.",
                RETRY_AFTER_HEADER,
            ),
        },
    }


def webhook_receive_postprocess(result, generator, request, public):
    """A drf-spectacular post-processing hook: adds the webhook endpoint."""
    result.setdefault("paths", {})["/webhooks/{slug}/"] = {
        "post": webhook_receive_operation()
    }
    return result
