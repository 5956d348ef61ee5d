"""Deploy targets through the operator API (docs/http-api.md, "Operator API"): the fields
and rules of the admin's form (``deployments.target_admin``), saved by the one service
(``deployments.targets.deploy_target_save``), each change an operator action with the API
client as actor. The secret and the URL's query are write-only: no answer holds them, only
their fingerprints; the key's record keeps the same fingerprints in place of the values."""

from __future__ import annotations

from collections.abc import Iterable

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import URLValidator
from django.db import IntegrityError, transaction
from django.urls import reverse
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import serializers
from rest_framework.response import Response

from core.actors import Actor
from core.errors import InvalidPayload, NotFound
from core.fields import StrictCharField, StrictChoiceField
from core.models import ApiClient
from core.pagination import CursorPage
from core.parsers import json_object_body
from core.permissions import OPERATORS
from core.schema import ERROR_REF
from deployments.executors import executor_names
from deployments.models import BreakerState, DeployTarget, secret_fingerprint
from deployments.target_admin import url_kept
from deployments.targets import deploy_target_save
from deployments.trigger_urls import url_query_fingerprint, url_shown
from idempotency.schema import idempotent_post_schema
from idempotency.services import OperationResult

from .base import FORBIDDEN, OpsActionApi, OpsReadApi, ops_action_schema

NAME_PATTERN = "[-a-zA-Z0-9_]+"  # a slug, as the model's SlugField
URL_MAX_LENGTH = 500
SECRET_MAX_LENGTH = 255
CLIENT_NAME_MAX_LENGTH = 100
CLIENTS_MAX = 100
REASON_MAX_LENGTH = 2000
PRIORITY_MAX = 32767  # PositiveSmallIntegerField
MAX_IN_FLIGHT_MAX = 2147483647  # PositiveIntegerField
# A primary key PostgreSQL's bigint holds; a larger id in the path names no target.
TARGET_ID_MAX = 2**63 - 1

# The target's own columns an operator sets (the secret and the clients apart).
COLUMN_FIELDS = (
    "name",
    "repository_pattern",
    "environment_pattern",
    "applies_to",
    "priority",
    "executor",
    "url",
    "is_enabled",
    "max_in_flight",
)

NOT_FOUND = OpenApiResponse(response=ERROR_REF, description="`not_found`.")


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer (DRF's also reads ``"5"``, ``5.0`` and ``true``)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A JSON boolean (DRF's also reads ``"yes"``, ``1`` and ``"on"``)."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class TriggerUrlField(StrictCharField):
    """An http(s) URL as the admin's form takes it (the deploy target service then refuses
    user information and denied destinations). Empty: the executor's own setting."""

    # Checked here, not as one of the field's validators, which the schema would state as
    # ``format: uri``: the empty string, which the field takes, is no URI.
    url_check = URLValidator(
        schemes=["http", "https"], message="Enter a valid http(s) URL."
    )

    def __init__(self, **kwargs) -> None:
        super().__init__(max_length=URL_MAX_LENGTH, allow_blank=True, **kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if value:
            try:
                self.url_check(value)
            except DjangoValidationError as exc:
                raise serializers.ValidationError(list(exc.messages)) from None
        return value


# No docstrings on these serializers: they would become the request's description in the
# OpenAPI schema.
class _DeployTargetFieldsSerializer(serializers.Serializer):
    name = StrictCharField(
        max_length=64,
        pattern=NAME_PATTERN,
        pattern_message="Expected a slug: letters, digits, - and _.",
    )
    repository_pattern = StrictCharField(
        max_length=200,
        required=False,
        default="*",
        help_text="A glob over owner/name, compared lower-cased: `acme/*`.",
    )
    environment_pattern = StrictCharField(
        max_length=64,
        required=False,
        default="*",
        help_text="A glob over the environment: `prod*`. Builds route only with `*`.",
    )
    applies_to = StrictChoiceField(
        choices=DeployTarget.AppliesTo.choices,
        required=False,
        default=DeployTarget.AppliesTo.ALL,
        help_text="`deployments`, `builds`, or `` (both).",
    )
    priority = StrictIntegerField(
        min_value=0,
        max_value=PRIORITY_MAX,
        required=False,
        default=100,
        help_text="Of several matching targets, the lowest number wins.",
    )
    executor = StrictChoiceField(choices=executor_names())
    url = TriggerUrlField(
        required=False,
        default="",
        help_text="http: the receiver; github: the API's URL. Write-only query (a "
        "Jenkins `?token=`): answers show the URL without it and its fingerprint. No "
        "user information.",
    )
    secret = StrictCharField(
        max_length=SECRET_MAX_LENGTH,
        required=False,
        allow_blank=True,
        default="",
        write_only=True,
        help_text="Write-only: never answered (answers say `has_secret` and its "
        "fingerprint). Empty: the executor's own setting (new target) or the one it "
        "has (a change).",
    )
    clients = serializers.ListField(
        child=StrictCharField(max_length=CLIENT_NAME_MAX_LENGTH),
        max_length=CLIENTS_MAX,
        required=False,
        default=list,
        help_text="The names of the API clients whose jobs it serves; empty: every "
        "client's.",
    )
    is_enabled = StrictBooleanField(required=False, default=True)
    max_in_flight = StrictIntegerField(
        min_value=0,
        max_value=MAX_IN_FLIGHT_MAX,
        allow_null=True,
        required=False,
        default=None,
        help_text="At most this many of its jobs triggered and not finished; null: "
        "no limit.",
    )
    reason = StrictCharField(
        max_length=REASON_MAX_LENGTH,
        required=False,
        allow_blank=True,
        default="",
        help_text="Recorded with the operator action.",
    )


class DeployTargetCreateInputSerializer(_DeployTargetFieldsSerializer):
    pass


class DeployTargetChangeInputSerializer(_DeployTargetFieldsSerializer):
    url_query_clear = StrictBooleanField(
        required=False,
        help_text="Remove the URL's query (the URL as answered, without it).",
    )

    def get_fields(self):
        # A change names what it sets: a member left out keeps its value, so none has a
        # default (which the schema would state).
        fields = super().get_fields()
        for field in fields.values():
            field.default = serializers.empty
            field.required = False
        return fields


class DeployTargetDisableInputSerializer(serializers.Serializer):
    reason = StrictCharField(
        max_length=REASON_MAX_LENGTH, help_text="Recorded with the operator action."
    )


class BreakerOutputSerializer(serializers.Serializer):
    state = serializers.ChoiceField(
        source="breaker_state", choices=BreakerState.choices
    )
    failures = serializers.IntegerField(source="breaker_failures")
    failed_at = serializers.DateTimeField(source="breaker_failed_at", allow_null=True)
    changed_at = serializers.DateTimeField(source="breaker_changed_at", allow_null=True)
    probe_job_id = serializers.SerializerMethodField()

    def get_probe_job_id(self, target: DeployTarget) -> str | None:
        probe = target.breaker_probe
        return probe.public_id if probe is not None else None


class DeployTargetOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    repository_pattern = serializers.CharField()
    environment_pattern = serializers.CharField()
    applies_to = serializers.ChoiceField(choices=DeployTarget.AppliesTo.choices)
    priority = serializers.IntegerField()
    executor = serializers.CharField()
    url = serializers.SerializerMethodField()
    url_query = serializers.SerializerMethodField()
    has_secret = serializers.SerializerMethodField()
    secret_fingerprint = serializers.CharField()
    clients = serializers.SerializerMethodField()
    is_enabled = serializers.BooleanField()
    max_in_flight = serializers.IntegerField(allow_null=True)
    breaker = BreakerOutputSerializer(source="*", read_only=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_url(self, target: DeployTarget) -> str:
        """Without its query (write-only) or user information; empty: none."""
        return url_shown(target.url) if target.url else ""

    def get_url_query(self, target: DeployTarget) -> str:
        """The fingerprint of the URL's query (`sha256:` and 12 hex digits), or empty."""
        return url_query_fingerprint(target.url)

    def get_has_secret(self, target: DeployTarget) -> bool:
        return bool(target.secret)

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_clients(self, target: DeployTarget) -> list[str]:
        return sorted(client.name for client in target.clients.all())


def api_clients_named(names: Iterable[str]) -> list[ApiClient]:
    """The API clients of ``names``; ``InvalidPayload`` naming those no client has."""
    wanted = set(names)
    found = list(ApiClient.objects.filter(name__in=wanted).order_by("pk"))
    unknown = sorted(wanted - {client.name for client in found})
    if unknown:
        raise InvalidPayload(
            details={"clients": [f"No API client named {name!r}." for name in unknown]}
        )
    return found


def deploy_target_saved(**arguments) -> bool:
    """``deploy_target_save``, with a name another target has as the field error the
    admin's form gives (the unique constraint decides it, never a read first)."""
    try:
        return deploy_target_save(**arguments)
    except IntegrityError:
        raise InvalidPayload(
            details={"name": ["A deploy target with this name already exists."]}
        ) from None


def deploy_targets_read():
    return DeployTarget.objects.select_related("breaker_probe").prefetch_related(
        "clients"
    )


def deploy_target_locked(target_id: int) -> DeployTarget:
    """The target under its row lock (in the caller's transaction), or ``NotFound``."""
    target = (
        DeployTarget.objects.select_for_update().filter(pk=target_id).first()
        if target_id <= TARGET_ID_MAX
        else None
    )
    if target is None:
        raise NotFound()
    return target


def deploy_target_answer(target_id: int) -> dict:
    target = deploy_targets_read().get(pk=target_id)
    return dict(DeployTargetOutputSerializer(target).data)


def _create_schema() -> dict:
    schema = idempotent_post_schema(
        request=DeployTargetCreateInputSerializer,
        output=DeployTargetOutputSerializer,
        created=201,
        location=True,
    )
    schema["responses"][403] = FORBIDDEN
    return schema


@extend_schema_view(
    get=extend_schema(
        responses={200: DeployTargetOutputSerializer(many=True), 403: FORBIDDEN}
    ),
    post=extend_schema(**_create_schema()),
)
class DeployTargetCollectionApi(OpsActionApi):
    """GET lists the deploy targets (operators and auditors), newest first, a cursor
    page; POST creates one (operators, under the Idempotency-Key contract): 201 with its
    ``Location``."""

    operation_type = "ops.deploy_target.create"
    input_serializer_class = DeployTargetCreateInputSerializer
    pagination_class = CursorPage

    def fingerprint_values(self, data: dict) -> dict:
        values = super().fingerprint_values(data)
        # The record keeps what defines the request, never a secret: the secret and the
        # URL's query as their fingerprints (a change of either still differs).
        values["secret"] = secret_fingerprint(values.get("secret") or "")
        url = values.get("url") or ""
        values["url"] = url_shown(url) if url else ""
        values["url_query"] = url_query_fingerprint(url)
        return values

    def get(self, request):
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(deploy_targets_read(), request, view=self)
        data = DeployTargetOutputSerializer(page, many=True).data
        return paginator.get_paginated_response(data)

    def perform(self, *, client, key: str, data: dict) -> OperationResult:
        target = DeployTarget(**{name: data[name] for name in COLUMN_FIELDS})
        deploy_target_saved(
            target=target,
            secret=data["secret"] or None,
            actor=self.actor(client),
            reason=data["reason"] or "created through the operator API",
            clients=api_clients_named(data["clients"]),
        )
        return OperationResult(
            status_code=201,
            body=deploy_target_answer(target.pk),
            resource_id=f"deploy_target:{target.pk}",
            location=reverse("ops-deploy-target", kwargs={"target_id": target.pk}),
        )


@extend_schema_view(
    get=extend_schema(responses={200: DeployTargetOutputSerializer, 403: FORBIDDEN}),
    patch=extend_schema(
        request=DeployTargetChangeInputSerializer,
        responses={
            200: OpenApiResponse(
                response=DeployTargetOutputSerializer,
                description="The target as it is now. A change that changes nothing "
                "(the same values again) records nothing.",
            ),
            400: OpenApiResponse(
                response=ERROR_REF,
                description="`invalid_json`: the body is not a JSON object.",
            ),
            403: FORBIDDEN,
            404: NOT_FOUND,
            413: OpenApiResponse(
                response=ERROR_REF,
                description="`payload_too_large`: the body is over the limit.",
            ),
            422: OpenApiResponse(
                response=ERROR_REF,
                description="`invalid_payload`, with `details` naming the fields.",
            ),
        },
    ),
)
class DeployTargetDetailApi(OpsReadApi):
    """GET reads one deploy target (its breaker read-only); PATCH (operators) sets any of
    its settings, the others kept. PATCH sets values, so it is not under the
    Idempotency-Key contract: sent again, it finds nothing to change and records
    nothing."""

    write_roles = OPERATORS

    def get(self, request, target_id: int):
        target = (
            deploy_targets_read().filter(pk=target_id).first()
            if target_id <= TARGET_ID_MAX
            else None
        )
        if target is None:
            raise NotFound()
        return Response(DeployTargetOutputSerializer(target).data)

    def patch(self, request, target_id: int):
        serializer = DeployTargetChangeInputSerializer(
            data=json_object_body(request), partial=True
        )
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        with transaction.atomic():
            target = deploy_target_locked(target_id)
            stored_url = target.url
            for name in COLUMN_FIELDS:
                if name in data:
                    setattr(target, name, data[name])
            clear_query = bool(data.get("url_query_clear"))
            if "url" in data:
                # As the admin's form: the URL as answered (without its query) keeps the
                # stored query; another address never does.
                target.url = url_kept(
                    typed=data["url"], stored=stored_url, clear_query=clear_query
                )
            elif clear_query and stored_url:
                target.url = url_shown(stored_url)
            deploy_target_saved(
                target=target,
                secret=data.get("secret") or None,
                actor=Actor.api_client(request.user),
                reason=data.get("reason") or "changed through the operator API",
                clients=(
                    api_clients_named(data["clients"]) if "clients" in data else None
                ),
            )
        return Response(deploy_target_answer(target.pk))


@extend_schema_view(
    post=extend_schema(
        **ops_action_schema(
            request=DeployTargetDisableInputSerializer,
            output=DeployTargetOutputSerializer,
            not_found="`not_found`: no such target; nothing is recorded.",
        )
    )
)
class DeployTargetDisableApi(OpsActionApi):
    """POST disables a deploy target (operators, under the Idempotency-Key contract): its
    jobs go to the next matching target, else ``DEPLOY_EXECUTOR``. Recorded as a change of
    the target (``change_deploy_target``); a target already disabled records nothing."""

    operation_type = "ops.deploy_target.disable"
    input_serializer_class = DeployTargetDisableInputSerializer
    path_fields = ("target_id",)

    def perform(self, *, client, key: str, data: dict) -> OperationResult:
        target = deploy_target_locked(self.kwargs["target_id"])
        target.is_enabled = False
        deploy_target_saved(
            target=target, secret=None, actor=self.actor(client), reason=data["reason"]
        )
        return OperationResult(
            status_code=200,
            body=deploy_target_answer(target.pk),
            resource_id=f"deploy_target:{target.pk}",
        )
