"""The Idempotency-Key contract for DRF views (docs/http-api.md, "Idempotency-Key"), and the
key lookup endpoint."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import (
    MaxLengthValidator,
    MinLengthValidator,
    ProhibitNullCharactersValidator,
    RegexValidator,
)
from django.db import DatabaseError
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.response import Response
from rest_framework.utils import json as drf_json
from rest_framework.validators import ProhibitSurrogateCharactersValidator
from rest_framework.views import APIView

from core.authentication import BearerTokenAuthentication
from core.errors import NotFound, ServiceError
from core.fields import LowercaseCharField, StrictCharField
from core.parsers import json_object_body
from core.permissions import CI, client_may

from .keys import (
    KEY_HEADER_PATTERN,
    KEY_MAX_LENGTH,
    idempotency_key_is_well_formed,
    idempotency_key_validate,
)
from .selectors import idempotency_record_get
from .services import (
    IdempotentResponse,
    OperationResult,
    idempotency_identical_replay,
    idempotent_execute,
)

_UTF8 = ("utf-8", "utf8")
_SURROGATE = re.compile("[\ud800-\udfff]")


def input_validate_compile(
    serializer_class: type[serializers.Serializer],
) -> Callable[[dict], dict | None]:
    """``serializer_class``'s validated data for a body it accepts, ``None`` for one it
    refuses: an ``input_validate_fast`` read from the serializer's own fields, once, so
    that its rules stay written in one place and the fast lane does not build its fields
    for every request (a deep copy of each, the largest share of a new operation's cost).
    Every field must be a ``StrictCharField`` (a string as sent, ``core.fields``), and the
    serializer may add no rule of its own (``validate``, ``validate_<name>``)."""
    serializer = serializer_class()
    if (
        type(serializer).validate is not serializers.Serializer.validate
        or serializer.validators
    ):
        raise TypeError(f"{serializer_class.__name__} has rules beyond its fields")
    members: list[tuple[str, bool, Any, bool, tuple[Callable[[str], bool], ...], bool]]
    members = []
    for name, field in serializer.fields.items():
        if (
            not isinstance(field, StrictCharField)
            or field.read_only
            or field.source != name
            or hasattr(serializer, f"validate_{name}")
        ):
            raise TypeError(f"{serializer_class.__name__}.{name} is not a plain text")
        members.append(
            (
                name,
                field.required,
                field.default,
                field.blank_allowed,
                tuple(_check_of(validator) for validator in field.validators),
                isinstance(field, LowercaseCharField),
            )
        )

    def validate(body: dict) -> dict | None:
        data = {}
        for name, required, default, blank, checks, lower in members:
            if name not in body:
                if required:
                    return None
                if default is not serializers.empty:
                    data[name] = default() if callable(default) else default
                continue
            value = body[name]
            if not isinstance(value, str) or (value == "" and not blank):
                return None
            if value and not all(check(value) for check in checks):
                return None
            data[name] = value.lower() if lower else value
        return data

    return validate


def _check_of(validator: Any) -> Callable[[str], bool]:
    """One validator of a text field as a test of a string: the same rule, without building
    the error that the serializer would then answer."""
    if isinstance(validator, MaxLengthValidator | MinLengthValidator) and not callable(
        validator.limit_value
    ):
        limit = validator.limit_value
        if isinstance(validator, MaxLengthValidator):
            return lambda value: len(value) <= limit
        return lambda value: len(value) >= limit
    if isinstance(validator, RegexValidator):
        search = cast(re.Pattern[str], validator.regex).search
        inverse = validator.inverse_match
        return lambda value: (search(value) is None) == inverse
    if isinstance(validator, ProhibitNullCharactersValidator):
        return lambda value: "\x00" not in value
    if isinstance(validator, ProhibitSurrogateCharactersValidator):
        return lambda value: _SURROGATE.search(value) is None

    def called(value: str) -> bool:
        try:
            validator(value)
        except (DjangoValidationError, serializers.ValidationError):
            return False
        return True

    return called


_ANY_JSON = ("", "*/*", "application/json")

IDEMPOTENCY_KEY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    {
        "type": "string",
        "minLength": 1,
        "maxLength": KEY_MAX_LENGTH,
        "pattern": KEY_HEADER_PATTERN,
    },
    OpenApiParameter.HEADER,
    required=True,
    description="1-255 printable ASCII characters, stable across retries of one "
    "operation (absent or empty: 400 `idempotency_key_required`; otherwise malformed: 400 "
    "`invalid_idempotency_key`).",
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
    replay (200, same ``Location``, ``Idempotent-Replayed: true``).

    A view may also give ``input_validate`` (``input_validate_fast``): the body's validated
    data, exactly as its serializer would give it, or ``None`` for a body the serializer
    refuses (or might). A request such a view accepts that way is answered before DRF's
    handling (``_fast_lane``); every other one goes the whole way, where the serializer
    says why it is refused."""

    operation_type: str = ""
    fingerprint_fields: tuple[str, ...] = ()
    input_serializer_class: type[serializers.Serializer]
    # ``perform`` writes nothing: it builds its result and its one new row, unsaved
    # (``OperationResult.resource_row``), which is written with the key's record.
    perform_returns_unsaved_row: bool = False
    # The serializer's accepted bodies and validated data, without building its fields
    # (a ``staticmethod``; ``input_validate_compile`` reads one from the serializer).
    input_validate_fast: Callable[[dict], dict | None] | None = None

    def fingerprint_values(self, data: dict) -> dict:
        return {name: data.get(name) for name in self.fingerprint_fields}

    def perform(self, *, client, key: str, data: dict) -> OperationResult:
        raise NotImplementedError

    def dispatch(self, request, *args, **kwargs):
        if request.method == "POST" and self.input_validate_fast is not None:
            try:
                response = self._fast_lane(request)
            except (DatabaseError, RequestDataTooBig):
                # The whole way meets it again, inside DRF's error handling, which answers
                # it (503 ``temporarily_unavailable`` for a database that is unreachable).
                response = None
            if response is not None:
                for name, value in self.default_response_headers.items():
                    response[name] = value  # as the whole way would answer
                return response
        return super().dispatch(request, *args, **kwargs)

    def _fast_lane(self, request) -> HttpResponse | None:
        """The whole way's answer to a request with a valid token, a well-formed key and a
        body its checks accept, without DRF's request handling or serializer; ``None`` for
        anything else, which the whole way answers. An error of the key's contract (a reused
        key) is left for the whole way to raise once its own checks have passed."""
        key = request.headers.get("Idempotency-Key") or ""
        # Only what the whole way would parse as it does: another media type or charset is
        # its answer to give.
        if request.content_type != "application/json":
            return None
        if request.content_params.get("charset", "utf-8").lower() not in _UTF8:
            return None
        # DRF's content negotiation refuses (406) what its JSON renderer cannot answer:
        # only the Accept headers any renderer takes are answered here.
        if request.headers.get("Accept", "") not in _ANY_JSON:
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
        if not client_may(client, self, "POST"):
            return None  # the whole way refuses it (403 ``forbidden``)
        raw = request.body
        request_hash = hashlib.sha256(raw).hexdigest()
        # A retry of the very same bytes: its replay, before the body is parsed.
        replay = idempotency_identical_replay(
            client=client,
            operation_type=self.operation_type,
            key=key,
            request_hash=request_hash,
        )
        if replay is not None:
            return _response(replay)
        try:
            # DRF's JSON, strict as its parser is (no NaN or Infinity).
            body = drf_json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):
            return None
        if not isinstance(body, dict):
            return None
        validate = self.input_validate_fast
        data = validate(body) if validate is not None else None
        if data is None:
            return None
        try:
            return _response(
                self._execute(
                    client=client, key=key, data=data, request_hash=request_hash
                )
            )
        except ServiceError as exc:
            request._idempotency_error = (client.pk, key, exc)
            return None

    def _execute(
        self, *, client, key: str, data: dict, request_hash: str
    ) -> IdempotentResponse:
        return idempotent_execute(
            client=client,
            operation_type=self.operation_type,
            key=key,
            fingerprint_fields=self.fingerprint_values(data),
            perform=lambda: self.perform(client=client, key=key, data=data),
            request_hash=request_hash,
            perform_returns_unsaved_row=self.perform_returns_unsaved_row,
        )

    def post(self, request, *args, **kwargs):
        key = idempotency_key_validate(key=request.headers.get("Idempotency-Key"))
        serializer = self.input_serializer_class(data=json_object_body(request))
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        client = request.user
        met = getattr(request._request, "_idempotency_error", None)
        if met is not None and met[:2] == (client.pk, key):
            # What the fast lane met for this very request (a reused key): raised here,
            # after the whole way's checks, so that it is answered as the whole way answers.
            raise met[2]
        return _response(
            self._execute(
                client=client,
                key=key,
                data=data,
                request_hash=hashlib.sha256(request.body).hexdigest(),
            )
        )


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

    read_roles = CI

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
