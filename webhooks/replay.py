"""Replay of inbox events: the one way a dead-lettered (or failed) row goes back to ``received``.

The admin action, the ``replay_events`` command and the bulk replay job all call
``inbox_events_replay``.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.logging import correlation_id_bound

from .models import InboxEvent, ProcessingStatus

if TYPE_CHECKING:
    from audit.models import BulkReplayJob, OperatorAction

logger = logging.getLogger(__name__)

REPLAYABLE_STATUSES = frozenset(
    {ProcessingStatus.DEAD_LETTERED, ProcessingStatus.FAILED}
)


class NothingToReplay(Exception):
    """No selected row was in a replayable status."""


def replay_queryset_build(
    *,
    source_slug: str | None = None,
    status: str = ProcessingStatus.DEAD_LETTERED,
    since: datetime | None = None,
    event_ids: list[str] | None = None,
) -> QuerySet[InboxEvent]:
    """The rows a replay by filter would take (the dry-run count is its ``count()``)."""
    if status not in REPLAYABLE_STATUSES:
        raise ValueError(f"status must be one of {sorted(REPLAYABLE_STATUSES)}")
    queryset = InboxEvent.objects.filter(processing_status=status)
    if source_slug:
        queryset = queryset.filter(source__slug=source_slug)
    if since is not None:
        queryset = queryset.filter(received_at__gte=since)
    if event_ids:
        queryset = queryset.filter(event_id__in=event_ids)
    return queryset


def _dispatch(inbox_event_id: int, event_id: str) -> None:
    from .tasks import process_inbox_event_task

    try:
        # The event id is the message's correlation id, as when the event was first received.
        with correlation_id_bound(event_id):
            process_inbox_event_task.apply_async(args=[inbox_event_id])
    except Exception:  # the row is the outbox: the sweep re-dispatches `received` rows
        logger.warning(
            "inbox.replay_dispatch_failed", extra={"inbox_event_id": inbox_event_id}
        )


def inbox_events_replay(
    *,
    events_queryset: QuerySet[InboxEvent],
    actor: AbstractBaseUser | None = None,
    actor_name: str | None = None,
    reason: str,
    action: str = "replay",
    bulk_job: BulkReplayJob | None = None,
) -> OperatorAction:
    """Moves the replayable rows of ``events_queryset`` back to ``received`` with a fresh round
    of attempts (the attempt history stays), clears their error and retry time, dispatches each
    one after commit, and records ONE operator action naming them. Returns that action.

    Rows are locked (``select_for_update(skip_locked=True)``) and re-checked under the lock, so
    two operators replaying the same rows at once replay each row once; rows in any other status
    are skipped and counted. Raises ``NothingToReplay`` when no row was replayable."""
    from audit.models import OperatorAction

    if actor_name is None:
        actor_name = actor.get_username() if actor is not None else "system"
    selected = list(events_queryset.order_by().values_list("pk", flat=True))
    now = timezone.now()
    with transaction.atomic():
        rows = list(
            InboxEvent.objects.filter(
                pk__in=selected, processing_status__in=REPLAYABLE_STATUSES
            )
            .select_for_update(skip_locked=True)
            .order_by("pk")
            .only("pk", "event_id", "processing_status", "attempts", "error_message")
        )
        if not rows:
            raise NothingToReplay("no selected event is dead-lettered or failed")
        ids = [row.pk for row in rows]
        previous = {
            row.pk: {"status": row.processing_status, "attempts": row.attempts}
            for row in rows
        }
        InboxEvent.objects.filter(pk__in=ids).update(
            processing_status=ProcessingStatus.RECEIVED,
            attempts=0,
            error_message="",
            next_attempt_at=None,
            lease_expires_at=None,
            processed_at=None,
            dispatched_at=now,
        )
        operator_action = OperatorAction.objects.create(
            action=action,
            actor=actor,
            actor_name=actor_name,
            reason=reason,
            event_ids=ids,
            event_count=len(ids),
            skipped_count=len(selected) - len(ids),
            details={"previous": {str(k): v for k, v in previous.items()}},
            bulk_job=bulk_job,
        )
        for row in rows:
            transaction.on_commit(
                lambda pk=row.pk, event_id=row.event_id: _dispatch(pk, event_id)
            )
    logger.info(
        "inbox.replayed",
        extra={
            "operator_action_id": operator_action.pk,
            "actor": actor_name,
            "event_count": len(ids),
            "skipped_count": operator_action.skipped_count,
        },
    )
    return operator_action
