"""Read-only audit views of research documents and their revisions: a document names its
state in words, its revisions and the events it ignored link to the inbox events' pages."""

from typing import cast

from django.contrib import admin
from django.db.models import Model
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from core.admin.evidence import EvidenceAdminMixin, LogEntryAdminMixin
from core.admin.mixins import ReadOnlyAdminMixin, ReadOnlyInlineMixin
from core.admin.status import status_badge, status_words, status_words_register
from core.times import time_display

from .models import Citation, DocumentRevision, ResearchDocument

# The inbox's statuses of an event the ordering rule did not apply (the exact status strings
# of the API, docs/http-api.md): research names no webhooks module, it reads the inbox rows
# through the relation its revisions declare.
IGNORED_STATUSES = ("ignored_out_of_order", "ignored_duplicate_version")
IGNORED_SHOWN_MAX = 50

# The words and tone of a document's state, on every page of the console (docs/console.md,
# "One wording").
status_words_register({"live": ("Live", "ok"), "deleted": ("Deleted", "ignored")})


def inbox_event_link(pk: int | None, text: str) -> str:
    if pk is None:
        return text or "-"
    url = reverse("admin:webhooks_inboxevent_change", args=[pk])
    return format_html('<a href="{}">{}</a>', url, text or f"#{pk}")


def hash_short(value: str) -> str:
    """A long hash as its first characters, the whole of it in the tooltip (a table of
    revisions fits the page; the revision's page shows it whole)."""
    if len(value) <= 23:
        return value or "-"
    return format_html('<code title="{}">{}&hellip;</code>', value, value[:22])


def time_cell(value) -> str:
    return format_html(
        '<span style="white-space: nowrap">{}</span>', time_display(value)
    )


class StateFilter(admin.SimpleListFilter):
    """Live or deleted documents, in words (the parameter is the one the admin's boolean
    filter used, so that links to it keep working)."""

    title = "state"
    parameter_name = "is_deleted__exact"

    def lookups(self, request, model_admin):
        return [("0", status_words("live")), ("1", status_words("deleted"))]

    def queryset(self, request, queryset):
        if self.value() in ("0", "1"):
            return queryset.filter(is_deleted=self.value() == "1")
        return queryset


class CitationInline(ReadOnlyInlineMixin, admin.TabularInline):
    model = Citation
    fields = ("position", "text", "reference_url")
    readonly_fields = fields


class RevisionInline(LogEntryAdminMixin, ReadOnlyInlineMixin, admin.TabularInline):
    model = DocumentRevision
    fields = (
        "kind",
        "source_version",
        "event",
        "content",
        "applied",
        "log_entry",
    )
    readonly_fields = fields
    ordering = ("id",)
    show_change_link = True

    @admin.display(description="content hash")
    def content(self, obj):
        return hash_short(obj.content_hash)

    @admin.display(description="event")
    def event(self, obj):
        return inbox_event_link(obj.inbox_event_id, obj.event_id)

    @admin.display(description="applied at")
    def applied(self, obj):
        return time_cell(obj.applied_at)


@admin.register(ResearchDocument)
class ResearchDocumentAdmin(ReadOnlyAdminMixin, EvidenceAdminMixin, admin.ModelAdmin):
    evidence_subject = "research_document"
    fields = (
        "entity_id",
        "entity_type",
        "title",
        "state",
        "current_source_version",
        "last_event",
        "last_occurred",
        "source_url",
        "source_content_hash",
        "published",
        "summary",
        "authors",
        "deleted",
        "created",
        "updated",
        "story_events",
        "ignored_events",
        "evidence",
    )
    readonly_fields = fields
    list_display = (
        "entity_id",
        "title",
        "current_source_version",
        "state",
        "last_event_id",
        "updated",
    )
    list_filter = (StateFilter,)
    search_fields = ("=entity_id", "=last_event_id", "title")
    inlines = (CitationInline, RevisionInline)

    @admin.display(description="state", ordering="is_deleted")
    def state(self, obj):
        return status_badge("deleted" if obj.is_deleted else "live")

    @admin.display(description="last event")
    def last_event(self, obj):
        revision = (
            obj.revisions.filter(event_id=obj.last_event_id)
            .order_by("-pk")
            .values_list("inbox_event_id", flat=True)
            .first()
        )
        return inbox_event_link(revision, obj.last_event_id)

    @admin.display(description="last occurred at")
    def last_occurred(self, obj):
        return time_display(obj.last_occurred_at)

    @admin.display(description="published at")
    def published(self, obj):
        return time_display(obj.published_at)

    @admin.display(description="deleted at")
    def deleted(self, obj):
        return time_display(obj.deleted_at)

    @admin.display(description="created at")
    def created(self, obj):
        return time_display(obj.created_at)

    @admin.display(description="updated at", ordering="updated_at")
    def updated(self, obj):
        return time_display(obj.updated_at)

    @admin.display(description="events it ignored")
    def ignored_events(self, obj):
        """The events of this document that the ordering rule did not apply (older or
        repeated versions), newest first, with the inbox's note of why."""
        inbox = cast(
            type[Model], DocumentRevision._meta.get_field("inbox_event").related_model
        )
        rows = list(
            inbox._default_manager.filter(
                entity_id=obj.entity_id, processing_status__in=IGNORED_STATUSES
            )
            .order_by("-received_at", "-pk")
            .values_list(
                "pk",
                "event_id",
                "processing_status",
                "source_version",
                "received_at",
                "error_message",
            )[: IGNORED_SHOWN_MAX + 1]
        )
        if not rows:
            return "none"
        items = format_html_join(
            "",
            '<li class="ignored-event">{} v{} {} received {}: {}</li>',
            (
                (
                    inbox_event_link(pk, event_id),
                    version if version is not None else "-",
                    status_badge(status),
                    time_display(received),
                    note or "-",
                )
                for pk, event_id, status, version, received, note in rows[
                    :IGNORED_SHOWN_MAX
                ]
            ),
        )
        more = (
            format_html(
                "<p>Only the latest {} are shown; the inbox list has the rest.</p>",
                IGNORED_SHOWN_MAX,
            )
            if len(rows) > IGNORED_SHOWN_MAX
            else ""
        )
        return format_html(
            '<ul id="ignored-events" style="margin: 0; padding-left: 1.2em">{}</ul>{}',
            items,
            more,
        )


@admin.register(DocumentRevision)
class DocumentRevisionAdmin(ReadOnlyAdminMixin, LogEntryAdminMixin, admin.ModelAdmin):
    list_display = (
        "title",
        "kind",
        "event",
        "content",
        "applied",
        "log_entry",
    )
    fields = (
        "document",
        "kind",
        "source_version",
        "event",
        "occurred",
        "content_hash",
        "applied",
        "snapshot",
        "log_entry",
    )
    readonly_fields = fields
    list_filter = ("kind",)
    list_select_related = ("document",)
    search_fields = ("=event_id", "=document__entity_id")

    @admin.display(description="revision")
    def title(self, obj):
        return str(obj)

    @admin.display(description="event")
    def event(self, obj):
        return inbox_event_link(obj.inbox_event_id, obj.event_id)

    @admin.display(description="occurred at")
    def occurred(self, obj):
        return time_display(obj.occurred_at)

    @admin.display(description="applied at", ordering="applied_at")
    def applied(self, obj):
        return time_cell(obj.applied_at)

    @admin.display(description="content hash")
    def content(self, obj):
        return hash_short(obj.content_hash)
