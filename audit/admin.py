from django.contrib import admin
from django.utils.html import format_html

from core.admin.mixins import ReadOnlyAdminMixin

from .models import AuditSeal, LogCheckpoint


@admin.register(AuditSeal)
class AuditSealAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "sequence",
        "created_at",
        "version",
        "row_count",
        "first_event_id",
        "last_event_id",
        "action_count",
        "short_hash",
    )
    ordering = ("-sequence",)
    fields = (
        "sequence",
        "version",
        "created_at",
        "horizon",
        "row_count",
        "first_event_id",
        "last_event_id",
        "rows_hash",
        "action_count",
        "first_action_id",
        "last_action_id",
        "actions_hash",
        "previous_hash",
        "seal_hash",
    )
    readonly_fields = fields

    @admin.display(description="seal hash")
    def short_hash(self, obj):
        return format_html("<code>{}…</code>", obj.seal_hash[:16])


@admin.register(LogCheckpoint)
class LogCheckpointAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The verifiable log's signed checkpoints, newest first (docs/security.md)."""

    list_display = ("tree_size", "created_at", "short_root")
    ordering = ("-tree_size",)
    show_full_result_count = False
    fields = ("tree_size", "created_at", "root", "note")
    readonly_fields = fields

    @admin.display(description="root hash")
    def short_root(self, obj):
        return format_html("<code>{}…</code>", bytes(obj.root_hash).hex()[:16])

    @admin.display(description="root hash (hex)")
    def root(self, obj):
        return bytes(obj.root_hash).hex()
