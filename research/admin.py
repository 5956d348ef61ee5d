"""Read-only audit views of research documents and their revisions."""

from django.contrib import admin

from core.admin_base import (
    EvidenceAdminMixin,
    LogEntryAdminMixin,
    ReadOnlyAdminMixin,
    ReadOnlyInlineMixin,
)

from .models import Citation, DocumentRevision, ResearchDocument


class CitationInline(ReadOnlyInlineMixin, admin.TabularInline):
    model = Citation
    fields = ("position", "text", "reference_url")
    readonly_fields = fields


class RevisionInline(LogEntryAdminMixin, ReadOnlyInlineMixin, admin.TabularInline):
    model = DocumentRevision
    fields = (
        "kind",
        "source_version",
        "event_id",
        "content_hash",
        "applied_at",
        "log_entry",
    )
    readonly_fields = fields
    ordering = ("id",)
    show_change_link = True


@admin.register(ResearchDocument)
class ResearchDocumentAdmin(ReadOnlyAdminMixin, EvidenceAdminMixin, admin.ModelAdmin):
    evidence_subject = "research_document"
    readonly_fields = ("evidence",)
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
class DocumentRevisionAdmin(ReadOnlyAdminMixin, LogEntryAdminMixin, admin.ModelAdmin):
    list_display = (
        "document",
        "kind",
        "source_version",
        "event_id",
        "content_hash",
        "applied_at",
        "log_entry",
    )
    readonly_fields = ("log_entry",)
    list_filter = ("kind",)
    list_select_related = ("document",)
    search_fields = ("=event_id", "=document__entity_id")
    raw_id_fields = ("document", "inbox_event")
