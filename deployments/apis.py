from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import (
    OpenApiParameter,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_serializer,
    extend_schema_view,
)
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import NotFound
from core.fields import (
    InstantField,
    LowercaseCharField,
    StrictCharField,
    StrictChoiceField,
)
from core.pagination import CursorPage
from core.permissions import CI
from idempotency.apis import IdempotentPostMixin, input_validate_compile
from idempotency.models import IdempotencyStatus
from idempotency.schema import idempotent_post_schema
from idempotency.services import OperationResult

from . import selectors
from .models import (
    REPORTED_DETAIL_MAX_LENGTH,
    Build,
    Deployment,
    Job,
    JobKind,
    JobStatus,
)
from .naming import REPOSITORY_MAX_LENGTH, REPOSITORY_PATTERN
from .representations import (
    BUILD_OUTPUT,
    DEPLOYMENT_OUTPUT,
    BuildOutputSerializer,
    DeploymentOutputSerializer,
)
from .services.jobs import OPERATION_TYPES, job_new, job_pickup_deadline
from .services.reports import status_sync_record

# Either case: stored lower-cased.
COMMIT_SHA_PATTERN = "[0-9A-Fa-f]{7,40}"
ENVIRONMENT_PATTERN = "[-a-zA-Z0-9_]+"  # a slug
ENVIRONMENT_MAX_LENGTH = 64
TEXT_MAX_LENGTH = 200
REF_MAX_LENGTH = 255
IDEMPOTENCY_KEY_QUERY = OpenApiParameter(
    "idempotency_key", str, OpenApiParameter.QUERY, required=False
)


# What every job request carries; each kind adds its own fields. (No docstring: it would
# become each request's description in the OpenAPI schema.)
class _JobCreateInputSerializer(serializers.Serializer):
    repository = LowercaseCharField(
        max_length=REPOSITORY_MAX_LENGTH,
        pattern=REPOSITORY_PATTERN,
        pattern_message="Expected owner/name as GitHub allows them: each part 1 to 100 "
        "of A-Z a-z 0-9 . _ -, neither part . or ..",
        help_text="`owner/name` as GitHub allows them; stored lower-cased.",
    )
    commit_sha = LowercaseCharField(
        pattern=COMMIT_SHA_PATTERN,
        pattern_message="Expected 7 to 40 hexadecimal characters.",
        help_text="7 to 40 hexadecimal characters, either case; stored lower-cased.",
    )
    workflow = StrictCharField(
        max_length=TEXT_MAX_LENGTH, required=False, allow_blank=True, default=""
    )
    triggered_by = StrictCharField(
        max_length=TEXT_MAX_LENGTH, required=False, allow_blank=True, default=""
    )


class DeploymentCreateInputSerializer(_JobCreateInputSerializer):
    environment = StrictCharField(
        max_length=ENVIRONMENT_MAX_LENGTH,
        pattern=ENVIRONMENT_PATTERN,
        pattern_message="Expected a slug: letters, digits, - and _.",
    )


class BuildCreateInputSerializer(_JobCreateInputSerializer):
    ref = StrictCharField(
        max_length=REF_MAX_LENGTH, required=False, allow_blank=True, default=""
    )


# The serializers above, for the bodies they accept, without building their fields for every
# request: what ``is_valid()`` would put in ``validated_data``, or ``None`` where the
# serializer refuses, read from the serializers' own fields (the serializer then answers the
# refusal, its codes and messages the one definition; tests/deployments/test_input_fast.py
# holds the two to the same bodies).
deployment_input_validate = input_validate_compile(DeploymentCreateInputSerializer)
build_input_validate = input_validate_compile(BuildCreateInputSerializer)


class _JobCollectionApi(IdempotentPostMixin, APIView):
    """A kind of job's collection. POST creates one under the Idempotency-Key contract: the
    job is one new row, built here and written with the key's record
    (``perform_returns_unsaved_row``); a relay then publishes it. GET lists the client's jobs
    of the kind, a cursor page (``?idempotency_key=`` narrows it to the latest job made with
    that key). Each kind names its operation, fingerprint, model and serializers."""

    read_roles = write_roles = CI

    kind: JobKind
    model: type[Job]
    output_serializer_class: type[serializers.Serializer]
    output: serializers.Serializer  # one instance, for the first responses
    pagination_class = CursorPage
    perform_returns_unsaved_row = True

    def perform(self, *, client, key, data) -> OperationResult:
        job = job_new(kind=self.kind, client=client, idempotency_key=key, data=data)
        return OperationResult(
            status_code=202,
            body=self.output.to_representation(job),
            resource_row=job,
            resource_id=job.public_id,
            location=job.get_absolute_url(),
            record_status=IdempotencyStatus.PROCESSING,
            progress_deadline=job_pickup_deadline(job=job),
        )

    def get(self, request):
        jobs = selectors.job_list_by_key(
            model=self.model,
            client=request.user,
            idempotency_key=request.query_params.get("idempotency_key"),
        )
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(jobs, request, view=self)
        data = self.output_serializer_class(page, many=True).data
        return paginator.get_paginated_response(data)


class _JobDetailApi(APIView):
    # One of the client's jobs; another client's is as good as absent (404).

    read_roles = CI

    output_serializer_class: type[serializers.Serializer]
    model: type[Job]
    lookup_url_kwarg: (
        str  # the URL names the id as the API does: deployment_id, build_id
    )

    def get(self, request, **kwargs):
        public_id = kwargs[self.lookup_url_kwarg]
        job = selectors.job_get(
            model=self.model, client=request.user, public_id=public_id
        )
        if job is None:
            raise NotFound()
        return Response(self.output_serializer_class(job).data)


@extend_schema_view(
    post=extend_schema(
        **idempotent_post_schema(
            request=DeploymentCreateInputSerializer,
            output=DeploymentOutputSerializer,
            created=202,
            location=True,
        )
    ),
    get=extend_schema(
        responses=DeploymentOutputSerializer(many=True),
        parameters=[IDEMPOTENCY_KEY_QUERY],
    ),
)
class DeploymentCollectionApi(_JobCollectionApi):
    """POST creates (idempotent), GET lists the client's deployments (``?idempotency_key=``)."""

    kind = JobKind.DEPLOYMENT
    operation_type = OPERATION_TYPES[kind]
    fingerprint_fields = ("repository", "commit_sha", "environment", "workflow")
    input_serializer_class = DeploymentCreateInputSerializer
    input_validate_fast = staticmethod(deployment_input_validate)
    model = Deployment
    output_serializer_class = DeploymentOutputSerializer
    output = DEPLOYMENT_OUTPUT


@extend_schema_view(get=extend_schema(responses=DeploymentOutputSerializer))
class DeploymentDetailApi(_JobDetailApi):
    model = Deployment
    output_serializer_class = DeploymentOutputSerializer
    lookup_url_kwarg = "deployment_id"


@extend_schema_view(
    post=extend_schema(
        **idempotent_post_schema(
            request=BuildCreateInputSerializer,
            output=BuildOutputSerializer,
            created=202,
            location=True,
        )
    ),
    get=extend_schema(
        responses=BuildOutputSerializer(many=True),
        parameters=[IDEMPOTENCY_KEY_QUERY],
    ),
)
class BuildCollectionApi(_JobCollectionApi):
    """POST creates (idempotent), GET lists the client's builds (``?idempotency_key=``)."""

    kind = JobKind.BUILD
    operation_type = OPERATION_TYPES[kind]
    fingerprint_fields = ("repository", "commit_sha", "ref", "workflow")
    input_serializer_class = BuildCreateInputSerializer
    input_validate_fast = staticmethod(build_input_validate)
    model = Build
    output_serializer_class = BuildOutputSerializer
    output = BUILD_OUTPUT


@extend_schema_view(get=extend_schema(responses=BuildOutputSerializer))
class BuildDetailApi(_JobDetailApi):
    model = Build
    output_serializer_class = BuildOutputSerializer
    lookup_url_kwarg = "build_id"


# What a status report carries besides its target. (No docstrings on these serializers:
# they would become the request's description in the OpenAPI schema.)
class _StatusReportSerializer(serializers.Serializer):
    status = StrictChoiceField(choices=JobStatus.choices)
    reported_at = InstantField(
        help_text="RFC 3339 (without an offset, UTC); not later than now plus "
        "WEBHOOK_TIMESTAMP_TOLERANCE_SECONDS."
    )
    detail = StrictCharField(
        max_length=REPORTED_DETAIL_MAX_LENGTH,
        required=False,
        allow_blank=True,
        default="",
    )

    def validate_reported_at(self, value):
        # A report from the future would outrank every later one (and the worker's own
        # results): beyond the clock skew the webhooks tolerate, it is refused.
        skew = timedelta(seconds=settings.WEBHOOK_TIMESTAMP_TOLERANCE_SECONDS)
        if value > timezone.now() + skew:
            raise serializers.ValidationError("reported_at is in the future.")
        return value


TARGET_ID_MAX_LENGTH = 32


class StatusSyncInputSerializer(_StatusReportSerializer):
    deployment_id = StrictCharField(max_length=TARGET_ID_MAX_LENGTH, required=False)
    build_id = StrictCharField(max_length=TARGET_ID_MAX_LENGTH, required=False)

    def validate(self, attrs):
        if ("deployment_id" in attrs) == ("build_id" in attrs):
            raise serializers.ValidationError(
                "Exactly one of deployment_id and build_id is required."
            )
        return attrs


# The schema's two forms of the body above, exactly one of which a body matches (``oneOf``:
# a body with both ids matches both, one with neither matches none).
@extend_schema_serializer(component_name="DeploymentStatusReport")
class _DeploymentStatusReportSerializer(_StatusReportSerializer):
    deployment_id = StrictCharField(max_length=TARGET_ID_MAX_LENGTH)


@extend_schema_serializer(component_name="BuildStatusReport")
class _BuildStatusReportSerializer(_StatusReportSerializer):
    build_id = StrictCharField(max_length=TARGET_ID_MAX_LENGTH)


STATUS_SYNC_REQUEST = PolymorphicProxySerializer(
    component_name="StatusSyncInput",
    serializers=[_DeploymentStatusReportSerializer, _BuildStatusReportSerializer],
    resource_type_field_name=None,
)


class StatusSyncApi(IdempotentPostMixin, APIView):
    """An external system reports a deployment's or build's status; applied at once under
    the ordering rule. The Idempotency-Key contract comes whole from the mixin."""

    read_roles = write_roles = CI

    operation_type = "status.sync"
    fingerprint_fields = ("deployment_id", "build_id", "status", "reported_at")

    input_serializer_class = StatusSyncInputSerializer

    class StatusSyncOutputSerializer(serializers.Serializer):
        status_sync_id = serializers.CharField(source="public_id")
        applied = serializers.BooleanField()
        current_status = serializers.CharField(source="resulting_status")

    def fingerprint_values(self, data: dict) -> dict:
        values = {
            name: data[name]
            for name in ("deployment_id", "build_id", "status")
            if name in data
        }
        values["reported_at"] = data["reported_at"].isoformat()
        return values

    def perform(self, *, client, key, data) -> OperationResult:
        kind = JobKind.DEPLOYMENT if "deployment_id" in data else JobKind.BUILD
        sync = status_sync_record(
            client=client,
            target_kind=kind,
            target_id=data[f"{kind}_id"],
            status=data["status"],
            reported_at=data["reported_at"],
            detail=data.get("detail") or "",
        )
        return OperationResult(
            status_code=201,
            body=self.StatusSyncOutputSerializer(sync).data,
            resource_id=sync.public_id,
        )

    @extend_schema(
        **idempotent_post_schema(
            request=STATUS_SYNC_REQUEST,
            output=StatusSyncOutputSerializer,
            created=201,
            location=False,
            not_found="`not_found`: the target is not one of the client's deployments "
            "or builds; nothing is recorded.",
        )
    )
    def post(self, request, *args, **kwargs):
        return super().post(request, *args, **kwargs)
