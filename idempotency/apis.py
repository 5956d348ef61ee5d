"""The Idempotency-Key contract for DRF views (docs/http-api.md, "Idempotency-Key"), and the
key lookup endpoint."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.response import Response
from rest_framework.views import APIView

from core.authentication import BearerTokenAuthentication
from core.errors import NotFound
from core.parsers import json_object_body

from .keys import idempotency_key_is_well_formed, idempotency_key_validate
from .selectors import idempotency_record_get
from .services import (
    UNREAD,
    IdempotentResponse,
    OperationResult,
    idempotency_live_record,
    idempotency_replay_identical,
    idempotent_execute,
)

IDEMPOTENCY_KEY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=True,
    description="1-255 printable ASCII characters, stable across retries of one operation.",
)


# The type checker sees the mixin as the view it is combined with.
if TYPE_CHECKING:
    _View = APIView
else:
    _View = object


class IdempotentPostMixin(_View):
    """Opts a DRF ``APIView`` POST into the Idempotency-Key contract.

    A view declares ``operation_type``, ``fingerprint_fields`` and ``input_serializer_class``
    and implements ``perform(*, client, key, data) -> OperationResult``. The mixin validates
    the key, then the body (400 ``invalid_json`` for anything but a JSON object, an empty
    body included; 422 ``invalid_payload``; nothing recorded for either), then runs
    ``perform`` through ``idempotent_execute`` and answers the first response or its
    byte-identical replay (200, same ``Location``, ``Idempotent-Replayed: true``)."""

    operation_type: str = ""
    fingerprint_fields: tuple[str, ...] = ()
    input_serializer_class: type[serializers.Serializer]
    # ``perform`` writes nothing: it builds its result and its one new row, unsaved
    # (``OperationResult.resource_row``), which is written with the key's record.
    perform_returns_unsaved_row: bool = False

    def fingerprint_values(self, data: dict) -> dict:
        return {name: data.get(name) for name in self.fingerprint_fields}

    def perform(self, *, client, key: str, data: dict) -> OperationResult:
        raise NotImplementedError

    def dispatch(self, request, *args, **kwargs):
        """A retry whose body is byte for byte the first request's is answered from the
        key's record before the rest of the request is handled: an authenticated client, a
        well-formed key, a live record with that body's hash. Anything else (a new key, a
        changed body, an expired record, a missing token) goes the whole way, which answers
        it exactly as before."""
        if request.method == "POST":
            try:
                replay = self._identical_retry(request)
            except (OperationalError, InterfaceError):
                # The database is unreachable: the whole way meets it again, inside DRF's
                # error handling, which answers 503 ``temporarily_unavailable``.
                replay = None
            if replay is not None:
                for name, value in self.default_response_headers.items():
                    replay[name] = value  # as the whole way would answer
                return replay
        return super().dispatch(request, *args, **kwargs)

    def _identical_retry(self, request) -> HttpResponse | None:
        key = request.headers.get("Idempotency-Key") or ""
        # Only what the whole way would parse: another media type is its 400 to give.
        if request.content_type != "application/json":
            return None
        if not idempotency_key_is_well_formed(key):
            return None
        try:
            found = BearerTokenAuthentication().authenticate(request)
        except AuthenticationFailed:
            return None
        if found is None:
            return None
        client = found[0]
        record = idempotency_live_record(
            client=client, operation_type=self.operation_type, key=key
        )
        # Kept for the whole way, which then reads no record again.
        request._idempotency_record = (client.pk, key, record)
        try:
            body_hash = hashlib.sha256(request.body).hexdigest()
        except RequestDataTooBig:  # the whole way answers 413
            return None
        if record is None or not record.unexpired or record.request_hash != body_hash:
            return None
        return _response(
            idempotency_replay_identical(
                record=record, operation_type=self.operation_type, key=key
            )
        )

    def post(self, request, *args, **kwargs):
        key = idempotency_key_validate(key=request.headers.get("Idempotency-Key"))
        serializer = self.input_serializer_class(data=json_object_body(request))
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        client = request.user
        read = getattr(request._request, "_idempotency_record", None)
        result = idempotent_execute(
            client=client,
            operation_type=self.operation_type,
            key=key,
            fingerprint_fields=self.fingerprint_values(data),
            perform=lambda: self.perform(client=client, key=key, data=data),
            request_hash=hashlib.sha256(request.body).hexdigest(),
            record=read[2]
            if read is not None and read[:2] == (client.pk, key)
            else UNREAD,
            perform_returns_unsaved_row=self.perform_returns_unsaved_row,
        )
        return _response(result)


def _response(result: IdempotentResponse) -> HttpResponse:
    response = HttpResponse(
        result.body, status=result.status_code, content_type="application/json"
    )
    if result.location:
        response["Location"] = result.location
    if result.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


class IdempotencyKeyDetailApi(APIView):
    """What became of one of the client's keys (for a client whose response was lost)."""

    class IdempotencyKeyOutputSerializer(serializers.Serializer):
        operation_type = serializers.CharField()
        idempotency_key = serializers.CharField(source="key")
        status = serializers.SerializerMethodField()
        fingerprint = serializers.CharField()
        resource_id = serializers.CharField()
        created_at = serializers.DateTimeField()
        expires_at = serializers.DateTimeField()

        def get_status(self, record) -> str:
            return "expired" if record.is_expired else record.status

    @extend_schema(responses=IdempotencyKeyOutputSerializer)
    def get(self, request, operation_type: str, key: str):
        record = idempotency_record_get(
            client=request.user, operation_type=operation_type, key=key
        )
        if record is None:
            raise NotFound()
        return Response(self.IdempotencyKeyOutputSerializer(record).data)
