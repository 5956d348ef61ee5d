from django.contrib import admin
from django.utils.html import format_html

from audit.admin_utils import ReadOnlyAdminMixin, ReadOnlyInlineMixin

from .models import Build, Deployment, IdempotencyRecord, JobTransition, StatusSync
from .selectors import idempotency_stuck_horizon


class TransitionInline(ReadOnlyInlineMixin, admin.TabularInline):
    model = JobTransition
    fields = ["from_status", "to_status", "at", "actor", "detail"]
    readonly_fields = fields
    ordering = ["at", "id"]


class JobAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_select_related = ["client"]
    list_filter = ["status"]
    search_fields = ["=public_id", "=idempotency_key", "=commit_sha"]
    date_hierarchy = "created_at"
    inlines = [TransitionInline]


@admin.register(Deployment)
class DeploymentAdmin(JobAdmin):
    list_display = [
        "public_id",
        "status",
        "repository",
        "environment",
        "commit_sha",
        "client",
        "created_at",
    ]


@admin.register(Build)
class BuildAdmin(JobAdmin):
    list_display = [
        "public_id",
        "status",
        "repository",
        "ref",
        "commit_sha",
        "client",
        "created_at",
    ]


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "key",
        "operation_type",
        "client",
        "status_display",
        "resource_id",
        "created_at",
        "expires_at",
        "expired_at",
    ]
    list_filter = ["status", "operation_type"]
    list_select_related = ["client"]
    search_fields = ["=key", "=resource_id"]
    exclude = ["response_body"]

    @admin.display(description="status", ordering="status")
    def status_display(self, record):
        stuck = (
            record.status == "processing"
            and record.created_at < idempotency_stuck_horizon()
        )
        if stuck:
            return format_html(
                '<strong style="color:#ba2121">{} (stuck)</strong>', record.status
            )
        return record.status

    def get_queryset(self, request):
        return super().get_queryset(request).defer("response_body")


@admin.register(StatusSync)
class StatusSyncAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "public_id",
        "deployment",
        "build",
        "status",
        "applied",
        "resulting_status",
        "reported_at",
        "client",
    ]
    list_filter = ["applied"]
    list_select_related = ["client", "deployment", "build"]
    search_fields = ["=public_id"]
    raw_id_fields = ["deployment", "build"]
