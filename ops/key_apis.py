"""Idempotency keys through the operator API (docs/http-api.md, "Operator API"): any
client's key looked up by its client's name, and a live key evicted (``idempotency.evictions``)
so that its next request starts a new operation."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.response import Response

from core.errors import NotFound
from core.fields import StrictCharField
from core.models import ApiClient
from core.schema import ERROR_REF
from idempotency.evictions import idempotency_record_evict
from idempotency.keys import KEY_MAX_LENGTH
from idempotency.models import IdempotencyRecord
from idempotency.selectors import idempotency_record_get
from idempotency.services import OperationResult

from .base import FORBIDDEN, OpsActionApi, OpsReadApi, ops_action_schema
from .target_apis import CLIENT_NAME_MAX_LENGTH, REASON_MAX_LENGTH

OPERATION_TYPE_MAX_LENGTH = 64


# No docstrings on these serializers: they would become descriptions in the schema.
class _KeySerializer(serializers.Serializer):
    client = StrictCharField(
        max_length=CLIENT_NAME_MAX_LENGTH, help_text="The API client's name."
    )
    operation_type = StrictCharField(
        max_length=OPERATION_TYPE_MAX_LENGTH,
        help_text="`deployment.create`, `build.create`, `status.sync`, ...",
    )
    key = StrictCharField(max_length=KEY_MAX_LENGTH, help_text="The Idempotency-Key.")


class IdempotencyKeyLookupQuerySerializer(_KeySerializer):
    pass


class IdempotencyKeyEvictInputSerializer(_KeySerializer):
    reason = StrictCharField(
        max_length=REASON_MAX_LENGTH, help_text="Recorded with the operator action."
    )


class IdempotencyKeyRecordOutputSerializer(serializers.Serializer):
    record_id = serializers.IntegerField(source="pk")
    client = serializers.CharField(source="client.name")
    operation_type = serializers.CharField()
    key = serializers.CharField()
    status = serializers.SerializerMethodField()
    fingerprint = serializers.CharField()
    resource_id = serializers.CharField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    expired_at = serializers.DateTimeField(allow_null=True)

    def get_status(self, record: IdempotencyRecord) -> str:
        """`processing`, `succeeded`, `failed`, or `expired` (past its TTL, or
        evicted)."""
        return "expired" if record.is_expired else record.status


def api_client_named(name: str) -> ApiClient:
    client = ApiClient.objects.filter(name=name).first()
    if client is None:
        raise NotFound()
    return client


@extend_schema_view(
    get=extend_schema(
        parameters=[IdempotencyKeyLookupQuerySerializer],
        responses={
            200: IdempotencyKeyRecordOutputSerializer,
            403: FORBIDDEN,
            404: OpenApiResponse(
                response=ERROR_REF,
                description="`not_found`: no such client, or the client never used "
                "the key for that operation.",
            ),
            422: OpenApiResponse(
                response=ERROR_REF,
                description="`invalid_payload`: a parameter missing or malformed "
                "(`details` names it).",
            ),
        },
    )
)
class IdempotencyKeyLookupApi(OpsReadApi):
    """What became of any client's key (operators and auditors): its live record, else
    its latest expired one."""

    def get(self, request):
        query = IdempotencyKeyLookupQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        wanted = query.validated_data
        record = idempotency_record_get(
            client=api_client_named(wanted["client"]),
            operation_type=wanted["operation_type"],
            key=wanted["key"],
        )
        if record is None:
            raise NotFound()
        return Response(IdempotencyKeyRecordOutputSerializer(record).data)


@extend_schema_view(
    post=extend_schema(
        **ops_action_schema(
            request=IdempotencyKeyEvictInputSerializer,
            output=IdempotencyKeyRecordOutputSerializer,
            not_found="`not_found`: no such client, or no live record of the key "
            "(never used, or expired already); nothing is recorded.",
        )
    )
)
class IdempotencyKeyEvictApi(OpsActionApi):
    """Evicts a client's live key (operators, under the Idempotency-Key contract of the
    operator's own key): its record is marked expired now and kept, and the key's next
    request starts a new operation. Answers the record as evicted."""

    operation_type = "ops.idempotency_key.evict"
    input_serializer_class = IdempotencyKeyEvictInputSerializer

    def perform(self, *, client, key: str, data: dict) -> OperationResult:
        record = idempotency_record_evict(
            client=api_client_named(data["client"]),
            operation_type=data["operation_type"],
            key=data["key"],
            actor=self.actor(client),
            reason=data["reason"],
        )
        return OperationResult(
            status_code=200,
            body=dict(IdempotencyKeyRecordOutputSerializer(record).data),
            resource_id=f"idempotency_record:{record.pk}",
        )
