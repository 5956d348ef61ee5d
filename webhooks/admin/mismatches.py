from __future__ import annotations

from django.contrib import admin, messages
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from core.actors import Actor
from core.admin.actions import confirm_with_reason
from core.admin.diff import side_by_side_diff
from core.admin.evidence import LogEntryAdminMixin
from core.admin.filters import DateRangeFilter
from core.admin.mixins import ReadOnlyAdminMixin
from core.admin.render import admin_link, fieldset_fields, json_block, pretty_body

from ..errors import SelectionTooLarge
from ..investigations import fingerprint_mismatches_mark_investigated
from ..models import FingerprintMismatch
from ..selectors import inbox_event_body


class EventReceivedFilter(DateRangeFilter):
    """The day the event a conflict names was received: its day of the inbox, whose
    retention the evidence holds back while not investigated (docs/console.md, "The
    inbox's days and retention")."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.title = "event received"


@admin.register(FingerprintMismatch)
class FingerprintMismatchAdmin(
    ReadOnlyAdminMixin, LogEntryAdminMixin, admin.ModelAdmin
):
    list_display = (
        "__str__",
        "event_link",
        "received_at",
        "repeat_count",
        "last_seen_at",
        "remote_addr",
        "investigated_at",
        "investigated_by",
        "log_entry",
    )
    list_filter = (
        ("investigated_at", admin.EmptyFieldListFilter),
        "received_at",
        ("event__received_at", EventReceivedFilter),
    )
    list_select_related = ("event", "event__source", "investigated_by")
    search_fields = ("event__event_id",)
    date_hierarchy = "received_at"
    ordering = ("-received_at", "-id")
    actions = ("mark_investigated",)
    # The evidence first: what differs, then where it came from, then what was done about it.
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "event_link",
                    "received_at",
                    "repeat_count",
                    "last_seen_at",
                    "body_purged_at",
                    "log_entry",
                )
            },
        ),
        ("Original (left) and conflicting (right) payload", {"fields": ("diff",)}),
        (
            "Delivery",
            {
                "fields": (
                    "remote_addr",
                    "original_fingerprint",
                    "conflicting_fingerprint",
                    "conflicting_payload_hash",
                    "headers_pretty",
                )
            },
        ),
        (
            "Investigation",
            {"fields": ("investigated_at", "investigated_by", "investigation_note")},
        ),
    )
    readonly_fields = fieldset_fields(fieldsets)

    class Media:
        css = {"all": ["core/admin.css"]}

    def get_queryset(self, request):
        # Of the event, only what the link shows: never its body, nor a date an older
        # deployment may have stored unreadable.
        return (
            super()
            .get_queryset(request)
            .select_related("event__source")
            .defer("raw_body", "event__raw_body", "event__occurred_at")
        )

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(event__event_id=term), False

    def get_urls(self):
        return [
            path(
                "<int:pk>/body/<str:which>/",
                self.admin_site.admin_view(self.body_download),
                name="webhooks_fingerprintmismatch_body",
            ),
            *super().get_urls(),
        ]

    def body_download(self, request, pk: int, which: str):
        """The original or the conflicting body, byte for byte, as a download."""
        mismatch = get_object_or_404(FingerprintMismatch, pk=pk)
        if not self.has_view_permission(request, mismatch):
            raise Http404
        if which == "original":
            body = inbox_event_body(inbox_event_id=mismatch.event_id)
        elif which == "conflicting":
            body = bytes(mismatch.raw_body) if mismatch.raw_body is not None else None
        else:
            raise Http404
        if body is None:
            raise Http404(f"the {which} body was purged")
        response = HttpResponse(body, content_type="application/octet-stream")
        response["Content-Disposition"] = (
            f'attachment; filename="mismatch-{mismatch.pk}-{which}.json"'
        )
        return response

    def has_investigate_permission(self, request):
        return request.user.has_perm("webhooks.investigate_fingerprintmismatch")

    @admin.display(description="event")
    def event_link(self, obj):
        return admin_link(obj.event, f"{obj.event.source.slug}:{obj.event.event_id}")

    @admin.display(description="headers")
    def headers_pretty(self, obj):
        return json_block(obj.headers)

    @admin.display(description="diff")
    def diff(self, obj):
        original = inbox_event_body(inbox_event_id=obj.event_id)
        table, truncated = side_by_side_diff(
            pretty_body(original), pretty_body(obj.raw_body)
        )
        downloads = format_html(
            '<p>Download: <a href="{}">original body</a> · '
            '<a href="{}">conflicting body</a></p>',
            reverse(
                "admin:webhooks_fingerprintmismatch_body", args=[obj.pk, "original"]
            ),
            reverse(
                "admin:webhooks_fingerprintmismatch_body", args=[obj.pk, "conflicting"]
            ),
        )
        note = (
            mark_safe(
                "<p><strong>The diff is cut short; download both bodies to compare "
                "them whole.</strong></p>"
            )
            if truncated
            else ""
        )
        return format_html("{}{}{}", note, table, downloads)

    @admin.action(permissions=["investigate"], description="Mark investigated")
    def mark_investigated(self, request, queryset):
        note = confirm_with_reason(
            self,
            request,
            queryset,
            action="mark_investigated",
            title="Mark fingerprint mismatches investigated",
            intro="The note is kept with each mismatch and in the operator actions.",
            submit_label="Mark investigated",
            label="Note",
        )
        if isinstance(note, HttpResponse):
            return note
        try:
            action = fingerprint_mismatches_mark_investigated(
                mismatches=queryset, actor=Actor.of(request.user), note=note
            )
        except SelectionTooLarge as exc:
            self.message_user(
                request,
                f"Not marked: select at most {exc.limit} mismatches at a time "
                "(narrow the list with a filter).",
                messages.ERROR,
            )
            return None
        self.message_user(
            request,
            f"Marked {action.event_count} mismatch(es) investigated.",
            messages.SUCCESS,
        )
        return None
