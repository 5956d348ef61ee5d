from __future__ import annotations

from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.db.models import DurationField, ExpressionWrapper, F
from django.http import HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from core.actors import Actor
from core.admin.actions import ReasonForm, confirm_with_reason
from core.admin.evidence import EvidenceAdminMixin, LogEntryAdminMixin
from core.admin.filters import DateRangeFilter, StatusFilter, choice_filter
from core.admin.mixins import (
    LongListAdminMixin,
    ReadOnlyAdminMixin,
    ReadOnlyInlineMixin,
)
from core.admin.render import admin_link, fieldset_fields, json_block
from core.admin.status import status_badge, status_field_badge
from core.errors import ServiceError
from core.models import Constant
from core.selectors import COUNT_CAP
from core.times import duration_display, time_display

from ..errors import ReplayRepeatsUnconfirmed, SelectionTooLarge
from ..models import DeadLetteredEvent, InboxAttempt, InboxEvent, ProcessingStatus
from ..replay import inbox_events_replay, replay_selection_check
from ..selectors import (
    bulk_replay_job_events_q,
    inbox_event_held_reason,
    inbox_event_occurred_at,
    inbox_event_products,
    inbox_event_types,
    inbox_events_attempts_alias,
    inbox_events_attempts_fill,
    inbox_events_newest,
    inbox_events_replay_repeats,
    inbox_events_search,
)
from ..story import REPLAY_ACTIONS, Round, attempt_round, inbox_event_actions
from .event_page import EventPageMixin, attempts_words
from .retention import RetentionPageMixin


def repeats_words(count: int) -> str:
    return f"more than {COUNT_CAP}" if count > COUNT_CAP else str(count)


class ReplayConfirmForm(ReasonForm):
    """The reason of a replay of selected events, and, when some of them were dead-lettered
    for a cause a replay meets again (``REPLAY_REPEATS_CAUSES``), the operator's
    confirmation that they are to be replayed all the same."""

    repeats_confirmed = forms.BooleanField(
        required=False,
        label="Replay them anyway: the rejected ones will be rejected again unless the "
        "handler changed",
    )
    repeats = 0

    @classmethod
    def for_repeats(cls, repeats: int) -> type[ReplayConfirmForm]:
        return type(cls.__name__, (cls,), {"repeats": repeats})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.repeats:
            self.fields["repeats_confirmed"].widget = forms.HiddenInput()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.repeats and not data.get("repeats_confirmed"):
            self.add_error(
                "repeats_confirmed",
                f"{repeats_words(self.repeats)} of the selected events were rejected: "
                "tick this to replay them anyway.",
            )
        return data


class EventTypeFilter(admin.SimpleListFilter):
    """The distinct event types, without ``SELECT DISTINCT`` over the table."""

    title = "type"
    parameter_name = "event_type"

    def lookups(self, request, model_admin):
        return [(name, name) for name in inbox_event_types()]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        # A type among the choices read from the inbox is written into the statements.
        known = {name for name, _ in self.lookup_choices}
        return choice_filter(queryset, "event_type", value, known)


class BulkJobFilter(admin.SimpleListFilter):
    """The events a bulk replay job replayed (``?bulk_job=N``, the links of the job's
    page); shown only while it is applied."""

    title = "bulk replay job"
    parameter_name = "bulk_job"

    def lookups(self, request, model_admin):
        value = self.value()
        return [(value, f"#{value}")] if value and value.isdigit() else []

    def queryset(self, request, queryset):
        value = self.value()
        if value and value.isdigit():
            return queryset.filter(bulk_replay_job_events_q(job_id=int(value)))
        return queryset


class InboxAttemptInline(LogEntryAdminMixin, ReadOnlyInlineMixin, admin.TabularInline):
    model = InboxAttempt
    fields = (
        "number",
        "round",
        "started",
        "finished",
        "outcome_badge",
        "resulting_status_badge",
        "error",
        "worker",
        "log_entry",
    )
    readonly_fields = fields
    ordering = ("started_at", "pk")
    show_change_link = False

    outcome_badge = status_field_badge("outcome")
    resulting_status_badge = status_field_badge("resulting_status")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Each attempt's round, as the event's story told it (``EventPageMixin``); an
        # inline is made per request.
        self.rounds: dict[int, Round] = {}

    @admin.display(description="round")
    def round(self, obj):
        current = self.rounds.get(obj.pk)
        if current is None:
            replays = [
                action
                for action in inbox_event_actions(event=InboxEvent(pk=obj.event_id))
                if action.action in REPLAY_ACTIONS
            ]
            current = self.rounds[obj.pk] = attempt_round(attempt=obj, replays=replays)
        if current.replay is None:
            return format_html("{} (first delivery)", current.number)
        return format_html(
            '{} (<a href="{}">replay by {}</a>)',
            current.number,
            reverse("admin:trail_operatoraction_change", args=[current.replay.pk]),
            current.replay.actor_name,
        )

    @admin.display(description="started at")
    def started(self, obj):
        return time_display(obj.started_at)

    @admin.display(description="finished at")
    def finished(self, obj):
        return time_display(obj.finished_at)


@admin.register(InboxEvent)
class InboxEventAdmin(
    RetentionPageMixin,
    EventPageMixin,
    LongListAdminMixin,
    ReadOnlyAdminMixin,
    LogEntryAdminMixin,
    EvidenceAdminMixin,
    admin.ModelAdmin,
):
    evidence_subject = "inbox_event"
    log_entries_after_rows = True
    change_list_template = "admin/webhooks/inboxevent/change_list.html"
    # What an operator scans a list for; the rest is on the event's page (docs/console.md).
    list_display: tuple[str, ...] = (
        "status",
        "event_id",
        "source",
        "event_type",
        "entity_id",
        "version",
        "attempts_all",
        "received_time",
        "latency",
        "log_entry",
    )
    list_display_links = ("event_id",)
    list_filter: ClassVar[tuple[Any, ...]] = (
        ("processing_status", StatusFilter),
        "source",
        EventTypeFilter,
        ("received_at", DateRangeFilter),
        BulkJobFilter,
    )
    # The source's hold with it: whether a row is held is read without a query per row.
    list_select_related = ("source", "source__hold")
    search_fields = ("event_id", "entity_id")
    search_help_text = (
        "The start of an event id or entity id (evt_doc42 finds evt_doc42_7)."
    )
    date_hierarchy = "received_at"
    ordering = ("-received_at", "-id")
    # The orders the inbox's indexes give (webhooks_inbox_received_idx, _status_idx,
    # _source_idx, _type_idx), either way; any other sorts a list of at most the count's
    # cap (docs/console.md, "Sorting a long list").
    index_orders = (
        ("-received_at",),
        ("processing_status", "-received_at"),
        ("source", "-received_at"),
        ("event_type", "-received_at"),
    )
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
                    "occurred",
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
                    "held",
                    "attempts_summary",
                    "next_attempt",
                    "error_message",
                    "dead_letter_cause",
                    "received",
                    "processed",
                    "processing_latency",
                    "producer_delay",
                    "delivery_count",
                    "last_seen",
                    "produced",
                )
            },
        ),
        ("Raw body", {"fields": ("raw_body_panel",)}),
        (
            "Delivery",
            {
                "fields": (
                    "payload_hash",
                    "content_fingerprint",
                    "body_key",
                    "signature_valid",
                    "secret_fingerprint",
                    "remote_addr",
                    "headers_pretty",
                )
            },
        ),
        ("Verifiable log", {"fields": ("log_entry", "evidence")}),
    )
    # Every field shown is read-only: the detail page is a record, not a form.
    readonly_fields = fieldset_fields(fieldsets)

    def get_queryset(self, request):
        # The raw body is read only on the detail page. ``occurred_at`` is never loaded into
        # the row: an older deployment may have stored a date Python cannot hold, and the
        # page must render anyway. The latency is computed by the database. The attempt
        # counts are read for the page's rows after them (``page_rows``).
        return inbox_events_attempts_alias(
            super()
            .get_queryset(request)
            .defer("raw_body", "headers", "occurred_at")
            .annotate(
                latency_interval=ExpressionWrapper(
                    F("processed_at") - F("received_at"), output_field=DurationField()
                )
            )
        )

    def newest_first(self, request, queryset, *, rows):
        """The whole inbox newest first, read from its newest partitions when they hold
        more than the ``rows`` the page counts (``inbox_events_newest``)."""
        return inbox_events_newest(queryset, rows=rows)

    def page_rows(self, request, rows):
        """The page's rows with their log entries and their attempt counts
        (``inbox_events_attempts_fill``), read for them after them: the rows' statement of
        the whole list then holds no value, and is planned once per connection
        (core/plans.py; docs/scaling.md, "At a year of daily partitions")."""
        return inbox_events_attempts_fill(self.log_entries_fill(rows))

    def get_search_results(self, request, queryset, search_term):
        """Prefix matches on the two indexed ids, not ``icontains`` over a million rows,
        within the received times of the rows found (the days they lie in)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        return inbox_events_search(queryset, term=term), False

    @admin.display(description="status", ordering="processing_status")
    def status(self, obj):
        # The badge's data-status is the exact status string of the API; an event its
        # paused source holds says so beside it (the API's ``held_reason``).
        badge = status_badge(obj.processing_status)
        if inbox_event_held_reason(event=obj):
            return format_html("{} {}", badge, status_badge("held"))
        return badge

    @admin.display(description="attempts (all rounds)", ordering="attempts_total")
    def attempts_all(self, obj):
        """Every attempt of every round, and the rounds (the event's page says the same;
        ``attempts`` is the current round's)."""
        return attempts_words(total=obj.attempts_total, rounds=obj.attempt_rounds)

    @admin.display(description="version", ordering="source_version")
    def version(self, obj):
        return "-" if obj.source_version is None else obj.source_version

    @admin.display(description="received", ordering="received_at")
    def received_time(self, obj):
        return time_display(obj.received_at)

    @admin.display(description="held")
    def held(self, obj):
        """Why the event waits unprocessed, when its source is paused."""
        if not inbox_event_held_reason(event=obj):
            return "-"
        hold = obj.source.current_hold
        reason = f" ({hold.pause_reason})" if hold.pause_reason else ""
        return format_html(
            "held: source paused since {} by {}{}",
            time_display(hold.paused_at),
            hold.paused_by_name or "-",
            reason,
        )

    @admin.display(description="processing time")
    def latency(self, obj):
        """The product's own latency, received to processed; the producer's delay before it
        sent the event (``occurred_at`` to ``received_at``) is not in it."""
        if obj.latency_interval is not None:
            return duration_display(obj.latency_interval.total_seconds())
        return "-"

    @admin.display(description="occurred at")
    def occurred(self, obj):
        value = inbox_event_occurred_at(inbox_event_id=obj.pk)
        if isinstance(value, str):
            return f"{value} (stored by an older version; not a readable date)"
        return time_display(value)

    @admin.display(description="headers")
    def headers_pretty(self, obj):
        return json_block(obj.headers)

    @admin.display(description="produced / evidence")
    def produced(self, obj):
        links = [
            admin_link(product, f"{product._meta.verbose_name}: {product}")
            for product in inbox_event_products(event=obj)
        ]
        for mismatch in obj.mismatches.order_by("pk")[:10]:
            links.append(admin_link(mismatch, f"fingerprint mismatch #{mismatch.pk}"))
        if not links:
            return "-"
        return format_html_join(mark_safe("<br>"), "{}", ((link,) for link in links))


@admin.register(DeadLetteredEvent)
class DeadLetteredEventAdmin(InboxEventAdmin):
    change_list_template = "admin/bounded_change_list.html"
    list_display = (
        "status",
        "event_id",
        "source",
        "event_type",
        "entity_id",
        "attempts_all",
        "error_summary",
        "received_time",
    )
    list_filter = (
        "source",
        EventTypeFilter,
        ("received_at", DateRangeFilter),
        BulkJobFilter,
    )
    actions = ("replay_selected",)

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            # Written into the statements: they are then prepared (``Constant``).
            .filter(processing_status=Constant(ProcessingStatus.DEAD_LETTERED))
        )

    def has_replay_permission(self, request):
        return request.user.has_perm("webhooks.replay_inboxevent")

    def _selection_too_large(self, request, exc: SelectionTooLarge) -> None:
        self.message_user(
            request,
            format_html(
                "More than {} events are selected: nothing was replayed. A replay of "
                "more is a bulk replay, in chunks with its progress shown: "
                '<a href="{}">create a bulk replay job</a> with the same filter (or run '
                "<code>manage.py replay_events</code>).",
                exc.limit,
                reverse("admin:webhooks_bulkreplayjob_add"),
            ),
            messages.ERROR,
        )

    @admin.display(description="last error")
    def error_summary(self, obj):
        text = obj.error_message or ""
        return text if len(text) <= 80 else text[:79] + "…"

    @admin.action(permissions=["replay"], description="Replay selected")
    def replay_selected(self, request, queryset):
        # "Select all" can name millions of rows: above the bound, refused before the
        # operator is asked for a reason.
        try:
            replay_selection_check(events_queryset=queryset)
        except SelectionTooLarge as exc:
            return self._selection_too_large(request, exc)
        repeats = inbox_events_replay_repeats(events_queryset=queryset)
        intro = (
            "These events go back to 'received' with a fresh round of attempts and are "
            "dispatched to the workers. Their attempt history stays."
        )
        if repeats:
            intro += (
                f" {repeats_words(repeats)} of them dead-lettered because their data was "
                "rejected: a replay sends the same bytes to the same handler, which will "
                "reject them again unless it changed since. Tick “Replay them anyway” to "
                "replay them all the same."
            )
        data = confirm_with_reason(
            self,
            request,
            queryset,
            action="replay_selected",
            title="Replay dead-lettered events",
            intro=intro,
            submit_label="Replay anyway" if repeats else "Replay",
            form_class=ReplayConfirmForm.for_repeats(repeats),
        )
        if isinstance(data, HttpResponse):
            return data
        try:
            action = inbox_events_replay(
                events_queryset=queryset,
                actor=Actor.of(request.user),
                reason=data["reason"],
                repeats_confirmed=data["repeats_confirmed"],
            )
        except SelectionTooLarge as exc:
            return self._selection_too_large(request, exc)
        except ReplayRepeatsUnconfirmed as exc:
            self.message_user(request, f"Nothing was replayed: {exc}.", messages.ERROR)
            return None
        except ServiceError:  # nothing to replay
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
