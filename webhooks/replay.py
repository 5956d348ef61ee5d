"""Replay of inbox events: the one way a dead-lettered (or failed) row goes back to ``received``.

The admin action, the ``replay_events`` command and the bulk replay job all call
``inbox_events_replay``; a bulk replay job replays every row matching a filter in chunks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from .dispatch import bulk_replay_job_publish, inbox_event_publish
from .models import (
    REPLAYABLE_STATUSES,
    BulkReplayJob,
    InboxEvent,
    OperatorAction,
    ProcessingStatus,
    WebhookSource,
)

logger = logging.getLogger(__name__)


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
            dead_letter_cause="",
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
            # The event id is the message's correlation id, as when it was first received.
            transaction.on_commit(
                lambda pk=row.pk, event_id=row.event_id: inbox_event_publish(
                    inbox_event_id=pk, event_id=event_id
                )
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


# --- Bulk replay by filter -----------------------------------------------------------------


class BulkReplayJobNotStartable(Exception):
    """The job is not waiting to start (already started or finished)."""


# --- Bulk replay ----------------------------------------------------------------------------


def _job_queryset(job: BulkReplayJob):
    return replay_queryset_build(
        source_slug=job.source.slug if job.source_id else None,
        status=job.status,
        since=job.since,
        event_ids=job.event_ids or None,
    )


def bulk_replay_job_create(
    *,
    source: WebhookSource | None,
    status: str,
    since: datetime | None,
    event_ids: list[str],
    reason: str,
    created_by: AbstractBaseUser | None = None,
    created_by_name: str = "",
) -> BulkReplayJob:
    """Records a replay by filter with its dry-run count; nothing is replayed until it starts."""
    job = BulkReplayJob(
        source=source,
        status=status,
        since=since,
        event_ids=list(event_ids),
        reason=reason,
        created_by=created_by,
        created_by_name=created_by_name
        or (created_by.get_username() if created_by else ""),
    )
    job.dry_run_count = _job_queryset(job).count()
    job.save()
    logger.info(
        "audit.bulk_replay_counted",
        extra={"bulk_job_id": job.pk, "dry_run_count": job.dry_run_count},
    )
    return job


def bulk_replay_job_start(*, job: BulkReplayJob) -> BulkReplayJob:
    """Queues the job for a worker. Only a counted job starts, and only once."""
    updated = BulkReplayJob.objects.filter(
        pk=job.pk, state=BulkReplayJob.State.COUNTED
    ).update(state=BulkReplayJob.State.QUEUED)
    if not updated:
        raise BulkReplayJobNotStartable(
            f"bulk replay #{job.pk} is not waiting to start"
        )
    transaction.on_commit(lambda: bulk_replay_job_publish(job_id=job.pk))
    job.refresh_from_db()
    return job


def bulk_replay_job_run(
    *, job_id: int, progress: Callable[[int, int], None] | None = None
) -> BulkReplayJob:
    """Replays the job's rows in chunks (one operator action per chunk, linked to the job),
    updating ``processed``/``total`` as it goes. A rerun after a worker died goes on from where
    it stopped: replayed rows are no longer in the filtered status."""
    with transaction.atomic():
        job = BulkReplayJob.objects.select_for_update().get(pk=job_id)
        if job.state in (BulkReplayJob.State.SUCCEEDED, BulkReplayJob.State.FAILED):
            return job
        job.state = BulkReplayJob.State.RUNNING
        job.started_at = job.started_at or timezone.now()
        job.total = job.processed + _job_queryset(job).count()
        job.save(update_fields=["state", "started_at", "total"])
    chunk_size = settings.AUDIT_BULK_REPLAY_CHUNK_SIZE
    actor_name = job.created_by_name or "system"
    try:
        while True:
            chunk = list(
                _job_queryset(job)
                .order_by("pk")
                .values_list("pk", flat=True)[:chunk_size]
            )
            if not chunk:
                break
            try:
                action = inbox_events_replay(
                    events_queryset=InboxEvent.objects.filter(pk__in=chunk),
                    actor=job.created_by,
                    actor_name=actor_name,
                    reason=job.reason,
                    action=OperatorAction.Action.BULK_REPLAY,
                    bulk_job=job,
                )
                done = action.event_count
            except NothingToReplay:
                done = 0
            if done == 0:
                break  # the remaining rows are locked by a concurrent replay
            job.processed += done
            BulkReplayJob.objects.filter(pk=job.pk).update(processed=job.processed)
            if progress is not None:
                progress(job.processed, job.total)
    except Exception as exc:
        BulkReplayJob.objects.filter(pk=job.pk).update(
            state=BulkReplayJob.State.FAILED,
            error=str(exc)[:2000],
            finished_at=timezone.now(),
        )
        logger.exception("audit.bulk_replay_failed", extra={"bulk_job_id": job.pk})
        raise
    BulkReplayJob.objects.filter(pk=job.pk).update(
        state=BulkReplayJob.State.SUCCEEDED,
        total=max(job.total, job.processed),
        finished_at=timezone.now(),
    )
    job.refresh_from_db()
    logger.info(
        "audit.bulk_replay_finished",
        extra={"bulk_job_id": job.pk, "processed": job.processed},
    )
    return job
