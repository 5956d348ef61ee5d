"""A research document's events on its admin page: every event delivered for it
(``audit.stories.document_events``, the events its evidence bundle tells), whatever became of
it (the revision it made, why the ordering rule ignored it, why it was dead-lettered, its
retry, its hold), each with its attempts and rounds and the operator actions on it (who
replayed it, when, linked to the action and to the bulk replay job). Oldest first; bounded
like the bundle: past ``DOCUMENT_EVENTS_SHOWN``, the first and the latest, and a link to the
inbox filtered to the document's entity for the rest."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.db.models import Count
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from core.admin.status import status_badge
from core.times import time_display
from research.models import DocumentRevision
from trail.models import OperatorAction, operator_action_words
from webhooks.models import InboxAttempt, InboxEvent, ProcessingStatus, SourceHold

from .stories import _halves, _json_list_contains, document_events

DOCUMENT_EVENTS_SHOWN = 100

_REPLAY_WORDS: dict[str, str] = {
    OperatorAction.Action.REPLAY: "replayed",
    OperatorAction.Action.BULK_REPLAY: "bulk-replayed",
}
_ACTION_WORDS: dict[str, str] = {
    OperatorAction.Action.PURGE_BODIES: "body purged",
}
_EVENT_COLUMNS = (
    "pk",
    "event_id",
    "event_type",
    "entity_id",
    "source_id",
    "source_version",
    "processing_status",
    "dead_letter_cause",
    "error_message",
    "received_at",
    "next_attempt_at",
    "attempts",
)


def _url(name: str, pk: int) -> str:
    return reverse(f"admin:{name}_change", args=[pk])


def _shown(events: list[int], limit: int) -> tuple[list[int], int]:
    """The ids shown (all of them, or the first and the latest) and how many are not."""
    if len(events) <= limit:
        return events, 0
    first, latest = _halves(limit)
    return events[:first] + events[len(events) - latest :], len(events) - limit


def _outcome(
    event: InboxEvent, revision: DocumentRevision | None, held: bool
) -> SafeString:
    """What became of the event, in words: the revision it made, or why it made none."""
    if revision is not None:
        return format_html(
            'made <a href="{}">{}</a>',
            _url("research_documentrevision", revision.pk),
            str(revision),
        )
    status = event.processing_status
    if status == ProcessingStatus.DEAD_LETTERED:
        cause = event.get_dead_letter_cause_display() if event.dead_letter_cause else ""
        return format_html(
            "{}{}",
            cause or "dead-lettered",
            f": {event.error_message}" if event.error_message else "",
        )
    if status == ProcessingStatus.FAILED:
        when = time_display(event.next_attempt_at) if event.next_attempt_at else "-"
        return format_html("retry at {}: {}", when, event.error_message or "-")
    if held:
        return mark_safe("held: its source is paused")
    if status in (ProcessingStatus.RECEIVED, ProcessingStatus.PROCESSING):
        return mark_safe("not processed yet")
    return format_html("{}", event.error_message or "no revision")


def _action_html(action: OperatorAction) -> SafeString:
    words = _REPLAY_WORDS.get(action.action) or _ACTION_WORDS.get(
        action.action, operator_action_words(action.action)
    )
    job = (
        format_html(
            ', <a href="{}">bulk replay job #{}</a>',
            _url("webhooks_bulkreplayjob", action.bulk_job_id),
            action.bulk_job_id,
        )
        if action.bulk_job_id
        else ""
    )
    return format_html(
        '<li class="document-event-action" data-action="{}" '
        'style="margin: 0 0 0.3em; padding: 0; list-style: none">{} by '
        '<a class="document-event-operator" href="{}">{}</a> '
        '<span style="white-space: nowrap">{}</span>{}</li>',
        action.action,
        words,
        _url("trail_operatoraction", action.pk),
        action.actor_name,
        time_display(action.created_at),
        job,
    )


def _actions_by_event(pks: list[int]) -> dict[int, list[OperatorAction]]:
    """The operator actions naming each of the events ``pks``, oldest first (one query)."""
    wanted = set(pks)
    found: dict[int, list[OperatorAction]] = defaultdict(list)
    for action in OperatorAction.objects.filter(
        pk__in=_json_list_contains("event_ids", pks)
    ).order_by("created_at", "pk"):
        for pk in action.event_ids:
            if pk in wanted:
                found[pk].append(action)
    return found


def _rows(events: Iterable[InboxEvent], pks: list[int]) -> SafeString:
    attempts = dict(
        InboxAttempt.objects.filter(event_id__in=pks)
        .order_by()
        .values_list("event_id")
        .annotate(n=Count("pk"))
        .values_list("event_id", "n")
    )
    revisions = {
        revision.inbox_event_id: revision
        for revision in DocumentRevision.objects.filter(
            inbox_event_id__in=pks
        ).select_related("document")
    }
    paused = set(
        SourceHold.objects.filter(paused_at__isnull=False).values_list(
            "source_id", flat=True
        )
    )
    actions = _actions_by_event(pks)
    rows = []
    for event in events:
        on_it = actions.get(event.pk, [])
        replays = sum(1 for a in on_it if a.action in _REPLAY_WORDS)
        held = event.source_id in paused and event.processing_status in (
            ProcessingStatus.RECEIVED,
            ProcessingStatus.FAILED,
        )
        count = attempts.get(event.pk, 0)
        rows.append(
            format_html(
                '<tr class="document-event" data-status="{}" data-event-id="{}">'
                '<td class="document-event-id"><a href="{}">{}</a></td>'
                "<td>{}</td><td>{}</td><td>{}{}</td>"
                '<td style="white-space: nowrap">{}</td>'
                "<td>{} in {} round{}</td><td>{}</td>"
                '<td><ul class="document-event-actions" style="margin: 0; '
                'padding: 0; list-style: none">{}</ul></td></tr>',
                event.processing_status,
                event.event_id,
                _url("webhooks_inboxevent", event.pk),
                event.event_id,
                f"v{event.source_version}" if event.source_version is not None else "-",
                event.event_type.rsplit(".", 1)[-1],
                status_badge(event.processing_status),
                " (held)" if held else "",
                time_display(event.received_at),
                f"{count} attempt" + ("" if count == 1 else "s"),
                replays + 1,
                "" if replays == 0 else "s",
                _outcome(event, revisions.get(event.pk), held),
                format_html_join("", "{}", ((_action_html(a),) for a in on_it)),
            )
        )
    return format_html_join("", "{}", ((row,) for row in rows))


def document_events_html(*, document_pk: int) -> str:
    """The document page's table of every event delivered for it (see the module's
    docstring); "none" when no event names it."""
    queryset = document_events(document_pk=document_pk)
    ids = list(queryset.order_by("pk").values_list("pk", flat=True))
    if not ids:
        return "none"
    shown, hidden = _shown(ids, DOCUMENT_EVENTS_SHOWN)
    events = list(
        InboxEvent.objects.filter(pk__in=shown).only(*_EVENT_COLUMNS).order_by("pk")
    )
    entity_id = events[0].entity_id
    more = (
        format_html(
            '<p class="document-events-more">{} more, between the first and the latest '
            'shown: <a href="{}?entity_id={}">the inbox lists every one</a>.</p>',
            hidden,
            reverse("admin:webhooks_inboxevent_changelist"),
            entity_id,
        )
        if hidden
        else ""
    )
    return format_html(
        '<table id="document-events" class="document-events" style="width: 100%">'
        "<thead><tr>"
        '<th scope="col">event</th><th scope="col">version</th>'
        '<th scope="col">type</th><th scope="col">status</th>'
        '<th scope="col">received at</th><th scope="col">attempts</th>'
        '<th scope="col" style="width: 24%">what became of it</th>'
        '<th scope="col" style="width: 20em">operator actions on it</th></tr></thead>'
        "<tbody>{}</tbody></table>{}",
        _rows(events, shown),
        more,
    )
