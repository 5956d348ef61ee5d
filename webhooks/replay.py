"""Replay of inbox events: the one way a dead-lettered (or failed) row goes back to ``received``
(docs/subsystems/processing.md, "An inbox row").

The admin's actions, the ``replay_events`` command and the bulk replay jobs
(``webhooks.bulk_replay``) all call ``inbox_events_replay``: one transaction that moves the
rows and records one operator action naming them.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet

from core.actors import Actor
from core.tracing import links_add, span, traceparent_current, tracing_enabled
from trail.models import OperatorAction
from trail.services import ReplayDetails, operator_action_record

from .errors import NothingToReplay, ReplayRepeatsUnconfirmed, SelectionTooLarge
from .models import (
    REPLAY_REPEATS_CAUSES,
    REPLAYABLE_STATUSES,
    TERMINAL_STATUSES,
    BulkReplayJob,
    InboxEvent,
    ProcessingStatus,
)

logger = logging.getLogger(__name__)

# What a plan counts as needing no replay: every terminal outcome but a dead letter.
PROCESSED_STATUSES = sorted(TERMINAL_STATUSES - {ProcessingStatus.DEAD_LETTERED})


# A replay of selected rows is one transaction in one request (the admin's "Replay selected"):
# at most this many rows, far below the database's 65,535 parameters per statement and well
# inside a request's time. More is the work of a bulk replay job (chunks, progress, resumable).
REPLAY_SELECTED_MAX = 10_000


def replay_selection_check(*, events_queryset: QuerySet[InboxEvent]) -> None:
    """Raises ``SelectionTooLarge`` when ``events_queryset`` holds more rows than one
    replay takes; reads at most ``REPLAY_SELECTED_MAX + 1`` of them."""
    limit = REPLAY_SELECTED_MAX
    if events_queryset.order_by().values("pk")[: limit + 1].count() > limit:
        raise SelectionTooLarge(limit)


def _window_queryset(
    *,
    source_slug: str | None,
    since: datetime | None,
    until: datetime | None,
    event_ids: list[str] | None,
) -> QuerySet[InboxEvent]:
    queryset = InboxEvent.objects.all()
    if source_slug:
        queryset = queryset.filter(source__slug=source_slug)
    if since is not None:
        queryset = queryset.filter(received_at__gte=since)
    if until is not None:
        queryset = queryset.filter(received_at__lt=until)
    if event_ids:
        queryset = queryset.filter(event_id__in=event_ids)
    return queryset


def replay_queryset_build(
    *,
    source_slug: str | None = None,
    status: str = ProcessingStatus.DEAD_LETTERED,
    since: datetime | None = None,
    event_ids: list[str] | None = None,
    until: datetime | None = None,
) -> QuerySet[InboxEvent]:
    """The rows a replay by filter would take (the dry-run count is its ``count()``): in
    ``status``, received from ``since`` and before ``until``, with their body still held (a
    row whose body retention dropped cannot be processed again)."""
    if status not in REPLAYABLE_STATUSES:
        raise ValueError(f"status must be one of {sorted(REPLAYABLE_STATUSES)}")
    return _window_queryset(
        source_slug=source_slug, since=since, until=until, event_ids=event_ids
    ).filter(processing_status=status, body_purged_at__isnull=True)


# A plan counts at most this many rows of each kind (``core.selectors.COUNT_CAP`` as the
# admin's lists do): past it, a count says "at least".
REPLAY_PLAN_COUNT_CAP = 100_000


def replay_plan(
    *,
    source_slug: str | None,
    status: str,
    since: datetime | None,
    until: datetime | None,
    event_ids: list[str] | None,
) -> dict[str, int | bool]:
    """What a replay by filter would do, before it is started (docs/http-api.md, "Operator
    API"): of the rows received in the window (``matched``, any status), how many it would
    replay (``replayable``: in ``status``, body held), how many are in ``status`` but past
    body retention (``body_expired``, skipped), and how many need no replay
    (``already_processed``: a terminal outcome other than a dead letter). Each count stops
    at ``REPLAY_PLAN_COUNT_CAP`` (``capped`` says whether one did)."""
    window = _window_queryset(
        source_slug=source_slug, since=since, until=until, event_ids=event_ids
    ).order_by()
    cap = REPLAY_PLAN_COUNT_CAP

    def capped_count(queryset: QuerySet[InboxEvent]) -> int:
        return queryset.values("pk")[: cap + 1].count()

    in_status = window.filter(processing_status=status)
    counts: dict[str, int | bool] = {
        "matched": capped_count(window),
        "replayable": capped_count(in_status.filter(body_purged_at__isnull=True)),
        "body_expired": capped_count(in_status.filter(body_purged_at__isnull=False)),
        "already_processed": capped_count(
            window.filter(processing_status__in=PROCESSED_STATUSES)
        ),
    }
    counts["capped"] = any(value > cap for value in counts.values())
    return {
        name: min(value, cap) if not isinstance(value, bool) else value
        for name, value in counts.items()
    }


def inbox_events_replay(
    *,
    events_queryset: QuerySet[InboxEvent],
    actor: Actor,
    reason: str,
    action: str = "replay",
    bulk_job: BulkReplayJob | None = None,
    repeats_confirmed: bool = True,
) -> OperatorAction:
    """Moves the replayable rows of ``events_queryset`` back to ``received`` with a fresh round
    of attempts (the attempt history stays), clears their error and retry time, and records
    ONE operator action naming them. Returns that action. The relay publishes the rows once
    this commits (they wait for a message again: ``dispatched_at`` is cleared).

    Rows are locked (``select_for_update(skip_locked=True)``) and re-checked under the lock, so
    two operators replaying the same rows at once replay each row once; rows in any other status
    are skipped and counted. Raises ``NothingToReplay`` when no row was replayable, and
    ``SelectionTooLarge`` (changing nothing) for more than ``REPLAY_SELECTED_MAX``
    rows. Without ``repeats_confirmed`` (the console asks for it), raises
    ``ReplayRepeatsUnconfirmed`` (changing nothing) when a row to replay was dead-lettered for
    a cause the same bytes meet again (``REPLAY_REPEATS_CAUSES``: its data was rejected)."""
    limit = REPLAY_SELECTED_MAX
    selected = list(
        events_queryset.order_by().values_list("pk", flat=True)[: limit + 1]
    )
    if len(selected) > limit:
        raise SelectionTooLarge(limit)
    traced = (
        span("replay inbox events", attributes={"webhook.replay.action": action})
        if tracing_enabled()
        else contextlib.nullcontext()
    )
    with traced as replay_span, transaction.atomic():
        rows = list(
            InboxEvent.objects.filter(
                pk__in=selected, processing_status__in=REPLAYABLE_STATUSES
            )
            .select_for_update(skip_locked=True)
            .order_by("pk")
            .only(
                "pk",
                "event_id",
                "processing_status",
                "attempts",
                "error_message",
                "dead_letter_cause",
                "traceparent",
            )
        )
        if not rows:
            raise NothingToReplay("no selected event is dead-lettered or failed")
        repeats = sum(
            1
            for row in rows
            if row.processing_status == ProcessingStatus.DEAD_LETTERED
            and row.dead_letter_cause in REPLAY_REPEATS_CAUSES
        )
        if repeats and not repeats_confirmed:
            raise ReplayRepeatsUnconfirmed(repeats)
        ids = [row.pk for row in rows]
        previous = {
            row.pk: {"status": row.processing_status, "attempts": row.attempts}
            for row in rows
        }
        # Tracing: a replay starts the rows' new trace, the replaying request's or job's
        # (its span links to the requests that first wrote them, a bounded few), and its
        # relay and worker link to that one.
        traced_rows = {}
        if replay_span is not None:
            replay_span.set_attribute("webhook.event_count", len(ids))
            links_add([row.traceparent for row in rows], replay_span)
            traced_rows = {"traceparent": traceparent_current()}
        InboxEvent.objects.filter(pk__in=ids).update(
            **traced_rows,
            processing_status=ProcessingStatus.RECEIVED,
            attempts=0,
            error_message="",
            dead_letter_cause="",
            next_attempt_at=None,
            lease_expires_at=None,
            processed_at=None,
            dispatched_at=None,
            held_at=None,
        )
        operator_action = operator_action_record(
            action=action,
            actor=actor,
            reason=reason,
            event_ids=ids,
            skipped_count=len(selected) - len(ids),
            details=ReplayDetails(previous={str(k): v for k, v in previous.items()}),
            bulk_job=bulk_job,
        )
    logger.info(
        "inbox.replayed",
        extra={
            "operator_action_id": operator_action.pk,
            "actor": actor.name,
            "event_count": len(ids),
            "skipped_count": operator_action.skipped_count,
        },
    )
    return operator_action
