"""The operator API's replays, bulk replay jobs, sources, mismatches and dead letters
(docs/http-api.md, "Operator API"). Each action calls the service the admin and the
commands call; none is written twice."""

from __future__ import annotations

import hashlib
import time
from datetime import timedelta

from django.db.models import QuerySet, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
)
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.response import Response

from core.errors import NotFound
from core.fields import InstantBoundField, StrictCharField, StrictChoiceField
from core.pagination import CursorPage
from core.schema import ERROR_REF
from idempotency.services import OperationResult
from webhooks.bulk_replay import (
    bulk_replay_job_cancel,
    bulk_replay_job_controls,
    bulk_replay_job_create,
    bulk_replay_job_pause,
    bulk_replay_job_resume,
    bulk_replay_job_start,
)
from webhooks.errors import BulkReplayJobNotFound, NothingToReplay, UnknownSource
from webhooks.investigations import fingerprint_mismatches_mark_investigated
from webhooks.models import (
    BULK_REPLAY_RATE_MAX,
    BULK_REPLAY_RATE_MIN,
    REPLAYABLE_STATUSES,
    BulkReplayJob,
    FingerprintMismatch,
    InboxEvent,
    ProcessingStatus,
    WebhookSource,
)
from webhooks.pausing import webhook_source_pause, webhook_source_resume
from webhooks.replay import inbox_events_replay, replay_plan
from webhooks.selectors import bulk_replay_job_outcomes, webhook_source_list
from webhooks.sources import (
    DEFAULT_GRACE_SECONDS,
    MAX_GRACE_SECONDS,
    webhook_source_change_in_effect,
    webhook_source_revoke_previous,
    webhook_source_rotate,
)

from .base import OpsActionApi, OpsReadApi, id_checked, ops_action_schema

# A replay by filter with neither a start nor event ids looks this far back (documented).
DEFAULT_REPLAY_WINDOW = timedelta(days=7)
# Event ids one replay request names at most (more is a bulk replay job's work).
REPLAY_IDS_MAX = 1000
EVENT_ID_PATTERN = r"[^\x00]{1,128}"
SLUG_PATTERN = r"[-a-zA-Z0-9_]+"
# A list's ``?source=``: a slug (an empty one is no slug: 422).
SOURCE_QUERY = OpenApiParameter(
    "source",
    {"type": "string", "minLength": 1, "maxLength": 64, "pattern": f"^{SLUG_PATTERN}$"},
    description="Only this source's (its slug).",
)


def _with_parameter(schema: dict, parameter: OpenApiParameter) -> dict:
    return {**schema, "parameters": [*schema["parameters"], parameter]}


# A field named ``source`` (as the API names it) shadows DRF's ``Field.source`` for the
# type checker: each is marked where it is declared.


def _source(slug: str | None) -> WebhookSource | None:
    """The source a body or a path names (``None`` for none); 404 ``unknown_source``."""
    if not slug:
        return None
    source = WebhookSource.objects.filter(slug=slug).first()
    if source is None:
        raise UnknownSource()
    return source


def _reason_field(*, required: bool = True) -> StrictCharField:
    return StrictCharField(
        max_length=2000,
        required=required,
        allow_blank=not required,
        default="" if not required else serializers.empty,
        help_text="Why: kept with the operator action in the trail.",
    )


# --- replay ---------------------------------------------------------------------------


class ReplayApi(OpsActionApi):
    """``POST /api/ops/replays/``: replays named events of one source now (dead-lettered or
    failed ones; any other is skipped and counted), one operator action naming them."""

    operation_type = "ops.replay"

    class ReplayInputSerializer(serializers.Serializer):
        source = StrictCharField(max_length=64, pattern=r"[-a-zA-Z0-9_]+")  # type: ignore[assignment]
        event_ids = serializers.ListField(
            child=StrictCharField(max_length=128, pattern=EVENT_ID_PATTERN),
            min_length=1,
            max_length=REPLAY_IDS_MAX,
        )
        reason = _reason_field()
        confirm_repeats = serializers.BooleanField(
            required=False,
            default=False,
            help_text="Replay too the events dead-lettered because their data was "
            "rejected (the same bytes are likely rejected again); without it such a "
            "replay is refused, 409 `replay_repeats_unconfirmed`.",
        )

    class ReplayOutputSerializer(serializers.Serializer):
        operator_action_id = serializers.IntegerField()
        replayed = serializers.IntegerField()
        skipped = serializers.IntegerField()
        replayed_event_ids = serializers.ListField(child=serializers.CharField())

    input_serializer_class = ReplayInputSerializer

    @extend_schema(
        **ops_action_schema(
            request=ReplayInputSerializer,
            output=ReplayOutputSerializer,
            not_found="`unknown_source`.",
            conflicts="`nothing_to_replay`, `replay_repeats_unconfirmed`",
        )
    )
    def post(self, request, *args, **kwargs):
        return super().post(request, *args, **kwargs)

    def perform(self, *, client, key: str, data: dict) -> OperationResult:
        source = _source(data["source"])
        ids = list(dict.fromkeys(data["event_ids"]))
        action = inbox_events_replay(
            events_queryset=InboxEvent.objects.filter(source=source, event_id__in=ids),
            actor=self.actor(client),
            reason=data["reason"],
            repeats_confirmed=data["confirm_repeats"],
        )
        replayed = list(
            InboxEvent.objects.filter(pk__in=action.event_ids)
            .order_by("pk")
            .values_list("event_id", flat=True)
        )
        return OperationResult(
            status_code=200,
            body={
                "operator_action_id": action.pk,
                "replayed": len(replayed),
                "skipped": len(ids) - len(replayed),
                "replayed_event_ids": replayed,
            },
            resource_id=f"action:{action.pk}",
        )


# --- bulk replay jobs -----------------------------------------------------------------


class BulkReplayOutputSerializer(serializers.Serializer):
    bulk_replay_id = serializers.IntegerField(source="pk")
    state = serializers.CharField()
    filter = serializers.SerializerMethodField()
    reason = serializers.CharField()
    rate = serializers.FloatField(allow_null=True)
    rate_measured = serializers.SerializerMethodField()
    dry_run_count = serializers.IntegerField()
    total = serializers.IntegerField()
    done = serializers.IntegerField(source="processed")
    skipped = serializers.IntegerField(
        help_text="Rows its chunks found no longer replayable (replayed or moved meanwhile)."
    )
    failed = serializers.SerializerMethodField()
    outcomes = serializers.SerializerMethodField()
    controls = serializers.SerializerMethodField()
    error = serializers.CharField()
    created_by = serializers.CharField(source="created_by_name")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_filter(self, job: BulkReplayJob) -> dict:
        return {
            "source": job.source.slug if job.source is not None else None,
            "status": job.status,
            "since": serializers.DateTimeField().to_representation(job.since)
            if job.since
            else None,
            "until": serializers.DateTimeField().to_representation(job.until)
            if job.until
            else None,
            "event_ids": job.event_ids,
        }

    def get_rate_measured(self, job: BulkReplayJob) -> float | None:
        return job.rate_measured()

    def _outcomes(self, job: BulkReplayJob) -> dict[str, int] | None:
        if not hasattr(job, "_outcomes"):
            job._outcomes = bulk_replay_job_outcomes(  # type: ignore[attr-defined]
                job_id=job.pk, replayed=job.processed
            )
        return job._outcomes  # type: ignore[attr-defined]

    def get_outcomes(self, job: BulkReplayJob) -> dict[str, int] | None:
        """What became of the replayed events, by status now (null past the count's cap)."""
        return self._outcomes(job)

    def get_failed(self, job: BulkReplayJob) -> int | None:
        """Replayed events that failed again (failed or dead-lettered now)."""
        outcomes = self._outcomes(job)
        if outcomes is None:
            return None
        return outcomes.get(ProcessingStatus.FAILED, 0) + outcomes.get(
            ProcessingStatus.DEAD_LETTERED, 0
        )

    def get_controls(self, job: BulkReplayJob) -> list[str]:
        return bulk_replay_job_controls(job=job)


class BulkReplayPlanSerializer(serializers.Serializer):
    mode = serializers.CharField()
    filter = serializers.DictField()
    matched = serializers.IntegerField()
    replayable = serializers.IntegerField()
    body_expired = serializers.IntegerField()
    already_processed = serializers.IntegerField()
    capped = serializers.BooleanField()


def _jobs() -> QuerySet[BulkReplayJob]:
    """Jobs as the API answers them: their source, and what their chunks skipped."""
    return BulkReplayJob.objects.select_related("source").annotate(
        skipped=Coalesce(Sum("actions__skipped_count"), 0)
    )


def _job_body(job: BulkReplayJob) -> dict:
    return dict(BulkReplayOutputSerializer(_jobs().get(pk=job.pk)).data)


def _job_location(job_id: int) -> str:
    return f"/api/ops/bulk-replays/{job_id}/"


class _BulkReplayFilterSerializer(serializers.Serializer):
    source = StrictCharField(
        max_length=64, pattern=r"[-a-zA-Z0-9_]+", required=False, default=None
    )  # type: ignore[assignment]
    status = StrictChoiceField(
        choices=[status.value for status in REPLAYABLE_STATUSES],
        required=False,
        default=ProcessingStatus.DEAD_LETTERED.value,
    )
    since = InstantBoundField(required=False, default=None)
    until = InstantBoundField(
        required=False,
        default=None,
        help_text="Rows received before it (default: now). A window that ends before it "
        "starts holds no row.",
    )
    event_ids = serializers.ListField(
        child=StrictCharField(max_length=128, pattern=EVENT_ID_PATTERN),
        required=False,
        default=list,
        max_length=REPLAY_IDS_MAX,
    )
    rate = serializers.FloatField(
        required=False,
        default=None,
        allow_null=True,
        min_value=BULK_REPLAY_RATE_MIN,
        max_value=BULK_REPLAY_RATE_MAX,
        help_text="execute: events per second; null: as fast as the workers go.",
    )


# What the schema says of the body, a mode at a time (the view reads both with one
# serializer): an execute needs a reason.
class BulkReplayPlanRequestSerializer(_BulkReplayFilterSerializer):
    mode = StrictChoiceField(choices=["plan"])
    reason = _reason_field(required=False)


class BulkReplayExecuteRequestSerializer(_BulkReplayFilterSerializer):
    mode = StrictChoiceField(choices=["execute"])
    reason = _reason_field()


class BulkReplayCollectionApi(OpsActionApi, ListAPIView):
    """``GET /api/ops/bulk-replays/``: the jobs, newest first. ``POST``: a replay by
    filter, ``mode: plan`` (the counts, nothing written but the key's record) or
    ``mode: execute`` (a job, started at once, its filter frozen: rows received from
    ``since``, default 7 days back, to ``until``, default now)."""

    operation_type = "ops.bulk_replay"
    serializer_class = BulkReplayOutputSerializer
    pagination_class = CursorPage

    class BulkReplayInputSerializer(_BulkReplayFilterSerializer):
        mode = StrictChoiceField(choices=["plan", "execute"])
        reason = _reason_field(required=False)

        def validate(self, attrs):
            if attrs["mode"] == "execute" and not attrs["reason"]:
                raise serializers.ValidationError({"reason": ["A job needs a reason."]})
            return attrs

    input_serializer_class = BulkReplayInputSerializer

    def get_queryset(self) -> QuerySet[BulkReplayJob]:
        return _jobs()

    @extend_schema(responses=BulkReplayOutputSerializer(many=True))
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        **ops_action_schema(
            request=PolymorphicProxySerializer(
                component_name="BulkReplayRequest",
                serializers={
                    "plan": BulkReplayPlanRequestSerializer,
                    "execute": BulkReplayExecuteRequestSerializer,
                },
                resource_type_field_name="mode",
            ),
            output=BulkReplayOutputSerializer,
            first=202,
            not_found="`unknown_source`.",
            conflicts="`nothing_to_replay` (execute: no row to replay)",
            more={
                200: OpenApiResponse(
                    response=PolymorphicProxySerializer(
                        component_name="BulkReplayPlanOrJob",
                        serializers=[
                            BulkReplayPlanSerializer,
                            BulkReplayOutputSerializer,
                        ],
                        resource_type_field_name=None,
                    ),
                    description="`mode: plan`: the counts; or a replay of the key's "
                    "first answer (a plan's, or an execute's job).",
                )
            },
        )
    )
    def post(self, request, *args, **kwargs):
        return super().post(request, *args, **kwargs)

    def perform(self, *, client, key: str, data: dict) -> OperationResult:
        source = _source(data["source"])
        now = timezone.now()
        until = data["until"] or now
        since = data["since"]
        if since is None and not data["event_ids"]:
            since = until - DEFAULT_REPLAY_WINDOW
        frozen = {
            "source": data["source"],
            "status": data["status"],
            "since": since,
            "until": until,
            "event_ids": data["event_ids"],
        }
        if data["mode"] == "plan":
            counts = replay_plan(
                source_slug=data["source"],
                status=data["status"],
                since=since,
                until=until,
                event_ids=data["event_ids"] or None,
            )
            body = BulkReplayPlanSerializer(
                {"mode": "plan", "filter": frozen, **counts}
            ).data
            return OperationResult(status_code=200, body=dict(body))
        actor = self.actor(client)
        job = bulk_replay_job_create(
            source=source,
            status=data["status"],
            since=since,
            until=until,
            event_ids=data["event_ids"],
            reason=data["reason"],
            created_by=actor,
            rate=data["rate"],
        )
        if not job.dry_run_count:
            raise NothingToReplay("no row matches the filter")
        bulk_replay_job_start(job=job, started_by=actor)
        return OperationResult(
            status_code=202,
            body=_job_body(job),
            resource_id=f"bulk_replay:{job.pk}",
            location=_job_location(job.pk),
        )


class BulkReplayDetailApi(OpsReadApi):
    """``GET /api/ops/bulk-replays/<id>/``: a job's progress."""

    @extend_schema(responses=BulkReplayOutputSerializer)
    def get(self, request, bulk_replay_id: int):
        job = _jobs().filter(pk=id_checked(bulk_replay_id)).first()
        if job is None:
            raise NotFound()
        return Response(BulkReplayOutputSerializer(job).data)


class BulkReplayControlApi(OpsActionApi):
    """``POST /api/ops/bulk-replays/<id>/{pause,resume,cancel}/``: a paused job goes on
    from where it stopped when resumed (optionally at a new rate); a cancelled one too, by
    the console's rules."""

    operation_type = "ops.bulk_replay.control"
    path_fields = ("bulk_replay_id", "control")

    class BulkReplayControlInputSerializer(serializers.Serializer):
        reason = _reason_field(required=False)
        rate = serializers.FloatField(
            required=False,
            default=None,
            allow_null=True,
            min_value=BULK_REPLAY_RATE_MIN,
            max_value=BULK_REPLAY_RATE_MAX,
            help_text="resume only: the new rate (events per second).",
        )

    input_serializer_class = BulkReplayControlInputSerializer

    @extend_schema(
        operation_id="ops_bulk_replays_control",
        **_with_parameter(
            ops_action_schema(
                request=BulkReplayControlInputSerializer,
                output=BulkReplayOutputSerializer,
                not_found="`not_found`: no such job, or no such control.",
                conflicts="`bulk_replay_job_not_cancellable` (pause, cancel), "
                "`bulk_replay_job_not_resumable`",
            ),
            OpenApiParameter(
                "control",
                str,
                OpenApiParameter.PATH,
                enum=["pause", "resume", "cancel"],
            ),
        ),
    )
    def post(self, request, *args, **kwargs):
        if kwargs.get("control") not in ("pause", "resume", "cancel"):
            raise NotFound()
        return super().post(request, *args, **kwargs)

    def perform(self, *, client, key: str, data: dict) -> OperationResult:
        job_id = id_checked(self.kwargs["bulk_replay_id"])
        control = self.kwargs["control"]
        actor = self.actor(client)
        try:
            if control == "pause":
                job = bulk_replay_job_pause(
                    job_id=job_id, reason=data["reason"], paused_by=actor
                )
            elif control == "cancel":
                job = bulk_replay_job_cancel(
                    job_id=job_id, reason=data["reason"], cancelled_by=actor
                )
            else:
                job = bulk_replay_job_resume(
                    job_id=job_id,
                    resumed_by=actor,
                    reason=data["reason"],
                    rate=data["rate"],
                )
        except BulkReplayJobNotFound:
            raise NotFound() from None
        return OperationResult(
            status_code=200,
            body=_job_body(job),
            resource_id=f"bulk_replay:{job.pk}",
            location=_job_location(job.pk),
        )


# --- sources --------------------------------------------------------------------------


class SourceOutputSerializer(serializers.Serializer):
    slug = serializers.CharField()
    scheme = serializers.CharField()
    handler = serializers.CharField()
    is_enabled = serializers.BooleanField()
    secret_count = serializers.IntegerField()
    public_key_count = serializers.IntegerField()
    previous_valid_until = serializers.DateTimeField(
        allow_null=True,
        help_text="The end of the open grace period of an earlier rotation (null: none).",
    )
    paused = serializers.SerializerMethodField()
    pause_reason = serializers.SerializerMethodField()
    paused_by = serializers.SerializerMethodField()
    draining = serializers.SerializerMethodField()
    drain_rate = serializers.SerializerMethodField()

    def _hold(self, source):
        return getattr(source, "hold", None)

    def get_paused(self, source) -> bool:
        hold = self._hold(source)
        return bool(hold and hold.paused_at)

    def get_pause_reason(self, source) -> str:
        hold = self._hold(source)
        return hold.pause_reason if hold and hold.paused_at else ""

    def get_paused_by(self, source) -> str:
        hold = self._hold(source)
        return hold.paused_by_name if hold and hold.paused_at else ""

    def get_draining(self, source) -> bool:
        hold = self._hold(source)
        return bool(hold and hold.drain_started_at)

    def get_drain_rate(self, source) -> float | None:
        hold = self._hold(source)
        return hold.drain_rate if hold and hold.drain_started_at else None


def _source_body(slug: str) -> dict:
    source = webhook_source_list().filter(slug=slug).first()
    if source is None:
        raise UnknownSource()
    return dict(SourceOutputSerializer(source).data)


class SourceListApi(OpsReadApi, ListAPIView):
    """``GET /api/ops/sources/``: every source (never a secret)."""

    serializer_class = SourceOutputSerializer
    pagination_class = None

    def get_queryset(self):
        return webhook_source_list()


class SourceDetailApi(OpsReadApi):
    """``GET /api/ops/sources/<slug>/``."""

    @extend_schema(
        responses={
            200: SourceOutputSerializer,
            404: OpenApiResponse(ERROR_REF, description="`unknown_source`."),
        }
    )
    def get(self, request, slug: str):
        return Response(_source_body(slug))


class _SourceActionApi(OpsActionApi):
    path_fields = ("slug",)

    def source(self) -> WebhookSource:
        source = _source(self.kwargs["slug"])
        assert source is not None
        return source

    def answered(self, body: dict, **once) -> OperationResult:
        return OperationResult(
            status_code=200,
            body=body,
            resource_id=f"source:{self.kwargs['slug']}",
            answered_once=once,
        )


def _wait_in_effect(response, within: object = None) -> None:
    """After a rotation or a revocation committed with its key (not after a replay): the
    answer waits until every web process verifies with the new secrets, as the command
    and the console do."""
    if response.status_code != 200 or response.has_header("Idempotent-Replayed"):
        return
    seconds = float(within) if isinstance(within, int) else None
    webhook_source_change_in_effect(committed_at=time.monotonic(), within=seconds)


class SourcePauseApi(_SourceActionApi):
    """``POST /api/ops/sources/<slug>/pause/``: deliveries are still verified, stored and
    answered; events wait unprocessed until resumed."""

    operation_type = "ops.source.pause"

    class SourcePauseInputSerializer(serializers.Serializer):
        reason = _reason_field()

    input_serializer_class = SourcePauseInputSerializer

    @extend_schema(
        **ops_action_schema(
            request=SourcePauseInputSerializer,
            output=SourceOutputSerializer,
            not_found="`unknown_source`.",
            conflicts="`source_already_paused`",
        )
    )
    def post(self, request, *args, **kwargs):
        return super().post(request, *args, **kwargs)

    def perform(self, *, client, key: str, data: dict) -> OperationResult:
        webhook_source_pause(
            source=self.source(), reason=data["reason"], actor=self.actor(client)
        )
        return self.answered(_source_body(self.kwargs["slug"]))


class SourceResumeApi(_SourceActionApi):
    """``POST /api/ops/sources/<slug>/resume/``: its held events drain in order, at
    ``rate`` events per second when given."""

    operation_type = "ops.source.resume"

    class SourceResumeInputSerializer(serializers.Serializer):
        rate = serializers.FloatField(
            required=False,
            default=None,
            allow_null=True,
            min_value=BULK_REPLAY_RATE_MIN,
            max_value=BULK_REPLAY_RATE_MAX,
        )
        reason = _reason_field(required=False)

    input_serializer_class = SourceResumeInputSerializer

    @extend_schema(
        **ops_action_schema(
            request=SourceResumeInputSerializer,
            output=SourceOutputSerializer,
            not_found="`unknown_source`.",
            conflicts="`source_not_paused`",
        )
    )
    def post(self, request, *args, **kwargs):
        return super().post(request, *args, **kwargs)

    def perform(self, *, client, key: str, data: dict) -> OperationResult:
        webhook_source_resume(
            source=self.source(),
            actor=self.actor(client),
            rate=data["rate"],
            reason=data["reason"],
        )
        return self.answered(_source_body(self.kwargs["slug"]))


class SourceRotateApi(_SourceActionApi):
    """``POST /api/ops/sources/<slug>/rotate/``: a new secret (generated unless given) or
    public key signs from now on; the previous ones stay valid for ``grace_seconds``. The
    new secret is in this answer only: a retry with the same key answers ``secret: null``
    (it is never stored with the key's record)."""

    operation_type = "ops.source.rotate"

    class SourceRotateInputSerializer(serializers.Serializer):
        secret = StrictCharField(max_length=255, required=False, default=None)
        public_key = StrictCharField(max_length=255, required=False, default=None)
        grace_seconds = serializers.IntegerField(
            required=False,
            default=DEFAULT_GRACE_SECONDS,
            min_value=0,
            max_value=MAX_GRACE_SECONDS,
        )
        force = serializers.BooleanField(
            required=False,
            default=False,
            help_text="Rotate even while an earlier rotation's grace period is open "
            "(it ends then, at the latest, with this one's).",
        )
        reason = _reason_field(required=False)

    class SourceRotatedSerializer(SourceOutputSerializer):
        secret = serializers.CharField(
            allow_null=True,
            help_text="The new secret, in the first answer only (null in a replay, and "
            "for a public key).",
        )

    input_serializer_class = SourceRotateInputSerializer

    def fingerprint_values(self, data: dict) -> dict:
        # A given secret is fingerprinted as its hash: the key's record never holds it.
        values = super().fingerprint_values(data)
        if values.get("secret"):
            values["secret"] = hashlib.sha256(values["secret"].encode()).hexdigest()
        return values

    @extend_schema(
        **ops_action_schema(
            request=SourceRotateInputSerializer,
            output=SourceRotatedSerializer,
            not_found="`unknown_source`.",
            conflicts="`rotation_in_progress` (with `previous_valid_until`)",
        )
    )
    def post(self, request, *args, **kwargs):
        response = super().post(request, *args, **kwargs)
        _wait_in_effect(response, within=request.data.get("grace_seconds"))
        return response

    def perform(self, *, client, key: str, data: dict) -> OperationResult:
        credential = webhook_source_rotate(
            source=self.source(),
            actor=self.actor(client),
            secret=data["secret"],
            public_key=data["public_key"],
            grace_seconds=data["grace_seconds"],
            reason=data["reason"],
            force=data["force"],
        )
        body = {**_source_body(self.kwargs["slug"]), "secret": None}
        if data["public_key"] is not None:
            return self.answered(body)
        return self.answered(body, secret=credential)


class SourceRevokePreviousApi(_SourceActionApi):
    """``POST /api/ops/sources/<slug>/revoke-previous/``: the secrets an earlier rotation
    left valid stop verifying now."""

    operation_type = "ops.source.revoke_previous"

    class SourceRevokeInputSerializer(serializers.Serializer):
        reason = _reason_field(required=False)

    class SourceRevokedSerializer(SourceOutputSerializer):
        revoked = serializers.IntegerField()

    input_serializer_class = SourceRevokeInputSerializer

    @extend_schema(
        **ops_action_schema(
            request=SourceRevokeInputSerializer,
            output=SourceRevokedSerializer,
            not_found="`unknown_source`.",
            conflicts="`nothing_to_revoke`",
        )
    )
    def post(self, request, *args, **kwargs):
        response = super().post(request, *args, **kwargs)
        _wait_in_effect(response)
        return response

    def perform(self, *, client, key: str, data: dict) -> OperationResult:
        revoked = webhook_source_revoke_previous(
            source=self.source(), actor=self.actor(client), reason=data["reason"]
        )
        return self.answered({**_source_body(self.kwargs["slug"]), "revoked": revoked})


# --- fingerprint mismatches and dead letters ---------------------------------------------


def _text(raw: bytes | memoryview | None) -> str | None:
    if raw is None:
        return None
    return bytes(raw).decode("utf-8", errors="replace")


class MismatchOutputSerializer(serializers.Serializer):
    mismatch_id = serializers.IntegerField(source="pk")
    source = serializers.CharField(source="event.source.slug")  # type: ignore[assignment]
    event_id = serializers.CharField(source="event.event_id")
    original_fingerprint = serializers.CharField()
    conflicting_fingerprint = serializers.CharField()
    received_at = serializers.DateTimeField()
    repeat_count = serializers.IntegerField()
    investigated = serializers.SerializerMethodField()
    investigated_at = serializers.DateTimeField(allow_null=True)
    investigation_note = serializers.CharField()

    def get_investigated(self, mismatch) -> bool:
        return mismatch.investigated_at is not None


class MismatchDetailSerializer(MismatchOutputSerializer):
    original_body = serializers.SerializerMethodField()
    conflicting_body = serializers.SerializerMethodField()

    def get_original_body(self, mismatch) -> str | None:
        """The first delivery's body as text (null once body retention dropped it)."""
        return _text(mismatch.event.raw_body)

    def get_conflicting_body(self, mismatch) -> str | None:
        return _text(mismatch.raw_body)


def _mismatches() -> QuerySet[FingerprintMismatch]:
    return FingerprintMismatch.objects.select_related("event__source").defer(
        "raw_body", "event__raw_body"
    )


class MismatchListApi(OpsReadApi, ListAPIView):
    """``GET /api/ops/mismatches/``: newest first; ``?investigated=false`` for the open
    ones, ``?source=<slug>``."""

    serializer_class = MismatchOutputSerializer
    pagination_class = CursorPage

    class FilterSerializer(serializers.Serializer):
        investigated = StrictChoiceField(
            choices=["true", "false"], required=False, default=None
        )
        source = StrictCharField(
            max_length=64, pattern=SLUG_PATTERN, required=False, default=None
        )  # type: ignore[assignment]

    @extend_schema(
        parameters=[
            OpenApiParameter("investigated", str, enum=["true", "false"]),
            SOURCE_QUERY,
        ],
        responses={
            200: MismatchOutputSerializer(many=True),
            422: OpenApiResponse(ERROR_REF, description="`invalid_payload`."),
        },
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        filters = self.FilterSerializer(data=self.request.query_params.dict())
        filters.is_valid(raise_exception=True)
        queryset = _mismatches()
        investigated = filters.validated_data["investigated"]
        if investigated is not None:
            queryset = queryset.filter(investigated_at__isnull=investigated == "false")
        if filters.validated_data["source"]:
            queryset = queryset.filter(
                event__source__slug=filters.validated_data["source"]
            )
        return queryset


class MismatchDetailApi(OpsReadApi):
    """``GET /api/ops/mismatches/<id>/``: both fingerprints and both bodies."""

    @extend_schema(responses=MismatchDetailSerializer)
    def get(self, request, mismatch_id: int):
        mismatch = (
            FingerprintMismatch.objects.select_related("event__source")
            .filter(pk=id_checked(mismatch_id))
            .first()
        )
        if mismatch is None:
            raise NotFound()
        return Response(MismatchDetailSerializer(mismatch).data)


class MismatchInvestigateApi(OpsActionApi):
    """``POST /api/ops/mismatches/<id>/investigate/``: marks it investigated with a note
    (one already marked is answered as it is, with nothing recorded)."""

    operation_type = "ops.mismatch.investigate"
    path_fields = ("mismatch_id",)

    class MismatchInvestigateInputSerializer(serializers.Serializer):
        note = StrictCharField(max_length=2000)

    input_serializer_class = MismatchInvestigateInputSerializer

    @extend_schema(
        **ops_action_schema(
            request=MismatchInvestigateInputSerializer,
            output=MismatchOutputSerializer,
            not_found="`not_found`: no such mismatch.",
        )
    )
    def post(self, request, *args, **kwargs):
        return super().post(request, *args, **kwargs)

    def perform(self, *, client, key: str, data: dict) -> OperationResult:
        mismatch_id = id_checked(self.kwargs["mismatch_id"])
        if not FingerprintMismatch.objects.filter(pk=mismatch_id).exists():
            raise NotFound()
        fingerprint_mismatches_mark_investigated(
            mismatches=FingerprintMismatch.objects.filter(pk=mismatch_id),
            actor=self.actor(client),
            note=data["note"],
        )
        mismatch = _mismatches().get(pk=mismatch_id)
        return OperationResult(
            status_code=200,
            body=dict(MismatchOutputSerializer(mismatch).data),
            resource_id=f"mismatch:{mismatch_id}",
        )


class DeadLetterOutputSerializer(serializers.Serializer):
    source = serializers.CharField(source="source.slug")  # type: ignore[assignment]
    event_id = serializers.CharField()
    event_type = serializers.CharField()
    entity_id = serializers.CharField()
    attempts = serializers.IntegerField()
    dead_letter_cause = serializers.CharField()
    error_message = serializers.CharField()
    received_at = serializers.DateTimeField()
    body_expired = serializers.SerializerMethodField()

    def get_body_expired(self, event) -> bool:
        return event.body_purged_at is not None


class DeadLetterListApi(OpsReadApi, ListAPIView):
    """``GET /api/ops/dead-letters/``: the dead-letter queue, newest first;
    ``?source=<slug>``, ``?since=<RFC 3339>``."""

    serializer_class = DeadLetterOutputSerializer
    pagination_class = CursorPage

    class FilterSerializer(serializers.Serializer):
        source = StrictCharField(
            max_length=64, pattern=SLUG_PATTERN, required=False, default=None
        )  # type: ignore[assignment]
        since = InstantBoundField(required=False, default=None)

    @extend_schema(
        parameters=[
            SOURCE_QUERY,
            OpenApiParameter("since", OpenApiTypes.DATETIME),
        ],
        responses={
            200: DeadLetterOutputSerializer(many=True),
            422: OpenApiResponse(ERROR_REF, description="`invalid_payload`."),
        },
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        filters = self.FilterSerializer(data=self.request.query_params.dict())
        filters.is_valid(raise_exception=True)
        queryset = (
            InboxEvent.objects.filter(processing_status=ProcessingStatus.DEAD_LETTERED)
            .select_related("source")
            .only(
                "id",
                "source__slug",
                "event_id",
                "event_type",
                "entity_id",
                "attempts",
                "dead_letter_cause",
                "error_message",
                "received_at",
                "body_purged_at",
            )
        )
        if filters.validated_data["source"]:
            queryset = queryset.filter(source__slug=filters.validated_data["source"])
        if filters.validated_data["since"] is not None:
            queryset = queryset.filter(received_at__gte=filters.validated_data["since"])
        return queryset
