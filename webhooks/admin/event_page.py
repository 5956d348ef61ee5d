"""The inbox event's page as its story (``webhooks.story``): the timeline, "Replay" for
operators, and the raw body as received (a download of the exact bytes, its stored hash
checked against them, the pretty view beside it)."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_POST

from core.actors import Actor
from core.admin.render import admin_link, pretty_body
from core.admin.status import status_words
from core.errors import ServiceError
from core.times import duration_display, time_display
from trail.models import OperatorAction

from ..errors import ReplayRepeatsUnconfirmed
from ..models import (
    REPLAY_REPEATS_CAUSES,
    REPLAYABLE_STATUSES,
    FingerprintMismatch,
    InboxAttempt,
    InboxEvent,
    ProcessingStatus,
    WebhookSecret,
)
from ..replay import inbox_events_replay
from ..selectors import (
    inbox_event_body,
    inbox_event_occurred_at,
    inbox_events_attempts_fill,
    webhook_secret_kind,
)
from ..story import Round, StoryEntry, inbox_event_story

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin
else:
    _ModelAdmin = object

REPLAY_PERMISSION = "webhooks.replay_inboxevent"

KIND_LABELS = {
    "delivery": "delivery",
    "duplicates": "duplicates",
    "conflict": "conflicting copy",
    "action": "operator action",
    "attempt": "attempt",
    "product": "result",
    "no_product": "result",
    "purge": "retention",
}


class EventReplayForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        max_length=2000,
        help_text="Recorded with the operator action; auditors read it.",
    )
    # Shown (and needed) only when the event's cause is one a replay meets again.
    repeats_confirmed = forms.BooleanField(
        required=False,
        label="Replay it anyway: its data will be rejected again unless the handler "
        "changed",
    )


def replay_repeats(event: InboxEvent) -> bool:
    """Whether a replay of ``event`` meets its cause again: the same bytes go to the same
    handler, which rejected them (``REPLAY_REPEATS_CAUSES``)."""
    return (
        event.processing_status == ProcessingStatus.DEAD_LETTERED
        and event.dead_letter_cause in REPLAY_REPEATS_CAUSES
    )


def attempts_words(*, total: int, rounds: int) -> str:
    """An event's attempts in all its rounds: ``2``, or ``3 in 3 rounds`` once a replay
    started another (the inbox list's column and the event's page say the same)."""
    if rounds <= 1:
        return str(total)
    return f"{total} in {rounds} rounds"


def _url(obj: Any) -> str:
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])


def _round_html(round_: Round) -> SafeString:
    """An attempt's round in words: the first delivery's, or the replay that started it."""
    if round_.replay is None:
        return format_html("round {} (the first delivery)", round_.number)
    return format_html(
        'round {}, after <a href="{}">{} by {}</a> at {}',
        round_.number,
        _url(round_.replay),
        "bulk replay" if round_.replay.action == "bulk_replay" else "replay",
        round_.replay.actor_name,
        time_display(round_.replay.created_at),
    )


def _before_replay(action: OperatorAction, event: InboxEvent) -> SafeString:
    """What the replay found: the event's status and attempts of the round it ended."""
    previous = (action.details or {}).get("previous", {}).get(str(event.pk))
    if not isinstance(previous, dict) or "status" not in previous:
        return mark_safe("")
    return format_html(
        " (it was {} after {} attempt(s))",
        status_words(str(previous["status"])),
        previous.get("attempts", "?"),
    )


def _action_html(
    action: OperatorAction, round_: Round | None, event: InboxEvent
) -> SafeString:
    reason = format_html(": “{}”", action.reason) if action.reason else mark_safe("")
    job = (
        format_html(
            ' (<a href="{}">bulk replay job #{}</a>)',
            _url(action.bulk_job),
            action.bulk_job.pk,
        )
        if action.bulk_job is not None
        else mark_safe("")
    )
    what = {
        "replay": "Replayed",
        "bulk_replay": "Replayed in a bulk replay",
        "purge_bodies": "Raw body purged",
        "purge_evidence_bodies": "Conflicting copy's body purged",
        "mark_investigated": "Conflicting copy marked investigated",
    }.get(action.action, action.action_words)
    begins = (
        format_html("; round {} begins{}", round_.number, _before_replay(action, event))
        if round_ is not None
        else mark_safe("")
    )
    return format_html(
        '{} by <a class="story-actor" href="{}">{}</a>{}{}{}',
        what,
        _url(action),
        action.actor_name,
        reason,
        job,
        begins,
    )


def _attempt_html(entry: StoryEntry) -> SafeString:
    attempt = entry.record
    assert isinstance(attempt, InboxAttempt) and entry.round is not None
    # In the words every page uses for a status (docs/console.md).
    outcome = status_words(attempt.outcome)
    if attempt.resulting_status and attempt.resulting_status != attempt.outcome:
        outcome = f"{outcome} → {status_words(attempt.resulting_status)}"
    finished = (
        format_html(", finished {}", time_display(attempt.finished_at))
        if attempt.finished_at
        else mark_safe(", not finished")
    )
    error = (
        format_html(': <span class="story-error">{}</span>', attempt.error[:500])
        if attempt.error
        else mark_safe("")
    )
    worker = format_html(" on {}", attempt.worker) if attempt.worker else mark_safe("")
    return format_html(
        'Attempt {} of {}: <span class="story-outcome">{}</span>{}{}{}',
        attempt.number,
        _round_html(entry.round),
        outcome,
        finished,
        worker,
        error,
    )


def story_entry_html(
    entry: StoryEntry, *, event: InboxEvent, verifier: str = "secret"
) -> SafeString:
    """One entry of the timeline in words, with links to the records it names. Escaped.
    ``verifier``: what the event's ``secret_fingerprint`` names, a secret or a public key."""
    if entry.kind == "delivery":
        if not event.signature_valid:
            signed = mark_safe("signature not verified")
        elif event.secret_fingerprint:
            signed = format_html(
                "signature verified ({} {})", verifier, event.secret_fingerprint
            )
        else:
            signed = mark_safe("signature verified")
        return format_html(
            "Delivered (first delivery) from {}; {}; body SHA-256 {}",
            event.remote_addr or "an unknown address",
            signed,
            event.payload_hash,
        )
    if entry.kind == "duplicates":
        return format_html(
            "{} identical duplicate deliveries (same content, stored once), the last at {}",
            entry.count,
            time_display(entry.last_at),
        )
    if entry.kind == "conflict":
        mismatch = entry.record
        assert isinstance(mismatch, FingerprintMismatch)
        state = (
            format_html("investigated {}", time_display(mismatch.investigated_at))
            if mismatch.investigated_at
            else mark_safe("not investigated")
        )
        return format_html(
            "Conflicting copy delivered (other content under the same event id, kept as "
            "evidence, not applied): {}, the last at {}; "
            '<a class="story-evidence" href="{}">fingerprint mismatch #{}</a> ({})',
            "1 delivery" if entry.count == 1 else f"{entry.count} deliveries",
            time_display(entry.last_at or entry.at),
            _url(mismatch),
            mismatch.pk,
            state,
        )
    if entry.kind == "action":
        assert isinstance(entry.record, OperatorAction)
        return _action_html(entry.record, entry.round, event)
    if entry.kind == "attempt":
        return _attempt_html(entry)
    if entry.kind == "product":
        product = entry.record
        assert product is not None
        return format_html(
            "Made {}: {}",
            product._meta.verbose_name,
            admin_link(product, str(product)),
        )
    if entry.kind == "no_product":
        note = format_html(": {}", entry.note[:500]) if entry.note else mark_safe("")
        round_ = (
            format_html(" (round {})", entry.round.number)
            if entry.round is not None
            else mark_safe("")
        )
        return format_html(
            "Made no change{}: {}{}",
            round_,
            status_words(entry.extra.get("status", "")),
            note,
        )
    if entry.kind == "purge":
        return mark_safe(
            "Raw body purged by retention (its hash and the metadata stay)"
        )
    raise ValueError(f"no story entry kind {entry.kind!r}")


# How much of a body each column shows: a page of a few hundred kilobytes, whatever the body;
# the download and the hash check take all of it.
BODY_SHOWN_MAX = 262_144


def _head(text: str) -> str:
    if len(text) <= BODY_SHOWN_MAX:
        return text
    return (
        text[:BODY_SHOWN_MAX]
        + f"\n… ({len(text):,} characters; the first {BODY_SHOWN_MAX:,} are shown, "
        "the download has all of it)"
    )


def _download_name(event: InboxEvent) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", event.event_id)[:100] or str(event.pk)
    return f"body-{event.pk}-{safe}.json"


class EventPageMixin(_ModelAdmin):
    """The story, the replay and the raw body of an inbox event's admin page."""

    change_form_template = "admin/webhooks/inboxevent/change_form.html"

    def get_urls(self) -> list[URLPattern]:
        opts = self.model._meta
        prefix = f"{opts.app_label}_{opts.model_name}"
        return [
            path(
                "<path:object_id>/body/",
                self.admin_site.admin_view(self.body_view),
                name=f"{prefix}_body",
            ),
            path(
                "<path:object_id>/replay/",
                self.admin_site.admin_view(require_POST(self.replay_view)),
                name=f"{prefix}_replay",
            ),
            *super().get_urls(),
        ]

    def _event_or_404(self, request: HttpRequest, object_id: str) -> InboxEvent:
        obj = self.get_object(request, object_id)
        if obj is None:
            raise Http404
        if not self.has_view_permission(request, obj):
            raise PermissionDenied
        return obj

    def body_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The raw body as stored, byte for byte, as a download (410 once purged)."""
        event = self._event_or_404(request, object_id)
        body = inbox_event_body(inbox_event_id=event.pk)
        if body is None:
            return HttpResponse(
                f"The raw body of this event was purged by retention at "
                f"{time_display(event.body_purged_at)}.\n",
                status=410,
                content_type="text/plain; charset=utf-8",
            )
        response = HttpResponse(body, content_type="application/json")
        response["Content-Disposition"] = (
            f'attachment; filename="{_download_name(event)}"'
        )
        response["X-Content-Type-Options"] = "nosniff"
        return response

    def replay_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Replays this one event through the service the dead-letter queue's action uses."""
        event = self._event_or_404(request, object_id)
        if not request.user.has_perm(REPLAY_PERMISSION):
            raise PermissionDenied
        page = reverse("admin:webhooks_inboxevent_change", args=[event.pk])
        form = EventReplayForm(request.POST)
        if not form.is_valid():
            self.message_user(
                request,
                "Nothing was replayed: a replay needs a reason.",
                messages.ERROR,
            )
            return HttpResponseRedirect(page)
        try:
            action = inbox_events_replay(
                events_queryset=InboxEvent.objects.filter(pk=event.pk),
                actor=Actor.of(request.user),  # type: ignore[arg-type]  # a staff user
                reason=form.cleaned_data["reason"],
                repeats_confirmed=form.cleaned_data["repeats_confirmed"],
            )
        except ReplayRepeatsUnconfirmed:
            self.message_user(
                request,
                "Nothing was replayed: this event's data was rejected, and a replay sends "
                "the same bytes. Tick “Replay it anyway” to replay it all the same.",
                messages.ERROR,
            )
            return HttpResponseRedirect(page)
        except ServiceError:
            self.message_user(
                request,
                format_html(
                    'Nothing was replayed: <a href="{}">{}</a> is no longer '
                    "dead-lettered or failed.",
                    page,
                    event.event_id,
                ),
                messages.WARNING,
            )
            return HttpResponseRedirect(page)
        self.message_user(
            request,
            format_html(
                "Replayed <a href=\"{}\">{}</a>: it is back in 'received' with a fresh "
                'round of attempts (<a href="{}">operator action #{}</a>).',
                page,
                event.event_id,
                _url(action),
                action.pk,
            ),
            messages.SUCCESS,
        )
        return HttpResponseRedirect(page)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = dict(extra_context or {})
        event = self.get_object(request, object_id)
        if event is not None and self.has_view_permission(request, event):
            story = inbox_event_story(event=event)
            kind = webhook_secret_kind(
                source_id=event.source_id, fingerprint=event.secret_fingerprint
            )
            verifier = WebhookSecret.Kind(kind).label.lower() if kind else "secret"
            context["story"] = [
                {
                    "at": time_display(entry.at),
                    "kind": entry.kind,
                    "kind_label": KIND_LABELS[entry.kind],
                    "html": story_entry_html(entry, event=event, verifier=verifier),
                }
                for entry in story
            ]
            # The attempts' inline shows the same rounds without reading the actions again.
            request.attempt_rounds = {  # type: ignore[attr-defined]
                entry.record.pk: entry.round
                for entry in story
                if entry.kind == "attempt" and entry.record is not None
            }
            context["replay_form"] = (
                EventReplayForm()
                if request.user.has_perm(REPLAY_PERMISSION)
                and event.processing_status in REPLAYABLE_STATUSES
                else None
            )
            context["replay_url"] = reverse(
                "admin:webhooks_inboxevent_replay", args=[event.pk]
            )
            if context["replay_form"] is not None and replay_repeats(event):
                context["replay_repeats"] = {
                    "cause": event.get_dead_letter_cause_display(),
                    "error": event.error_message,
                }
        return super().change_view(request, object_id, form_url, context)

    def get_inline_instances(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        instances = super().get_inline_instances(request, obj)
        for inline in instances:
            if hasattr(inline, "rounds"):
                inline.rounds = getattr(request, "attempt_rounds", {})
        return instances

    # --- times to the second, with the zone -------------------------------------------

    @admin.display(description="received at")
    def received(self, obj: InboxEvent) -> str:
        return time_display(obj.received_at)

    @admin.display(description="processed at")
    def processed(self, obj: InboxEvent) -> str:
        return time_display(obj.processed_at)

    @admin.display(description="next attempt at")
    def next_attempt(self, obj: InboxEvent) -> str:
        return time_display(obj.next_attempt_at)

    @admin.display(description="last seen at")
    def last_seen(self, obj: InboxEvent) -> str:
        return time_display(obj.last_seen_at)

    @admin.display(description="processing latency (received → processed)")
    def processing_latency(self, obj: InboxEvent) -> str:
        """The product's own latency; the producer's delay before it is apart."""
        if obj.processed_at is None:
            return "-"
        return duration_display((obj.processed_at - obj.received_at).total_seconds())

    @admin.display(description="producer delay (occurred → received)")
    def producer_delay(self, obj: InboxEvent) -> str:
        occurred = inbox_event_occurred_at(inbox_event_id=obj.pk)
        if not isinstance(occurred, datetime):
            return "-"
        return duration_display((obj.received_at - occurred).total_seconds())

    @admin.display(description="attempts (all rounds)")
    def attempts_summary(self, obj: InboxEvent) -> str:
        """Every attempt and the rounds they were in, as the list says it, and the current
        round's count (what the retry policy reads) when it is not all of them."""
        shown: Any = obj
        if not hasattr(shown, "attempts_total"):
            inbox_events_attempts_fill([obj])
        total, rounds = shown.attempts_total, shown.attempt_rounds
        words = attempts_words(total=total, rounds=rounds)
        if obj.attempts == total:
            return words
        return f"{words}; {obj.attempts} in the current round (see the story)"

    # --- the raw body --------------------------------------------------------------------

    @admin.display(description="raw body")
    def raw_body_panel(self, obj: InboxEvent) -> SafeString:
        """The body as received: a download of the stored bytes, the stored hash checked
        against them, and, beside it, the same body indented."""
        if obj.body_purged_at is not None or obj.raw_body is None:
            return format_html(
                '<p class="body-purged">The raw body was purged by retention at {}; its '
                "stored SHA-256 stays: <code>{}</code>.</p>",
                time_display(obj.body_purged_at),
                obj.payload_hash,
            )
        data = bytes(obj.raw_body)
        computed = hashlib.sha256(data).hexdigest()
        verdict = (
            mark_safe('<strong class="hash-matches">matches</strong>')
            if computed == obj.payload_hash
            else format_html(
                '<strong class="hash-mismatch">does not match</strong> (the stored '
                "bytes hash to <code>{}</code>)",
                computed,
            )
        )
        download = reverse("admin:webhooks_inboxevent_body", args=[obj.pk])
        return format_html(
            '<div class="raw-body">'
            '<p><a class="button" id="raw-body-download" href="{}" download>Download the '
            "raw body</a> {} bytes, exactly as received.</p>"
            '<p id="raw-body-hash">Stored SHA-256: <code>{}</code>; the stored bytes: {}</p>'
            '<div class="raw-body-columns">'
            '<div><h4>As received</h4><pre class="raw-body-received as-recorded">{}</pre></div>'
            "<div><h4>Pretty (indented, keys sorted)</h4>"
            '<pre class="raw-body-pretty as-recorded">{}</pre></div>'
            "</div></div>",
            download,
            len(data),
            obj.payload_hash,
            verdict,
            _head(data.decode("utf-8", errors="replace")),
            _head(pretty_body(data)),
        )
