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
_ERROR_REF = {"$ref": "#/components/schemas/Error"}


def error_response(description: str) -> dict:
    return {
        "description": description,
        "content": {"application/json": {"schema": _ERROR_REF}},
    }


def error_responses_postprocess(result, generator, request, public):
    """Documents what every operation can answer besides its success (the stable error
    bodies). Paths served outside DRF add themselves in hooks of their own
    (``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``), after this one."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = (
        ERROR_SCHEMA
    )
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            if operation.get("security") != [{}]:
                responses.setdefault(
                    "401", error_response("`unauthorized`: no valid Bearer token.")
                )
            parameters = {p.get("name") for p in operation.get("parameters", [])}
            if "{" in path or method == "post" or "cursor" in parameters:
                # A list answers 404 for a cursor it did not issue.
                responses.setdefault(
                    "404", error_response("`not_found` (or another client's).")
                )
            if method == "post":
                responses.setdefault(
                    "400",
                    error_response(
                        "`invalid_json`, `idempotency_key_required` or "
                        "`invalid_idempotency_key`."
                    ),
                )
                responses.setdefault("409", error_response("`idempotency_key_reused`."))
            if method == "post" or operation.get("parameters"):
                responses.setdefault(
                    "422", error_response("`invalid_payload`, with `details`.")
                )
            responses.setdefault("503", error_response("`temporarily_unavailable`."))
    return result
