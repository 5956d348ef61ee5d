from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.db.models import Q
from django.http import HttpResponse
from django.urls import NoReverseMatch, reverse
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from core.actors import Actor
from core.admin.actions import ReasonForm, confirm_with_reason
from core.admin.evidence import LogEntryAdminMixin
from core.admin.filters import DateRangeFilter, StatusFilter
from core.admin.mixins import ReadOnlyAdminMixin
from core.admin.pagination import BoundedCountPaginator
from core.admin.render import json_block
from core.admin.status import status_badge, status_words
from core.errors import ServiceError
from core.selectors import COUNT_CAP
from core.times import time_display
from trail.models import OperatorAction, operator_action_words

from ..bulk_replay import (
    ACTIVE_STATES,
    bulk_replay_job_cancel,
    bulk_replay_job_controls,
    bulk_replay_job_create,
    bulk_replay_job_resume,
    bulk_replay_job_start,
    bulk_replay_rate_parse,
    bulk_replay_since_check,
)
from ..models import (
    BULK_REPLAY_RATE_MAX,
    BULK_REPLAY_RATE_MIN,
    REPLAYABLE_STATUSES,
    BulkReplayJob,
    ProcessingStatus,
)
from ..pacing import RATE_PROMISE
from ..replay import replay_queryset_build
from ..selectors import (
    bulk_replay_job_outcomes,
    inbox_events_by_pks,
    inbox_events_replay_repeats,
    operator_actions_on_events_q,
)

# The list counts the outcomes of jobs up to this size; a bigger job's are on its page.
LIST_OUTCOMES_MAX = 1000
# A job's page lists this many of its operator actions (its chunks' among them).
TRAIL_SHOWN_MAX = 50

# A replayed event's status now that says it failed again, or that it is still on its way.
_AGAIN = {ProcessingStatus.DEAD_LETTERED, ProcessingStatus.FAILED}
_ON_ITS_WAY = {ProcessingStatus.RECEIVED, ProcessingStatus.PROCESSING}


def bulk_replay_job_completion(
    counts: dict[str, int] | None, *, replayed: int
) -> tuple[str, str]:
    """A completed job's badge, its words and tone: what became of the events it replayed
    (``Completed: 0 processed, 1 dead-lettered again``). Green only when some were
    processed and none failed again or is still on its way; red when none was processed
    and some failed again; amber when some were processed and some failed again; blue while
    some are on their way; grey when none needed replaying or every one was ignored."""
    if counts is None:
        return f"Completed: {replayed} replayed (outcomes on the job's page)", "neutral"
    if not replayed or not counts:
        return "Completed: nothing replayed", "ignored"
    again = sum(n for status, n in counts.items() if status in _AGAIN)
    on_its_way = sum(n for status, n in counts.items() if status in _ON_ITS_WAY)
    processed = counts.get(ProcessingStatus.PROCESSED, 0)
    order = {status: i for i, status in enumerate(ProcessingStatus.values)}
    parts = [f"{processed} processed"] + [
        f"{n} {OUTCOME_WORDS.get(status, status_words(status).lower())}"
        for status, n in sorted(counts.items(), key=lambda kv: order.get(kv[0], 99))
        if status != ProcessingStatus.PROCESSED and n
    ]
    words = "Completed: " + ", ".join(parts)
    if again and not processed:
        return words, "error"
    if again:
        return words, "warning"
    if on_its_way:
        return words, "running"
    if not processed:
        return words, "ignored"  # every one ignored by its ordering rule
    return words, "ok"


# What a replayed event's status says of the replay.
OUTCOME_WORDS = {
    "processed": "processed",
    "dead_lettered": "dead-lettered again",
    "failed": "failed again, retrying",
    "received": "waiting",
    "processing": "processing",
}


def _link(url_name: str, pk: Any, text: str) -> str:
    """A link to a record's admin page, or its text when there is none to link to."""
    if not isinstance(pk, int):
        return text
    try:
        return format_html('<a href="{}">{}</a>', reverse(url_name, args=[pk]), text)
    except NoReverseMatch:
        return text


def operator_action_on(action: OperatorAction) -> str:
    """What the action was on, from its record: the source, deploy target, API client or
    bulk replay job it names (each a link), the events it named or the source's events it
    held or released, the evidence it marked. Escaped."""
    details = action.details if isinstance(action.details, dict) else {}
    parts: list[str] = []
    if details.get("source"):
        parts.append(
            format_html(
                "source {}",
                _link(
                    "admin:webhooks_webhooksource_change",
                    details.get("source_id"),
                    str(details["source"]),
                ),
            )
        )
    if details.get("target"):
        parts.append(
            format_html(
                "deploy target {}",
                _link(
                    "admin:deployments_deploytarget_change",
                    details.get("target_id"),
                    str(details["target"]),
                ),
            )
        )
    if details.get("client"):
        parts.append(
            format_html(
                "API client {}",
                _link(
                    "admin:core_apiclient_change",
                    details.get("client_id"),
                    str(details["client"]),
                ),
            )
        )
    if action.bulk_job_id is not None:
        parts.append(
            _link(
                "admin:webhooks_bulkreplayjob_change",
                action.bulk_job_id,
                f"bulk replay job #{action.bulk_job_id}",
            )
        )
    events = action.events_words
    if events and action.event_ids and len(action.event_ids) == 1:
        [pk] = action.event_ids
        events = _link("admin:webhooks_inboxevent_change", pk, f"event #{pk}")
    if events:
        parts.append(events)
    mismatches = details.get("mismatch_ids")
    if isinstance(mismatches, list) and mismatches:
        n = len(mismatches)
        parts.append(f"{n} fingerprint mismatch{'' if n == 1 else 'es'}")
    if not parts and details.get("older_than"):
        parts.append(
            format_html("records older than {}", _detail_value(details["older_than"]))
        )
    if not parts:
        return "-"
    return format_html_join(", ", "{}", ((part,) for part in parts))


# The details' keys as the console names them; any other key is shown as written.
DETAIL_LABELS = {
    "processed": "replayed by then",
    "total": "events to replay",
    "run": "run",
    "rate": "rate",
    "rate_changed": "rate changed",
    "state_before": "state before",
    "held_events": "events waiting",
    "held_events_capped": "more than counted",
    "drain_interrupted": "drain interrupted",
    "grace_seconds": "grace period (s)",
    "older_than": "older than",
    "purged_at": "purged at",
    "paused_at": "paused at",
    "paused_by": "paused by",
    "pause_reason": "why paused",
    "client_before": "API client before",
    "client_after": "API client after",
    "token_prefix": "token prefix",
    "test_id": "test",
    "url": "URL",
    "url_query": "URL query (fingerprint)",
}


def _detail_label(key: str) -> str:
    return DETAIL_LABELS.get(key, key.replace("_", " "))


def _detail_value(value: Any, *, key: str = "") -> str:
    """One value of an action's details in the console's words: a status in its words, a
    time to the second with its zone, a rate with its unit, a float to three decimals."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key in ("status", "state_before") and isinstance(value, str):
        return status_words(value)
    if key == "rate" and isinstance(value, int | float):
        return f"{value:g} events/s"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".")
    if isinstance(value, str):
        moment = parse_datetime(value) if "T" in value else None
        return time_display(moment) if moment is not None else value
    if isinstance(value, list):
        shown = ", ".join(_detail_value(item) for item in value[:20])
        return shown + (f" … and {len(value) - 20} more" if len(value) > 20 else "")
    if isinstance(value, dict):
        return "; ".join(
            f"{_detail_label(name)}: {_detail_value(item, key=name)}"
            for name, item in value.items()
        )
    return str(value)


def operator_action_details(action: OperatorAction) -> str:
    """The action's details in words, one row per key (a change's settings as before →
    after), and below them the details exactly as recorded (JSON). Escaped."""
    details = action.details if isinstance(action.details, dict) else {}
    rows: list[tuple[str, str]] = []
    before, after = details.get("before"), details.get("after")
    for key, value in details.items():
        if key in ("before", "after") and isinstance(before, dict):
            continue
        if key == "previous" and isinstance(value, dict):
            counts: dict[str, int] = {}
            for previous in value.values():
                if isinstance(previous, dict):
                    status = str(previous.get("status", ""))
                    counts[status] = counts.get(status, 0) + 1
            shown = ", ".join(
                f"{n} {status_words(status)}" for status, n in sorted(counts.items())
            )
            rows.append(("status before the replay", shown or "-"))
            continue
        rows.append((_detail_label(key), _detail_value(value, key=key)))
    if isinstance(before, dict) and isinstance(after, dict):
        for key in [*after, *(key for key in before if key not in after)]:
            old, new = before.get(key), after.get(key)
            if before and old == new:
                continue
            text = (
                _detail_value(new, key=key)
                if not before
                else f"{_detail_value(old, key=key)} → {_detail_value(new, key=key)}"
            )
            rows.append((_detail_label(key), text))
    table = format_html_join("", '<tr><th scope="row">{}</th><td>{}</td></tr>', rows)
    return format_html(
        '<table class="action-details">{}</table>'
        "<details><summary>As recorded (JSON)</summary>{}</details>",
        table,
        json_block(action.details),
    )


class ActionFilter(admin.ChoicesFieldListFilter):
    """The actions' filter, in the words the console shows for them."""

    def choices(self, changelist):
        values = iter(str(v) for v, _ in self.field.flatchoices if v is not None)
        for i, choice in enumerate(super().choices(changelist)):
            value = next(values, None) if i else None
            yield (
                {**choice, "display": operator_action_words(value)} if value else choice
            )


class ActionBulkJobFilter(admin.SimpleListFilter):
    """The actions of one bulk replay job (``?bulk_job=N``, the link of the job's page);
    shown only while it is applied."""

    title = "bulk replay job"
    parameter_name = "bulk_job"

    def lookups(self, request, model_admin):
        value = self.value()
        return [(value, f"#{value}")] if value and value.isdigit() else []

    def queryset(self, request, queryset):
        value = self.value()
        if value and value.isdigit():
            return queryset.filter(bulk_job_id=int(value))
        return queryset


@admin.register(OperatorAction)
class OperatorActionAdmin(ReadOnlyAdminMixin, LogEntryAdminMixin, admin.ModelAdmin):
    list_display = (
        "created",
        "action_shown",
        "actor_name",
        "on",
        "reason_summary",
        "log_entry",
    )
    list_filter = (
        ("action", ActionFilter),
        ("created_at", DateRangeFilter),
        ActionBulkJobFilter,
    )
    list_select_related = ("bulk_job",)
    search_fields = ("actor_name",)
    search_help_text = "An actor's name, or the start of an event id the action was on."
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")
    fields = (
        "created_at",
        "action_shown",
        "actor_name",
        "reason",
        "on",
        "events",
        "skipped_count",
        "bulk_job",
        "details_shown",
        "log_entry",
    )
    readonly_fields = fields

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        wanted = Q(actor_name__icontains=term)
        on_events = operator_actions_on_events_q(term=term)
        if on_events is not None:
            wanted |= on_events
        return queryset.filter(wanted), False

    @admin.display(description="at", ordering="created_at")
    def created(self, obj):
        return time_display(obj.created_at)

    @admin.display(description="action", ordering="action")
    def action_shown(self, obj):
        return obj.action_words

    @admin.display(description="on")
    def on(self, obj):
        return operator_action_on(obj)

    @admin.display(description="details")
    def details_shown(self, obj):
        return operator_action_details(obj)

    @admin.display(description="reason")
    def reason_summary(self, obj):
        return obj.reason if len(obj.reason) <= 60 else obj.reason[:59] + "…"

    @admin.display(description="events")
    def events(self, obj):
        ids = [int(pk) for pk in obj.event_ids[:200]]
        rows = inbox_events_by_pks(pks=ids)
        links = format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}:{}</a>',
            (
                (
                    reverse("admin:webhooks_inboxevent_change", args=[row.pk]),
                    row.source.slug,
                    row.event_id,
                )
                for row in rows
            ),
        )
        more = len(obj.event_ids) - len(ids)
        if not ids:
            return obj.events_words or "-"
        return format_html(
            "{}:<br>{}{}",
            obj.events_words,
            links,
            f" … and {more} more" if more > 0 else "",
        )


def _rate_clean(value):
    try:
        return bulk_replay_rate_parse(value)
    except ServiceError as exc:
        raise forms.ValidationError(str(exc)) from None


class BulkReplayJobForm(forms.ModelForm):
    event_ids_text = forms.CharField(
        label="Event ids",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Optional: only these producer event ids, one per line or space-separated.",
    )

    class Meta:
        model = BulkReplayJob
        fields = ("source", "status", "since", "rate", "reason")
        help_texts = {
            "rate": (
                f"Optional: {RATE_PROMISE} ({BULK_REPLAY_RATE_MIN:g} to "
                f"{BULK_REPLAY_RATE_MAX:g}). Empty: as fast as the workers go, a "
                "document's events still one after the other."
            )
        }

    repeats_confirmed = forms.BooleanField(
        label="Replay rejected events too",
        required=False,
        help_text=(
            "Events dead-lettered because their data was rejected meet the same rejection "
            "again: a replay sends the same bytes to the same handler. When the filter "
            "matches some, the form says how many and asks for this."
        ),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "status" in self.fields:
            # The statuses in the console's words, as everywhere else.
            cast(forms.ChoiceField, self.fields["status"]).choices = [
                (status.value, status_words(status.value))
                for status in REPLAYABLE_STATUSES
            ]

    def clean_rate(self):
        return _rate_clean(self.cleaned_data.get("rate"))

    def clean_since(self):
        try:
            return bulk_replay_since_check(self.cleaned_data.get("since"))
        except ServiceError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self):
        data = super().clean() or {}
        if self.errors:
            return data
        source = data.get("source")
        matching = replay_queryset_build(
            source_slug=source.slug if source is not None else None,
            status=data.get("status") or ProcessingStatus.DEAD_LETTERED,
            since=data.get("since"),
            event_ids=(data.get("event_ids_text") or "").split() or None,
        )
        repeats = inbox_events_replay_repeats(events_queryset=matching)
        if repeats and not data.get("repeats_confirmed"):
            count = f"more than {COUNT_CAP}" if repeats > COUNT_CAP else str(repeats)
            self.add_error(
                "repeats_confirmed",
                f"{count} of the events this job would replay were dead-lettered because "
                "their data was rejected: a replay sends the same bytes, which will be "
                "rejected again unless the handler changed since. Tick “Replay rejected "
                "events too” to replay them anyway, or narrow the filter.",
            )
        return data


class BulkReplayResumeForm(ReasonForm):
    rate = forms.FloatField(
        label="New rate (events/s)",
        required=False,
        help_text=(
            f"Optional: from now on, {RATE_PROMISE} ({BULK_REPLAY_RATE_MIN:g} to "
            f"{BULK_REPLAY_RATE_MAX:g}). Empty: each job keeps its own rate."
        ),
    )

    def clean_rate(self):
        return _rate_clean(self.cleaned_data.get("rate"))


def _rate_text(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.3g}/s"


@admin.register(BulkReplayJob)
class BulkReplayJobAdmin(admin.ModelAdmin):
    """A replay by filter: adding one records its dry-run count (and an optional rate);
    "Start" hands it to the workers; the list shows its progress, its rate (asked and
    measured), when it should end and who created and started it; "Cancel" stops a queued or
    running job after its current chunk; "Resume" takes a failed, cancelled or interrupted
    job on from where it stopped. Starting, cancelling and resuming need the replay
    permission and are operator actions; auditors see every job but none of the three."""

    form = BulkReplayJobForm
    paginator = BoundedCountPaginator
    show_full_result_count = False
    # Who started it, when it finished and the dry-run count are on the job's page.
    list_display = (
        "state_badge",
        "pk",
        "filter_summary",
        "progress",
        "outcomes_summary",
        "rate_summary",
        "ends",
        "people",
        "created",
    )
    list_display_links = ("pk",)
    list_filter = (("state", StatusFilter), ("created_at", DateRangeFilter))
    ordering = ("-created_at", "-id")
    actions = ("start_selected", "cancel_selected", "resume_selected")
    readonly_fields = (
        "filter_summary",
        "reason",
        "dry_run_count",
        "state_summary",
        "progress",
        "outcomes",
        "rate_summary",
        "ends",
        "created_by_name",
        "created_at",
        "started_by_name",
        "started_at",
        "resumed_by_name",
        "run",
        "last_chunk_at",
        "next_chunk_at",
        "lease_expires_at",
        "finished_at",
        "error",
        "trail",
    )

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def get_fields(self, request, obj=None):
        if obj is None:
            return (
                "source",
                "status",
                "since",
                "event_ids_text",
                "rate",
                "reason",
                "repeats_confirmed",
            )
        return self.readonly_fields

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_replay_permission(self, request):
        return request.user.has_perm("webhooks.replay_inboxevent")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """The job's page offers what the list's actions do for it now (Cancel, Resume),
        to operators: each posts the list's action for this one job, which asks for a
        reason."""
        job = self.get_object(request, object_id)
        controls = []
        if job is not None and self.has_replay_permission(request):
            labels = {"cancel": "Cancel this job", "resume": "Resume this job"}
            # Pause is the operator API's (a cancel here stops a job as well).
            controls = [
                (f"{name}_selected", labels[name])
                for name in bulk_replay_job_controls(job=job)
                if name in labels
            ]
        context = {
            **(extra_context or {}),
            "job_controls": controls,
            # The page reloads itself while the job moves (docs/console.md).
            "job_refresh_seconds": 5
            if job is not None
            and job.state in (BulkReplayJob.State.QUEUED, BulkReplayJob.State.RUNNING)
            else None,
        }
        return super().change_view(request, object_id, form_url, context)

    def save_model(self, request, obj, form, change):
        created = bulk_replay_job_create(
            source=form.cleaned_data["source"],
            status=form.cleaned_data["status"],
            since=form.cleaned_data["since"],
            event_ids=form.cleaned_data["event_ids_text"].split(),
            reason=form.cleaned_data["reason"],
            rate=form.cleaned_data["rate"],
            created_by=Actor.of(request.user),
        )
        obj.pk = created.pk
        obj.dry_run_count = created.dry_run_count

    def save_related(self, request, form, formsets, change):
        pass

    def log_addition(self, request, obj, message):
        pass  # the job itself and its operator actions are the record

    def response_add(self, request, obj, post_url_continue=None):
        self.message_user(
            request,
            f"Dry run: {obj.dry_run_count} event(s) match bulk replay #{obj.pk}. "
            "Select it and run “Start selected jobs” to replay them.",
            messages.SUCCESS,
        )
        return super().response_post_save_add(request, obj)

    @admin.display(description="state", ordering="state")
    def state_badge(self, obj):
        return self._state(obj, limit=LIST_OUTCOMES_MAX)

    @admin.display(description="state")
    def state_summary(self, obj):
        """The state; a job that replayed its last row says what became of its events."""
        return self._state(obj)

    def _state(self, obj, *, limit: int | None = None):
        if obj.state != BulkReplayJob.State.SUCCEEDED:
            return status_badge(obj.state)
        words, tone = bulk_replay_job_completion(
            self._outcome_counts(obj, limit=limit), replayed=obj.processed
        )
        return format_html(
            '<span class="badge badge-{}" data-status="{}">{}</span>',
            tone,
            obj.state,
            words,
        )

    def _outcome_counts(self, obj, *, limit: int | None) -> dict[str, int] | None:
        """The job's events by their status now (``bulk_replay_job_outcomes``), read once
        per job and page; None when there are too many to count here."""
        if limit is not None and obj.processed > limit:
            return None
        cached = getattr(obj, "_outcome_counts", None)
        if cached is None:
            cached = bulk_replay_job_outcomes(job_id=obj.pk, replayed=obj.processed)
            obj._outcome_counts = cached
        return cached

    @admin.display(description="created", ordering="created_at")
    def created(self, obj):
        return time_display(obj.created_at)

    @admin.display(description="created / started by")
    def people(self, obj):
        if not obj.started_by_name:
            return obj.created_by_name
        return format_html(
            "{}<br>started by {}", obj.created_by_name, obj.started_by_name
        )

    @admin.display(description="filter")
    def filter_summary(self, obj):
        parts = [status_words(obj.status)]
        parts.append(f"source {obj.source.slug}" if obj.source_id else "every source")
        if obj.since:
            parts.append(f"received since {time_display(obj.since)}")
        if obj.event_ids:
            parts.append(f"{len(obj.event_ids)} event id(s)")
        return ", ".join(parts)

    @admin.display(description="replayed")
    def progress(self, obj):
        total = obj.total or obj.dry_run_count
        percent = round(100 * obj.processed / total) if total else 0
        waiting = len(obj.waiting_event_pks or ())
        return format_html(
            '<progress max="100" value="{}"></progress> {}/{}{}',
            percent,
            obj.processed,
            total,
            f" ({waiting} waiting for an earlier event of their document)"
            if waiting and obj.state in ACTIVE_STATES
            else "",
        )

    def _outcomes(self, obj, *, limit: int | None = None):
        if limit is not None and obj.processed > limit:
            return "on the job's page"
        counts = self._outcome_counts(obj, limit=limit)
        if counts is None:
            return format_html(
                "{} replayed: too many to count here (filter the inbox by "
                '<a href="{}?bulk_job={}">this job</a>)',
                obj.processed,
                reverse("admin:webhooks_inboxevent_changelist"),
                obj.pk,
            )
        if not counts:
            return "nothing replayed yet"
        inbox = reverse("admin:webhooks_inboxevent_changelist")
        order = {status: i for i, status in enumerate(ProcessingStatus.values)}
        parts = format_html_join(
            ", ",
            '<a href="{}?bulk_job={}&amp;processing_status__exact={}">{} {}</a>',
            (
                (
                    inbox,
                    obj.pk,
                    status,
                    n,
                    OUTCOME_WORDS.get(status, status_words(status).lower()),
                )
                for status, n in sorted(
                    counts.items(), key=lambda kv: order.get(kv[0], 99)
                )
            ),
        )
        return format_html(
            '<a href="{}?bulk_job={}">{} replayed</a>: {}',
            inbox,
            obj.pk,
            sum(counts.values()),
            parts,
        )

    @admin.display(description="outcomes")
    def outcomes_summary(self, obj):
        return self._outcomes(obj, limit=LIST_OUTCOMES_MAX)

    @admin.display(description="what became of the replayed events")
    def outcomes(self, obj):
        """Each replayed event's status now: processed, dead-lettered again, or still on
        its way; the links list them."""
        return self._outcomes(obj)

    @admin.display(description="rate (measured / asked)")
    def rate_summary(self, obj):
        text = _rate_text(obj.rate_measured())
        return f"{text} / {_rate_text(obj.rate)}" if obj.rate is not None else text

    @admin.display(description="ends (estimated)")
    def ends(self, obj):
        end = obj.finish_estimated()
        if end is None:
            return "-"
        return time_display(end)

    @admin.display(description="operator actions")
    def trail(self, obj):
        """Every operator action of the job, oldest first: who started, cancelled and
        resumed it, when, why and at what rate, and each chunk it replayed (the first
        ``TRAIL_SHOWN_MAX``; the operator actions list, filtered by job, has them all)."""
        actions = list(
            OperatorAction.objects.filter(bulk_job=obj).order_by("created_at", "pk")[
                : TRAIL_SHOWN_MAX + 1
            ]
        )
        if not actions:
            return "-"
        rows = format_html_join(
            "",
            '<li><a href="{}">{}</a> {} by {}: {}</li>',
            (
                (
                    reverse("admin:trail_operatoraction_change", args=[a.pk]),
                    time_display(a.created_at),
                    a.action_words,
                    a.actor_name,
                    self._trail_what(a),
                )
                for a in actions[:TRAIL_SHOWN_MAX]
            ),
        )
        every = format_html(
            '<a href="{}?bulk_job={}">every operator action of this job</a>',
            reverse("admin:trail_operatoraction_changelist"),
            obj.pk,
        )
        more = (
            format_html("The first {} are shown: {}.", TRAIL_SHOWN_MAX, every)
            if len(actions) > TRAIL_SHOWN_MAX
            else format_html("In the operator actions list: {}.", every)
        )
        return format_html(
            '<ul class="job-trail">{}</ul><p class="help">{}</p>', rows, more
        )

    @staticmethod
    def _trail_what(action: OperatorAction) -> str:
        details = action.details if isinstance(action.details, dict) else {}
        if action.action == OperatorAction.Action.BULK_REPLAY:
            skipped = (
                f", {action.skipped_count} skipped" if action.skipped_count else ""
            )
            return f"{action.events_words or 'no event'} replayed{skipped}"
        return format_html(
            "{} (rate {}, {} done)",
            action.reason or "-",
            _rate_text(details.get("rate")),
            details.get("processed", 0),
        )

    @admin.action(permissions=["replay"], description="Start selected jobs")
    def start_selected(self, request, queryset):
        started = 0
        for job in queryset.filter(state=BulkReplayJob.State.COUNTED):
            try:
                bulk_replay_job_start(job=job, started_by=Actor.of(request.user))
                started += 1
            except ServiceError:  # started meanwhile
                continue
        level = messages.SUCCESS if started else messages.WARNING
        self.message_user(request, f"Started {started} bulk replay job(s).", level)

    @admin.action(permissions=["replay"], description="Cancel selected jobs")
    def cancel_selected(self, request, queryset):
        reason = confirm_with_reason(
            self,
            request,
            queryset,
            action="cancel_selected",
            title="Cancel bulk replay jobs",
            intro=(
                "These jobs stop after the chunk they are at; the events they replayed "
                "stay replayed. A cancelled job can be resumed later, from where it stopped."
            ),
            submit_label="Cancel the jobs",
        )
        if isinstance(reason, HttpResponse):
            return reason
        cancelled, refused = 0, 0
        for pk in queryset.values_list("pk", flat=True):
            try:
                bulk_replay_job_cancel(
                    job_id=pk, reason=reason, cancelled_by=Actor.of(request.user)
                )
                cancelled += 1
            except ServiceError:
                refused += 1
        text = f"Cancelled {cancelled} bulk replay job(s)."
        if refused:
            text += (
                f" {refused} not cancellable: only a queued, running or paused job is."
            )
        self.message_user(
            request, text, messages.SUCCESS if cancelled else messages.WARNING
        )
        return None

    @admin.action(permissions=["replay"], description="Resume selected jobs")
    def resume_selected(self, request, queryset):
        data = confirm_with_reason(
            self,
            request,
            queryset,
            action="resume_selected",
            title="Resume bulk replay jobs",
            intro=(
                "These jobs go on from where they stopped, with only the rows past that "
                "point that still match their filter: nothing is replayed twice."
            ),
            submit_label="Resume",
            form_class=BulkReplayResumeForm,
        )
        if isinstance(data, HttpResponse):
            return data
        resumed, refused = 0, 0
        for pk in queryset.values_list("pk", flat=True):
            try:
                bulk_replay_job_resume(
                    job_id=pk,
                    resumed_by=Actor.of(request.user),
                    reason=data["reason"],
                    rate=data["rate"],
                )
                resumed += 1
            except ServiceError:
                refused += 1
        text = f"Resumed {resumed} bulk replay job(s)."
        if refused:
            text += (
                f" {refused} not resumable: only a failed or cancelled job, or one whose "
                "worker stopped renewing its lease, is."
            )
        self.message_user(
            request, text, messages.SUCCESS if resumed else messages.WARNING
        )
