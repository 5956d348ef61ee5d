"""Read-only audit views of research documents and their revisions."""

from django.contrib import admin

from .models import Citation, DocumentRevision, ResearchDocument


class ReadOnlyAdmin(admin.ModelAdmin):
    show_full_result_count = False  # no COUNT(*) over millions of rows per page view

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class CitationInline(admin.TabularInline):
    model = Citation
    fields = ("position", "text", "reference_url")
    readonly_fields = fields
    extra = 0

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class RevisionInline(admin.TabularInline):
    model = DocumentRevision
    fields = ("kind", "source_version", "event_id", "content_hash", "applied_at")
    readonly_fields = fields
    ordering = ("id",)
    extra = 0
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(ResearchDocument)
class ResearchDocumentAdmin(ReadOnlyAdmin):
    list_display = (
        "entity_id",
        "title",
        "current_source_version",
        "is_deleted",
        "last_event_id",
        "updated_at",
    )
    list_filter = ("is_deleted",)
    search_fields = ("=entity_id", "=last_event_id", "title")
    inlines = (CitationInline, RevisionInline)


@admin.register(DocumentRevision)
class DocumentRevisionAdmin(ReadOnlyAdmin):
    list_display = (
        "document",
        "kind",
        "source_version",
        "event_id",
        "content_hash",
        "applied_at",
    )
    list_filter = ("kind",)
    list_select_related = ("document",)
    search_fields = ("=event_id", "=document__entity_id")
    raw_id_fields = ("document", "inbox_event")
