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


def error_response(description: str, headers: dict | None = None) -> dict:
    response = {
        "description": description,
        "content": {"application/json": {"schema": ERROR_REF}},
    }
    if headers:
        response["headers"] = headers
    return response


# Headers of the shared error answers (docs/http-api.md, "Errors").
RETRY_AFTER_HEADER = {
    "Retry-After": {
        "required": True,
        "schema": {"type": "integer"},
        "description": "Seconds to wait before retrying.",
    }
}
WWW_AUTHENTICATE_HEADER = {
    "WWW-Authenticate": {
        "required": True,
        "schema": {"type": "string", "enum": ["Bearer"]},
    }
}


def error_responses_postprocess(result, generator, request, public):
    """Documents what every operation can answer besides its success (the stable error
    bodies, with their headers). Paths served outside DRF add themselves in hooks of their
    own (``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``), after this one."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = (
        ERROR_SCHEMA
    )
    # What an operation answers besides what its view declares: 401 where a token is
    # needed, 403 to a role the operation is not for, 404 for an id in the path or a cursor
    # not issued, the refusals of a POST's
    # key and body, and 503 everywhere. A view declares any other answer itself (a 404 of a
    # POST, a 422 of a GET's filters) and its own forms of these.
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            if operation.get("security") != [{}]:
                responses.setdefault(
                    "401",
                    error_response(
                        "`unauthorized`: no valid Bearer token.",
                        WWW_AUTHENTICATE_HEADER,
                    ),
                )
                responses.setdefault(
                    "403",
                    error_response(
                        "`forbidden`: the API client's role may not use this operation "
                        '(docs/http-api.md, "Roles").'
                    ),
                )
            parameters = {p.get("name") for p in operation.get("parameters", [])}
            if "{" in path or "cursor" in parameters:
                # A list answers 404 for a cursor it did not issue.
                responses.setdefault(
                    "404", error_response("`not_found` (or another client's).")
                )
            if "page_size" in parameters:
                responses.setdefault(
                    "422",
                    error_response(
                        "`invalid_payload`: `page_size` is not a whole number of at "
                        "least 1 (`details` names it)."
                    ),
                )
            if method in ("post", "patch") and "requestBody" in operation:
                # Every body is required: an empty one is 400 ``invalid_json``.
                operation["requestBody"]["required"] = True
            if method == "post":
                responses.setdefault(
                    "400",
                    error_response(
                        "`invalid_json`, `idempotency_key_required` or "
                        "`invalid_idempotency_key`."
                    ),
                )
                responses.setdefault("409", error_response("`idempotency_key_reused`."))
                responses.setdefault(
                    "413",
                    error_response("`payload_too_large`: the body is over the limit."),
                )
                responses.setdefault(
                    "422", error_response("`invalid_payload`, with `details`.")
                )
            responses.setdefault(
                "503",
                error_response(
                    "`temporarily_unavailable`: retry after `Retry-After` seconds.",
                    RETRY_AFTER_HEADER,
                ),
            )
    return result
