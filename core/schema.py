from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "core.authentication.BearerTokenAuthentication"
    name = "BearerToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "The token printed by `manage.py api_client create`.",
        }


ERROR_SCHEMA = {
    "type": "object",
    "description": "Every error answers a stable `error` code (see the API documentation).",
    "properties": {
        "error": {"type": "string"},
        "details": {"type": "object", "additionalProperties": True},
    },
    "required": ["error"],
    "additionalProperties": True,
}
ERROR_REF = {"$ref": "#/components/schemas/Error"}


def _error(description: str, headers: dict | None = None) -> dict:
    response = {
        "description": description,
        "content": {"application/json": {"schema": ERROR_REF}},
    }
    if headers:
        response["headers"] = headers
    return response


# Headers of the shared error answers (docs/http-api.md, "Errors").
_RETRY_AFTER = {
    "Retry-After": {
        "required": True,
        "schema": {"type": "integer"},
        "description": "Seconds to wait before retrying.",
    }
}
_WWW_AUTHENTICATE = {
    "WWW-Authenticate": {
        "required": True,
        "schema": {"type": "string", "enum": ["Bearer"]},
    }
}


def _webhook_operation() -> dict:
    header = {"in": "header", "required": False, "schema": {"type": "string"}}
    headers = {
        "X-Webhook-Id": "hmac-sha256: the event id (must equal the body's `event_id`).",
        "X-Webhook-Timestamp": "hmac-sha256: unix seconds; outside the tolerance is a 400.",
        "X-Webhook-Signature": "hmac-sha256: `v1=<hex>` entries, space or comma separated, "
        "HMAC-SHA256 of `<timestamp>.` + the raw body.",
        "webhook-id": "standard-webhooks: the event id.",
        "webhook-timestamp": "standard-webhooks: unix seconds.",
        "webhook-signature": "standard-webhooks: `v1,<base64>` entries, space separated, over "
        "`<id>.<timestamp>.` + the raw body, keyed by the base64 part of `whsec_...`.",
        "X-GitHub-Delivery": "github: the event id.",
        "X-GitHub-Event": "github: the event type.",
        "X-Hub-Signature-256": "github: `sha256=<hex>` of the raw body.",
    }
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
            "400": _error("`timestamp_out_of_window` or `invalid_json`."),
            "401": _error(
                "`unauthorized`: signature or timestamp missing or not valid."
            ),
            "404": _error("`unknown_source`: no such source, or it is disabled."),
            "409": _error(
                "`inconsistent_duplicate`: the same event id with other content."
            ),
            "413": _error("`payload_too_large`."),
            "422": _error("`invalid_payload`, with `details`."),
            "503": _error(
                "`temporarily_unavailable`: retry after `Retry-After` seconds."
            ),
        },
    }


def error_responses_postprocess(result, generator, request, public):
    """Documents what every operation can answer besides its success (the stable error bodies),
    and the webhook endpoint, which is a plain Django view kept off DRF for speed."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = (
        ERROR_SCHEMA
    )
    # What an operation answers besides what its view declares: 401 where a token is
    # needed, 404 for an id in the path or a cursor not issued, the refusals of a POST's
    # key and body, and 503 everywhere. A view declares any other answer itself (a 404 of a
    # POST, a 422 of a GET's filters) and its own forms of these.
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            if operation.get("security") != [{}]:
                responses.setdefault(
                    "401",
                    _error("`unauthorized`: no valid Bearer token.", _WWW_AUTHENTICATE),
                )
            parameters = {p.get("name") for p in operation.get("parameters", [])}
            if "{" in path or "cursor" in parameters:
                # A list answers 404 for a cursor it did not issue.
                responses.setdefault(
                    "404", _error("`not_found` (or another client's).")
                )
            if method == "post":
                responses.setdefault(
                    "400",
                    _error(
                        "`invalid_json`, `idempotency_key_required` or "
                        "`invalid_idempotency_key`."
                    ),
                )
                responses.setdefault("409", _error("`idempotency_key_reused`."))
                responses.setdefault(
                    "413", _error("`payload_too_large`: the body is over the limit.")
                )
                responses.setdefault(
                    "422", _error("`invalid_payload`, with `details`.")
                )
            responses.setdefault(
                "503",
                _error(
                    "`temporarily_unavailable`: retry after `Retry-After` seconds.",
                    _RETRY_AFTER,
                ),
            )
    result["paths"]["/webhooks/{slug}/"] = {"post": _webhook_operation()}
    return result
