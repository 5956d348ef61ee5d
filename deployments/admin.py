from django.contrib import admin
from django.db.models.fields.json import KT
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.html import format_html

from core.admin.evidence import EvidenceAdminMixin, LogEntryAdminMixin
from core.admin.filters import DateRangeFilter, StatusFilter
from core.admin.mixins import (
    PagedInlineMixin,
    ReadOnlyAdminMixin,
    ReadOnlyInlineMixin,
    StatusBadgesMixin,
)
from core.admin.render import text_head, text_head_annotate
from core.admin.status import status_badge, status_field_badge, status_words_register
from core.times import duration_display, time_display
from idempotency.admin import resource_model_register
from idempotency.models import IdempotencyRecord

from . import target_admin  # noqa: F401 - registers the deploy targets' admin
from .models import (
    Build,
    Deployment,
    JobKind,
    JobTransition,
    StatusSync,
    TriggerAttempt,
)
from .services.jobs import OPERATION_TYPES

# An idempotency record's page links to the job its key created.
resource_model_register(
    operation_type=OPERATION_TYPES[JobKind.DEPLOYMENT], model="deployments.Deployment"
)
resource_model_register(
    operation_type=OPERATION_TYPES[JobKind.BUILD], model="deployments.Build"
)
# The words and tone of a job's status and of a trigger attempt's outcome, on every page of
# the console (docs/console.md, "One wording").
status_words_register(
    {
        "queued": ("Queued", "waiting"),
        "running": ("Running", "running"),
        "succeeded": ("Succeeded", "ok"),
        "failed": ("Failed", "error"),
        # ``TriggerAttempt.Outcome``
        "started": ("Started", "running"),
        "delivered": ("Delivered", "ok"),
        "transient": ("Transient failure", "warning"),
        "ambiguous": ("Ambiguous (may have been acted on)", "warning"),
        "rejected": ("Rejected", "error"),
        "lost": ("Lost (no outcome)", "error"),
    }
)


def downstream_display(downstream) -> str:
    """What a trigger started, as the console shows it: its system and id, linked to its
    page when the system gave one (an http(s) URL, checked when it was recorded)."""
    if not downstream:
        return "-"
    identifier = downstream.get("id")
    name = (
        downstream["system"]
        if identifier is None
        else f"{downstream['system']} {identifier}"
    )
    if downstream.get("url"):
        return format_html(
            '<a href="{}" rel="noopener noreferrer" target="_blank">{}</a>',
            downstream["url"],
            name,
        )
    return name


class TransitionInline(
    PagedInlineMixin, LogEntryAdminMixin, ReadOnlyInlineMixin, admin.TabularInline
):
    # A job may have any number of transitions (every applied report is one): the page
    # shows them 50 at a time, and each detail cut to its first characters.
    model = JobTransition
    fields = readonly_fields = (
        "from_status_badge",
        "to_status_badge",
        "at",
        "actor",
        "detail_shown",
        "log_entry",
    )
    ordering = ["at", "id"]
    page_param = "transitions_page"

    from_status_badge = status_field_badge("from_status")
    to_status_badge = status_field_badge("to_status")

    def get_queryset(self, request):
        return text_head_annotate(super().get_queryset(request), field="detail")

    @admin.display(description="detail")
    def detail_shown(self, obj):
        return text_head(obj, field="detail")


class TriggerAttemptInline(ReadOnlyInlineMixin, admin.TabularInline):
    """Each attempt to trigger the job downstream, as the worker recorded it."""

    model = TriggerAttempt
    fields = readonly_fields = (
        "number",
        "started_at",
        "finished_at",
        "outcome_badge",
        "status_code",
        "error_class",
        "error",
        "duration",
        "retry_at",
        "target_name",
        "url",
        "downstream_shown",
        "worker",
    )
    ordering = ["number"]
    verbose_name_plural = "trigger attempts"

    outcome_badge = status_field_badge("outcome")

    @admin.display(description="duration")
    def duration(self, obj):
        return duration_display(obj.duration_seconds)

    @admin.display(description="started downstream")
    def downstream_shown(self, obj):
        return downstream_display(obj.downstream)


class JobAdmin(
    StatusBadgesMixin, ReadOnlyAdminMixin, LogEntryAdminMixin, admin.ModelAdmin
):
    list_select_related = ["client"]
    list_filter = [("status", StatusFilter), ("created_at", DateRangeFilter)]
    search_fields = ["=public_id", "=idempotency_key", "=commit_sha"]
    date_hierarchy = "created_at"
    inlines = [TransitionInline, TriggerAttemptInline]
    exclude = ["detail", "kind", "downstream"]
    readonly_fields = [
        "status_badge",
        "detail_shown",
        "route",
        "downstream_shown",
        "idempotency_record",
        "log_entry",
    ]
    # The page shows the status as the list does: a badge (docs/console.md).
    status_badges = {"status": "status_badge"}
    list_display_links = ["public_id"]
    # A job's URL in the API needs a client's token: no "View on site" to a 401.
    view_on_site = False

    def get_queryset(self, request):
        return text_head_annotate(super().get_queryset(request), field="detail")

    def get_search_results(self, request, queryset, search_term):
        """Also by what the trigger started: a run's or a GitHub deployment's id finds its
        job (through the partial index on the downstream's id)."""
        found, duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if term:
            found = found | queryset.alias(downstream_id=KT("downstream__id")).filter(
                downstream__isnull=False, downstream_id=term
            )
        return found, duplicates

    @admin.display(description="idempotency record")
    def idempotency_record(self, obj):
        """The record of the Idempotency-Key that created the job, with its replays and
        conflicts."""
        record = (
            IdempotencyRecord.objects.filter(
                client_id=obj.client_id,
                operation_type=OPERATION_TYPES[obj.kind],
                resource_id=obj.public_id,
            )
            .order_by("-created_at")
            .only("pk", "key", "replay_count", "conflict_count")
            .first()
        )
        if record is None:
            return "-"
        url = reverse("admin:idempotency_idempotencyrecord_change", args=[record.pk])
        return format_html(
            '<a href="{}">{}</a> ({} replays, {} conflicts)',
            url,
            record.key,
            record.replay_count,
            record.conflict_count,
        )

    @admin.display(description="route")
    def route(self, obj):
        """Where the claim sent the job: its deploy target, with the API clients that target
        serves, or DEPLOY_EXECUTOR."""
        if obj.executor_started_at is None:
            return "not routed yet: the worker that claims the job chooses its target"
        if obj.target_id is None:
            return f"DEPLOY_EXECUTOR ({obj.executor or '-'}): no target of its client matched"
        target = obj.target
        names = sorted(client.name for client in target.clients.all())
        return format_html(
            '<a href="{}">{}</a> ({}; serves {})',
            reverse("admin:deployments_deploytarget_change", args=[target.pk]),
            target.name,
            obj.executor,
            ", ".join(names) if names else "every client",
        )

    @admin.display(description="started downstream")
    def downstream_shown(self, obj):
        """What the trigger started: the GitHub deployment or run, the receiver's own id,
        with its link."""
        return downstream_display(obj.downstream)

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj):
        return status_badge(obj.status)

    @admin.display(description="commit", ordering="commit_sha")
    def commit_short(self, obj):
        return format_html(
            '<code title="{}">{}</code>', obj.commit_sha, obj.commit_sha[:12]
        )

    @admin.display(description="created", ordering="created_at")
    def created(self, obj):
        return time_display(obj.created_at)

    @admin.display(description="detail")
    def detail_shown(self, obj):
        return text_head(obj, field="detail")


@admin.register(Deployment)
class DeploymentAdmin(EvidenceAdminMixin, JobAdmin):
    evidence_subject = "deployment"
    readonly_fields = [*JobAdmin.readonly_fields, "evidence"]
    list_display = [
        "status_badge",
        "public_id",
        "repository",
        "environment",
        "commit_short",
        "client",
        "created",
        "log_entry",
    ]
    # A deployment's page shows no build field.
    exclude = [*JobAdmin.exclude, "ref"]


@admin.register(Build)
class BuildAdmin(JobAdmin):
    # A build's page shows no deployment field.
    exclude = [
        *JobAdmin.exclude,
        "environment",
        "last_github_status_id",
        "github_deployment_id",
        "github_commit_sha",
    ]
    list_display = [
        "status_badge",
        "public_id",
        "repository",
        "ref",
        "commit_short",
        "client",
        "created",
        "log_entry",
    ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # A build's page before migration 0009 was at its id in the builds' own table,
        # which it keeps as ``ledger_id``: that address leads to its page now. No build's
        # id is another's old id (docs/subsystems/executors.md, "Migration 0009: one job
        # table").
        if object_id.isdigit() and not Build.objects.filter(pk=object_id).exists():
            moved = (
                Build.objects.filter(ledger_id=int(object_id))
                .values_list("pk", flat=True)
                .first()
            )
            if moved is not None:
                return redirect(reverse("admin:deployments_build_change", args=[moved]))
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(StatusSync)
class StatusSyncAdmin(
    StatusBadgesMixin, ReadOnlyAdminMixin, LogEntryAdminMixin, admin.ModelAdmin
):
    list_display = [
        "public_id",
        "job",
        "status_reported",
        "applied",
        "status_resulting",
        "reported_at",
        "client",
        "log_entry",
    ]
    readonly_fields = ["status_reported", "status_resulting", "log_entry"]
    status_badges = {
        "status": "status_reported",
        "resulting_status": "status_resulting",
    }
    list_filter = ["applied", ("reported_at", DateRangeFilter)]
    list_select_related = ["client", "job"]
    search_fields = ["=public_id"]
    raw_id_fields = ["job"]

    @admin.display(description="status", ordering="status")
    def status_reported(self, obj):
        return status_badge(obj.status)

    @admin.display(description="resulting status", ordering="resulting_status")
    def status_resulting(self, obj):
        return status_badge(obj.resulting_status) if obj.resulting_status else "-"
