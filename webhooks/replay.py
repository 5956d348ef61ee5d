"""Replay of inbox events: the one way a dead-lettered (or failed) row goes back to ``received``.

The admin action, the ``replay_events`` command and the bulk replay job all call
``inbox_events_replay``; a bulk replay job replays every row matching a filter in chunks, as a
chain of bounded tasks that can be resumed where it stopped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from .dispatch import bulk_replay_job_publish
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
    of attempts (the attempt history stays), clears their error and retry time, and records
    ONE operator action naming them. Returns that action. The relay publishes the rows once
    this commits (they wait for a message again: ``dispatched_at`` is cleared).

    Rows are locked (``select_for_update(skip_locked=True)``) and re-checked under the lock, so
    two operators replaying the same rows at once replay each row once; rows in any other status
    are skipped and counted. Raises ``NothingToReplay`` when no row was replayable."""
    if actor_name is None:
        actor_name = actor.get_username() if actor is not None else "system"
    selected = list(events_queryset.order_by().values_list("pk", flat=True))
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
            dispatched_at=None,
            held_at=None,
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


class BulkReplayJobNotResumable(Exception):
    """The job is neither failed nor interrupted: still running (its lease holds), waiting to
    start, or finished."""


def _job_queryset(job: BulkReplayJob) -> QuerySet[InboxEvent]:
    return replay_queryset_build(
        source_slug=job.source.slug if job.source_id else None,
        status=job.status,
        since=job.since,
        event_ids=job.event_ids or None,
    )


def _lease_end(now: datetime) -> datetime:
    return now + timedelta(seconds=settings.AUDIT_BULK_REPLAY_LEASE_SECONDS)


def _resumable(now: datetime) -> Q:
    """Failed, or queued or running with a lease that ran out (its task died, or its next
    task was never published)."""
    active = Q(state__in=[BulkReplayJob.State.QUEUED, BulkReplayJob.State.RUNNING])
    expired = Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True)
    return Q(state=BulkReplayJob.State.FAILED) | (active & expired)


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


def _run_publish_after_commit(job: BulkReplayJob) -> None:
    transaction.on_commit(lambda: bulk_replay_job_publish(job_id=job.pk, run=job.run))


def bulk_replay_job_start(
    *,
    job: BulkReplayJob,
    started_by: AbstractBaseUser | None = None,
    started_by_name: str = "",
    publish: bool = True,
) -> BulkReplayJob:
    """Queues the job and records who started it; the operator actions of its chunks name
    them. Only a counted job starts, and only once: a conditional UPDATE decides. With
    ``publish`` its first task is published after commit (else the caller runs it)."""
    name = started_by_name or (started_by.get_username() if started_by else "system")
    updated = BulkReplayJob.objects.filter(
        pk=job.pk, state=BulkReplayJob.State.COUNTED
    ).update(
        state=BulkReplayJob.State.QUEUED,
        run=F("run") + 1,
        started_by=started_by,
        started_by_name=name,
        lease_expires_at=_lease_end(timezone.now()),
    )
    if not updated:
        raise BulkReplayJobNotStartable(
            f"bulk replay #{job.pk} is not waiting to start"
        )
    job.refresh_from_db()
    logger.info(
        "audit.bulk_replay_started",
        extra={"bulk_job_id": job.pk, "actor": name, "run": job.run},
    )
    if publish:
        _run_publish_after_commit(job)
    return job


def bulk_replay_job_resume(
    *,
    job_id: int,
    resumed_by: AbstractBaseUser | None = None,
    resumed_by_name: str = "",
    publish: bool = True,
) -> BulkReplayJob:
    """Queues a failed or interrupted job again, as a new run that goes on from where it
    stopped: only rows past ``last_event_pk`` that still match the filter are taken, so no row
    is replayed twice. The chunks of the new run name ``resumed_by``. One conditional UPDATE
    decides between concurrent resumes (and a chunk still at work, which holds the job's row
    lock and renews the lease): exactly one wins, the others raise
    ``BulkReplayJobNotResumable``. Raises ``BulkReplayJob.DoesNotExist`` for an unknown id."""
    name = resumed_by_name or (resumed_by.get_username() if resumed_by else "system")
    now = timezone.now()
    updated = (
        BulkReplayJob.objects.filter(pk=job_id)
        .filter(_resumable(now))
        .update(
            state=BulkReplayJob.State.QUEUED,
            run=F("run") + 1,
            resumed_by=resumed_by,
            resumed_by_name=name,
            error="",
            finished_at=None,
            lease_expires_at=_lease_end(now),
        )
    )
    job = BulkReplayJob.objects.get(pk=job_id)
    if not updated:
        raise BulkReplayJobNotResumable(
            f"bulk replay #{job_id} is not resumable: it is {job.state}"
            + (
                f", its lease runs until {job.lease_expires_at:%Y-%m-%d %H:%M:%S%z}"
                if job.state
                in (BulkReplayJob.State.QUEUED, BulkReplayJob.State.RUNNING)
                and job.lease_expires_at
                else ""
            )
        )
    logger.info(
        "audit.bulk_replay_resumed",
        extra={"bulk_job_id": job.pk, "actor": name, "run": job.run},
    )
    if publish:
        _run_publish_after_commit(job)
    return job


def _job_actor(job: BulkReplayJob) -> tuple[AbstractBaseUser | None, str]:
    """Whose run this is: the last resumer, else the starter (else, for a job started before
    starters were recorded, its creator)."""
    if job.resumed_by_name:
        return job.resumed_by, job.resumed_by_name
    if job.started_by_name:
        return job.started_by, job.started_by_name
    return job.created_by, job.created_by_name or "system"


def _chunk_run(*, job_id: int, run: int) -> tuple[BulkReplayJob | None, bool]:
    """Replays the job's next chunk and commits it together with the job's progress (and a
    renewed lease) in one transaction, holding the job's row lock. Returns the job and whether
    rows may remain; does nothing for a job that is finished or was resumed since (a task of
    an earlier run)."""
    chunk_size = settings.AUDIT_BULK_REPLAY_CHUNK_SIZE
    now = timezone.now()
    with transaction.atomic():
        job = BulkReplayJob.objects.select_for_update().filter(pk=job_id).first()
        if (
            job is None
            or job.run != run
            or job.state
            not in (
                BulkReplayJob.State.QUEUED,
                BulkReplayJob.State.RUNNING,
            )
        ):
            return job, False
        remaining = _job_queryset(job).filter(pk__gt=job.last_event_pk)
        if job.state == BulkReplayJob.State.QUEUED:  # a run begins
            job.state = BulkReplayJob.State.RUNNING
            job.started_at = job.started_at or now
            job.total = job.processed + remaining.count()
        chunk = list(remaining.order_by("pk").values_list("pk", flat=True)[:chunk_size])
        if chunk:
            actor, actor_name = _job_actor(job)
            try:
                action = inbox_events_replay(
                    events_queryset=InboxEvent.objects.filter(pk__in=chunk),
                    actor=actor,
                    actor_name=actor_name,
                    reason=job.reason,
                    action=OperatorAction.Action.BULK_REPLAY,
                    bulk_job=job,
                )
                job.processed += action.event_count
            except NothingToReplay:
                pass  # a concurrent replay took every row of this chunk
            job.last_event_pk = chunk[-1]
        more = len(chunk) == chunk_size
        if more:
            job.lease_expires_at = _lease_end(now)
        else:
            job.state = BulkReplayJob.State.SUCCEEDED
            job.total = max(job.total, job.processed)
            job.finished_at = now
            job.lease_expires_at = None
        job.save(
            update_fields=[
                "state",
                "started_at",
                "total",
                "processed",
                "last_event_pk",
                "lease_expires_at",
                "finished_at",
            ]
        )
    return job, more


def _run_fail(*, job_id: int, run: int, error: str) -> None:
    """Marks the run failed (resumable at once). If even that cannot be written (the database
    is gone), the job's lease runs out and it becomes resumable all the same."""
    try:
        BulkReplayJob.objects.filter(
            pk=job_id,
            run=run,
            state__in=[BulkReplayJob.State.QUEUED, BulkReplayJob.State.RUNNING],
        ).update(
            state=BulkReplayJob.State.FAILED,
            error=error[:2000],
            finished_at=timezone.now(),
            lease_expires_at=None,
        )
    except Exception:
        logger.exception(
            "audit.bulk_replay_fail_unrecorded", extra={"bulk_job_id": job_id}
        )


def bulk_replay_job_run(
    *,
    job_id: int,
    run: int,
    seconds: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    publish_next: bool = False,
) -> BulkReplayJob | None:
    """Runs chunks of the job's ``run`` (one operator action per chunk, linked to the job)
    until no row is left or ``seconds`` have passed; then, with ``publish_next``, queues the
    next task of the chain through ``dispatch``. Each chunk's progress is committed with it.
    An error fails the job (resumable); a task of an earlier run does nothing."""
    deadline = None if seconds is None else time.monotonic() + seconds
    job = None
    try:
        while True:
            job, more = _chunk_run(job_id=job_id, run=run)
            if job is None or job.run != run:
                return job
            if progress is not None:
                progress(job.processed, job.total)
            if not more:
                break
            if deadline is not None and time.monotonic() >= deadline:
                if publish_next:
                    bulk_replay_job_publish(job_id=job_id, run=run)
                return job
    except BaseException as exc:  # re-raised; an interrupted command fails the job too
        logger.exception(
            "audit.bulk_replay_failed", extra={"bulk_job_id": job_id, "run": run}
        )
        _run_fail(job_id=job_id, run=run, error=str(exc) or type(exc).__name__)
        raise
    if job.state == BulkReplayJob.State.SUCCEEDED:
        logger.info(
            "audit.bulk_replay_finished",
            extra={"bulk_job_id": job.pk, "processed": job.processed},
        )
    return job
