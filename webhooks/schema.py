"""The OpenAPI description of the webhook endpoint, a plain Django view kept off DRF for speed
(docs/http-api.md, "Webhook ingest"): its headers are those the registered signature
schemes and integrations declare."""

from __future__ import annotations

from core.schema import RETRY_AFTER_HEADER, error_response

from .integrations import integration_get, integration_names
from .schemes import schemes

ENVELOPE_COMPONENT_SUFFIX = "Event"


def _envelope_schemas() -> tuple[dict[str, dict], dict[str, dict], list[str]]:
    """The envelope schema of each integration that declares one, by component name, the
    named schemas they refer to, and the integrations whose body is the producer's own."""
    schemas: dict[str, dict] = {}
    components: dict[str, dict] = {}
    own: list[str] = []
    for name in integration_names():
        integration = integration_get(name)
        schema = getattr(integration, "envelope_schema", None)
        if schema is None:
            own.append(name)
            continue
        schemas[f"{name.title()}{ENVELOPE_COMPONENT_SUFFIX}"] = dict(schema)
        for component, definition in getattr(
            integration, "envelope_components", {}
        ).items():
            components[component] = dict(definition)
    return schemas, components, own


def _request_body_schema(schemas: dict[str, dict], own: list[str]) -> dict:
    refs: list[dict] = [{"$ref": f"#/components/schemas/{name}"} for name in schemas]
    if not refs:
        return {"type": "object", "additionalProperties": True}
    schema: dict = refs[0] if len(refs) == 1 else {"oneOf": refs}
    if own:
        # A description beside a $ref is ignored by OpenAPI 3.0 tools: an allOf of one.
        schema = {
            "allOf": [schema],
            "description": "The envelope of a source whose handler is "
            f"{' or '.join(_handler_names(schemas))}; a source whose handler is "
            f"{' or '.join(f'`{name}`' for name in own)} takes its producer's own body "
            "(any JSON object), "
            "identified by that producer's headers.",
        }
    return schema


def _handler_names(schemas: dict[str, dict]) -> list[str]:
    return [
        f"`{name.removesuffix(ENVELOPE_COMPONENT_SUFFIX).lower()}`" for name in schemas
    ]


def webhook_receive_operation(schemas: dict[str, dict], own: list[str]) -> dict:
    """``POST /webhooks/<slug>/``: every registered scheme's and integration's headers, and
    the envelopes the integrations declare."""
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
                "application/json": {"schema": _request_body_schema(schemas, own)}
            },
        },
        "responses": {
            "202": {
                "description": "A new event, durably stored.",
                "content": {"application/json": {"schema": accepted}},
                "links": _event_links(),
            },
            "200": {
                "description": "The same event id with the same content: a duplicate.",
                "content": {"application/json": {"schema": duplicate}},
                "links": _event_links(),
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


def _event_links() -> dict:
    return {
        "GetEventStatus": {
            "operationId": "webhooks_events_retrieve",
            "parameters": {
                "slug": "$request.path.slug",
                "event_id": "$response.body#/event_id",
            },
            "description": "What became of the event.",
        }
    }


def webhook_receive_postprocess(result, generator, request, public):
    """A drf-spectacular post-processing hook: adds the webhook endpoint, and the envelope
    schemas it names."""
    schemas, components, own = _envelope_schemas()
    named = result.setdefault("components", {}).setdefault("schemas", {})
    named.update(schemas)
    named.update(components)
    result.setdefault("paths", {})["/webhooks/{slug}/"] = {
        "post": webhook_receive_operation(schemas, own)
    }
    return result
