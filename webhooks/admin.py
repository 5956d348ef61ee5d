"""The audit console's view of the inbox: events, the dead-letter queue, fingerprint mismatches,
sources and signature failures. Read-only everywhere; the only writes are the replay and
"mark investigated" actions, which call services. No secret is ever shown."""

from __future__ import annotations

import difflib
import json

from django.apps import apps
from django.contrib import admin, messages
from django.db import models
from django.db.models import Count, Q
from django.http import HttpResponse
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from audit.admin_utils import (
    ReadOnlyAdminMixin,
    ReadOnlyInlineMixin,
    SecretRotationForm,
    confirm_with_reason,
)
from audit.models import DeadLetteredEvent
from audit.services import (
    fingerprint_mismatches_mark_investigated,
    webhook_source_rotate_by_operator,
)
from core.errors import ServiceError

from .models import (
    FingerprintMismatch,
    InboxAttempt,
    InboxEvent,
    ProcessingStatus,
    SignatureFailure,
    WebhookSource,
)
from .replay import NothingToReplay, inbox_events_replay

MAX_EVENT_TYPE_CHOICES = 100


def pretty_body(raw: bytes | memoryview | None) -> str:
    """The payload as indented JSON when it parses, else as (replaced) text. Not yet escaped."""
    if raw is None:
        return ""
    data = bytes(raw)
    try:
        return json.dumps(
            json.loads(data), indent=2, sort_keys=True, ensure_ascii=False
        )
    except ValueError:
        return data.decode("utf-8", errors="replace")


def admin_link(obj, text=None) -> str:
    try:
        url = reverse(
            f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk]
        )
    except NoReverseMatch:
        return str(text or obj)
    return format_html('<a href="{}">{}</a>', url, text or obj)


class EventTypeFilter(admin.SimpleListFilter):
    """The distinct event types, read with a loose index scan of ``(event_type, received_at)``
    (one index probe per type) instead of ``SELECT DISTINCT`` over the table."""

    title = "type"
    parameter_name = "event_type"

    def lookups(self, request, model_admin):
        table = InboxEvent._meta.db_table
        sql = f"""
            WITH RECURSIVE types(event_type) AS (
                SELECT MIN(event_type) FROM {table}
                UNION ALL
                SELECT (SELECT e.event_type FROM {table} e
                        WHERE e.event_type > types.event_type
                        ORDER BY e.event_type LIMIT 1)
                FROM types WHERE types.event_type IS NOT NULL
            )
            SELECT event_type FROM types WHERE event_type IS NOT NULL LIMIT %s
        """  # noqa: S608 - the table name is the model's, not input
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(sql, [MAX_EVENT_TYPE_CHOICES])
            return [(row[0], row[0]) for row in cursor.fetchall()]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(event_type=self.value())
        return queryset


class InboxAttemptInline(ReadOnlyInlineMixin, admin.TabularInline):
    model = InboxAttempt
    fields = (
        "number",
        "started_at",
        "finished_at",
        "outcome",
        "resulting_status",
        "error",
        "worker",
    )
    readonly_fields = fields
    ordering = ("started_at", "pk")
    show_change_link = False


def revision_model():
    """The research app's revision model, when it is installed, and its link to the event."""
    try:
        model = apps.get_model("research", "DocumentRevision")
    except LookupError:
        return None, None
    for field in model._meta.get_fields():
        if isinstance(field, models.ForeignKey) and field.related_model is InboxEvent:
            return model, ("fk", field.name)
    names = {f.name for f in model._meta.get_fields()}
    if "event_id" in names:
        return model, ("event_id", "event_id")
    return model, None


@admin.register(InboxEvent)
class InboxEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    change_list_template = "admin/webhooks/bounded_change_list.html"
    list_display = (
        "event_id",
        "status",
        "source",
        "event_type",
        "entity_id",
        "source_version",
        "attempts",
        "delivery_count",
        "received_at",
        "processed_at",
        "latency",
    )
    list_filter = (
        "processing_status",
        "source",
        EventTypeFilter,
        "received_at",
    )
    list_select_related = ("source",)
    search_fields = ("event_id", "entity_id")
    search_help_text = "Exact event id or entity id."
    date_hierarchy = "received_at"
    ordering = ("-received_at", "-id")
    list_per_page = 50
    inlines = (InboxAttemptInline,)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "source",
                    "event_id",
                    "event_type",
                    "entity_type",
                    "entity_id",
                    "source_version",
                    "occurred_at",
                    "tenant_id",
                    "idempotency_key",
                )
            },
        ),
        (
            "Processing",
            {
                "fields": (
                    "status",
                    "attempts",
                    "next_attempt_at",
                    "error_message",
                    "received_at",
                    "processed_at",
                    "latency",
                    "delivery_count",
                    "last_seen_at",
                    "produced",
                )
            },
        ),
        (
            "Delivery",
            {
                "fields": (
                    "payload_hash",
                    "content_fingerprint",
                    "signature_valid",
                    "remote_addr",
                    "headers_pretty",
                    "body_purged_at",
                    "payload",
                )
            },
        ),
    )
    # Every field shown is read-only: the detail page is a record, not a form.
    readonly_fields = tuple(f for _, opts in fieldsets for f in opts["fields"])

    def get_queryset(self, request):
        # The raw body is read only on the detail page.
        return super().get_queryset(request).defer("raw_body", "headers")

    def get_search_results(self, request, queryset, search_term):
        """Exact matches on the indexed columns, not ``icontains`` over a million rows."""
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(Q(event_id=term) | Q(entity_id=term)), False

    @admin.display(description="status", ordering="processing_status")
    def status(self, obj):
        return obj.processing_status  # the exact status string of the API and the SPEC

    @admin.display(description="latency")
    def latency(self, obj):
        if obj.processed_at and obj.occurred_at:
            seconds = (obj.processed_at - obj.occurred_at).total_seconds()
            return f"{seconds:.3f} s"
        return "-"

    @admin.display(description="payload")
    def payload(self, obj):
        if obj.body_purged_at:
            return "(body purged)"
        return format_html(
            '<pre style="white-space: pre-wrap; max-width: 100%">{}</pre>',
            pretty_body(obj.raw_body),
        )

    @admin.display(description="headers")
    def headers_pretty(self, obj):
        return format_html(
            "<pre>{}</pre>", json.dumps(obj.headers or {}, indent=2, sort_keys=True)
        )

    @admin.display(description="produced / evidence")
    def produced(self, obj):
        links = []
        model, link = revision_model()
        if model is not None and link is not None:
            kind, name = link
            revisions = (
                model.objects.filter(**{name: obj})
                if kind == "fk"
                else model.objects.filter(event_id=obj.event_id)
            )
            links.extend(admin_link(rev, f"revision: {rev}") for rev in revisions[:10])
        for mismatch in obj.mismatches.order_by("pk")[:10]:
            links.append(admin_link(mismatch, f"fingerprint mismatch #{mismatch.pk}"))
        if not links:
            return "-"
        return format_html_join(mark_safe("<br>"), "{}", ((link,) for link in links))


@admin.register(DeadLetteredEvent)
class DeadLetteredEventAdmin(InboxEventAdmin):
    list_display = (
        "event_id",
        "status",
        "source",
        "event_type",
        "entity_id",
        "attempts",
        "error_summary",
        "received_at",
    )
    list_filter = ("source", EventTypeFilter, "received_at")
    actions = ("replay_selected",)

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .filter(processing_status=ProcessingStatus.DEAD_LETTERED)
        )

    def has_replay_permission(self, request):
        return request.user.has_perm("webhooks.replay_inboxevent")

    @admin.display(description="last error")
    def error_summary(self, obj):
        text = obj.error_message or ""
        return text if len(text) <= 80 else text[:79] + "…"

    @admin.action(permissions=["replay"], description="Replay selected")
    def replay_selected(self, request, queryset):
        reason = confirm_with_reason(
            self,
            request,
            queryset,
            action="replay_selected",
            title="Replay dead-lettered events",
            intro=(
                "These events go back to 'received' with a fresh round of attempts and are "
                "dispatched to the workers. Their attempt history stays."
            ),
            submit_label="Replay",
        )
        if isinstance(reason, HttpResponse):
            return reason
        try:
            action = inbox_events_replay(
                events_queryset=queryset, actor=request.user, reason=reason
            )
        except NothingToReplay:
            self.message_user(
                request,
                "None of the selected events is dead-lettered.",
                messages.WARNING,
            )
            return None
        message = (
            f"Replayed {action.event_count} event(s); they are back in 'received'."
        )
        if action.skipped_count:
            message += f" {action.skipped_count} skipped (no longer dead-lettered)."
        self.message_user(request, message, messages.SUCCESS)
        return None


@admin.register(FingerprintMismatch)
class FingerprintMismatchAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "pk",
        "event_link",
        "received_at",
        "remote_addr",
        "investigated_at",
        "investigated_by",
    )
    list_filter = (("investigated_at", admin.EmptyFieldListFilter), "received_at")
    list_select_related = ("event", "event__source", "investigated_by")
    search_fields = ("event__event_id",)
    date_hierarchy = "received_at"
    ordering = ("-received_at", "-id")
    actions = ("mark_investigated",)
    fields = (
        "event_link",
        "received_at",
        "remote_addr",
        "original_fingerprint",
        "conflicting_fingerprint",
        "conflicting_payload_hash",
        "headers_pretty",
        "investigated_at",
        "investigated_by",
        "investigation_note",
        "diff",
    )
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).defer("raw_body", "event__raw_body")

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(event__event_id=term), False

    def has_investigate_permission(self, request):
        return request.user.has_perm("webhooks.investigate_fingerprintmismatch")

    @admin.display(description="event")
    def event_link(self, obj):
        return admin_link(obj.event, str(obj.event.event_id))

    @admin.display(description="headers")
    def headers_pretty(self, obj):
        return format_html(
            "<pre>{}</pre>", json.dumps(obj.headers or {}, indent=2, sort_keys=True)
        )

    @admin.display(description="original (left) and conflicting (right) payload")
    def diff(self, obj):
        original = InboxEvent.objects.only("raw_body").get(pk=obj.event_id).raw_body
        table = difflib.HtmlDiff(tabsize=2, wrapcolumn=70).make_table(
            pretty_body(original).splitlines(),
            pretty_body(obj.raw_body).splitlines(),
            fromdesc="original",
            todesc="conflicting",
            context=False,
        )
        # HtmlDiff escapes &, < and > of both texts; quotes stay as text inside cells.
        return mark_safe(table)  # noqa: S308

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
        action = fingerprint_mismatches_mark_investigated(
            mismatches=queryset, actor=request.user, note=note
        )
        self.message_user(
            request,
            f"Marked {action.event_count} mismatch(es) investigated.",
            messages.SUCCESS,
        )
        return None


@admin.register(WebhookSource)
class WebhookSourceAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    # The secrets are never listed, counted only.
    list_display = (
        "slug",
        "scheme",
        "handler",
        "is_enabled",
        "secret_count",
        "created_at",
    )
    list_filter = ("scheme", "handler", "is_enabled")
    search_fields = ("slug",)
    ordering = ("slug",)
    fields = (
        "slug",
        "scheme",
        "handler",
        "timestamp_tolerance_seconds",
        "is_enabled",
        "secret_count",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_secret_count=Count("secrets"))

    @admin.display(description="secrets", ordering="_secret_count")
    def secret_count(self, obj):
        return obj._secret_count

    actions = ["rotate_secret"]

    def has_rotate_secret_permission(self, request):
        return request.user.has_perm("webhooks.rotate_secret")

    @admin.action(description="Rotate secret", permissions=["rotate_secret"])
    def rotate_secret(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(
                request, "Select exactly one source to rotate.", messages.WARNING
            )
            return None
        source = queryset.get()
        data = confirm_with_reason(
            self,
            request,
            queryset,
            action="rotate_secret",
            title=f"Rotate the secret of {source.slug}",
            intro=(
                "The new secret signs from now on; the current ones stay valid for the grace "
                "period. It is stored for verification and never shown again here."
            ),
            submit_label="Rotate",
            form_class=SecretRotationForm,
        )
        if isinstance(data, HttpResponse):
            return data
        try:
            webhook_source_rotate_by_operator(
                source=source,
                secret=data["secret"],
                grace_seconds=data["grace_seconds"],
                actor=request.user,
                reason=data["reason"],
            )
        except ServiceError as exc:
            self.message_user(request, f"Not rotated: {exc}", messages.ERROR)
            return None
        self.message_user(
            request,
            f"Rotated the secret of {source.slug}; the previous ones expire in "
            f"{data['grace_seconds']} s.",
            messages.SUCCESS,
        )
        return None


@admin.register(SignatureFailure)
class SignatureFailureAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("source", "reason", "window_start", "count", "last_remote_addr")
    list_filter = ("reason", "source")
    list_select_related = ("source",)
    ordering = ("-window_start", "-id")
    date_hierarchy = "window_start"
    change_list_template = "admin/webhooks/bounded_change_list.html"
