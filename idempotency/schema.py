"""What the OpenAPI schema says of an idempotent POST (docs/http-api.md, "Idempotency-Key"):
the first answer, its replay (200, the same body, ``Idempotent-Replayed: true``, the same
``Location``) and the 409 of a reused key. A client generated from the schema meets all
three on an ordinary retry, so all three are documented with their bodies and headers; the
errors every API operation shares are added by ``core.schema.error_responses_postprocess``."""

from __future__ import annotations

from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema_serializer,
)
from rest_framework import serializers

from core.schema import ERROR_REF

from .apis import IDEMPOTENCY_KEY_HEADER


@extend_schema_serializer(component_name="IdempotencyKeyReused")
class IdempotencyKeyReusedSerializer(serializers.Serializer):
    """409: the key was first used for an operation with another fingerprint."""

    error = serializers.CharField(help_text="`idempotency_key_reused`.")
    differing_fields = serializers.ListField(
        child=serializers.CharField(),
        help_text="The fingerprint fields that differ from the key's first request, sorted.",
    )


def idempotent_post_schema(
    *,
    request: type[serializers.Serializer] | serializers.Serializer,
    output: type[serializers.Serializer],
    created: int,
    location: bool,
    not_found: str = "",
) -> dict:
    """The ``extend_schema`` arguments of an idempotent POST whose first answer is
    ``created`` (202 or 201) with ``output``; ``location`` when both answers carry the new
    resource's ``Location``; ``not_found`` describes a 404 the operation can answer."""
    headers = [
        OpenApiParameter(
            "Idempotent-Replayed",
            str,
            OpenApiParameter.HEADER,
            required=True,
            enum=["true"],
            response=[200],
            description="The answer is the replay of the key's first response.",
        )
    ]
    if location:
        headers.append(
            OpenApiParameter(
                "Location",
                str,
                OpenApiParameter.HEADER,
                required=True,
                response=[200, created],
                description="The path of the resource the key's operation created.",
            )
        )
    responses = {
        created: OpenApiResponse(
            response=output, description="The first request with this key."
        ),
        200: OpenApiResponse(
            response=output,
            description=(
                "A retry with the same key and fingerprint within the key's TTL: the first "
                "response's body byte for byte (its `status` is the one at creation); "
                "nothing is written."
            ),
        ),
        409: OpenApiResponse(
            response=IdempotencyKeyReusedSerializer,
            description="`idempotency_key_reused`: the key was first used for another "
            "operation (`differing_fields` names how it differs).",
        ),
    }
    if not_found:
        responses[404] = OpenApiResponse(response=ERROR_REF, description=not_found)
    return {
        "request": request,
        "responses": responses,
        "parameters": [IDEMPOTENCY_KEY_HEADER, *headers],
    }
