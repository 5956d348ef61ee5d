from django.contrib import admin

from core.admin_base import (
    EvidenceAdminMixin,
    LogEntryAdminMixin,
    ReadOnlyAdminMixin,
    ReadOnlyInlineMixin,
)

from .models import Build, Deployment, JobTransition, StatusSync


class TransitionInline(LogEntryAdminMixin, ReadOnlyInlineMixin, admin.TabularInline):
    model = JobTransition
    fields = ["from_status", "to_status", "at", "actor", "detail", "log_entry"]
    readonly_fields = fields
    ordering = ["at", "id"]


class JobAdmin(ReadOnlyAdminMixin, LogEntryAdminMixin, admin.ModelAdmin):
    list_select_related = ["client"]
    list_filter = ["status"]
    search_fields = ["=public_id", "=idempotency_key", "=commit_sha"]
    date_hierarchy = "created_at"
    inlines = [TransitionInline]
    readonly_fields = ["log_entry"]


@admin.register(Deployment)
class DeploymentAdmin(EvidenceAdminMixin, JobAdmin):
    evidence_subject = "deployment"
    readonly_fields = ["log_entry", "evidence"]
    list_display = [
        "public_id",
        "status",
        "repository",
        "environment",
        "commit_sha",
        "client",
        "created_at",
        "log_entry",
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
        "log_entry",
    ]


@admin.register(StatusSync)
class StatusSyncAdmin(ReadOnlyAdminMixin, LogEntryAdminMixin, admin.ModelAdmin):
    list_display = [
        "public_id",
        "deployment",
        "build",
        "status",
        "applied",
        "resulting_status",
        "reported_at",
        "client",
        "log_entry",
    ]
    readonly_fields = ["log_entry"]
    list_filter = ["applied"]
    list_select_related = ["client", "deployment", "build"]
    search_fields = ["=public_id"]
    raw_id_fields = ["deployment", "build"]
