"""Bulk replay jobs (docs/subsystems/processing.md, "A bulk replay job"): every row matching
a filter replayed in chunks (``webhooks.replay.inbox_events_replay``), as a chain of bounded
tasks, optionally at a rate (``webhooks.pacing``); a job can be cancelled, and resumed where
it stopped.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from core.actors import Actor
from core.times import INSTANT_RANGE_MESSAGE, instant_in_range
from trail.models import OperatorAction
from trail.services import operator_action_record

from .dispatch import bulk_replay_job_publish
from .errors import (
    BulkReplayJobNotCancellable,
    BulkReplayJobNotFound,
    BulkReplayJobNotResumable,
    BulkReplayJobNotStartable,
    InvalidBulkReplayRate,
    InvalidBulkReplaySince,
    NothingToReplay,
)
from .models import (
    BULK_REPLAY_RATE_MAX,
    BULK_REPLAY_RATE_MIN,
    BulkReplayJob,
    InboxEvent,
    WebhookSource,
)
from .pacing import Pace, next_slice_due, pace_for, slice_start
from .replay import inbox_events_replay, replay_queryset_build
from .selectors import inbox_entities_first_unfinished

logger = logging.getLogger(__name__)


ACTIVE_STATES = (BulkReplayJob.State.QUEUED, BulkReplayJob.State.RUNNING)
CANCELLABLE_STATES = (*ACTIVE_STATES, BulkReplayJob.State.PAUSED)


def bulk_replay_since_check(since: datetime | None) -> datetime | None:
    """``since`` when it is an instant a job can store and read back in any time zone
    (``core.times.EARLIEST_INSTANT`` to ``LATEST_INSTANT``); raises
    ``InvalidBulkReplaySince`` otherwise."""
    if since is not None and not instant_in_range(since):
        raise InvalidBulkReplaySince(f"since: {INSTANT_RANGE_MESSAGE}")
    return since


def bulk_replay_rate_parse(value: object) -> float | None:
    """A rate as typed by an operator (text or number) in events per second; ``None`` for
    none. Raises ``InvalidBulkReplayRate`` for anything but a finite number from
    ``BULK_REPLAY_RATE_MIN`` to ``BULK_REPLAY_RATE_MAX``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidBulkReplayRate("rate must be a number of events per second")
    try:
        rate = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidBulkReplayRate(
            f"rate must be a number of events per second, not {str(value)[:40]!r}"
        ) from None
    if not (
        math.isfinite(rate) and BULK_REPLAY_RATE_MIN <= rate <= BULK_REPLAY_RATE_MAX
    ):
        raise InvalidBulkReplayRate(
            f"rate must be a positive number of events per second, from "
            f"{BULK_REPLAY_RATE_MIN:g} to {BULK_REPLAY_RATE_MAX:g}"
        )
    return rate


def _job_queryset(job: BulkReplayJob) -> QuerySet[InboxEvent]:
    return replay_queryset_build(
        source_slug=job.source.slug if job.source is not None else None,
        status=job.status,
        since=job.since,
        event_ids=job.event_ids or None,
        until=job.until,
    )


def _lease_end(now: datetime) -> datetime:
    return now + timedelta(seconds=settings.BULK_REPLAY_LEASE_SECONDS)


def _resumable(now: datetime) -> Q:
    """Failed, cancelled or paused, or queued or running with a lease that ran out (its task
    died, or its next task was never published)."""
    active = Q(state__in=ACTIVE_STATES)
    expired = Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True)
    stopped = Q(
        state__in=[
            BulkReplayJob.State.FAILED,
            BulkReplayJob.State.CANCELLED,
            BulkReplayJob.State.PAUSED,
        ]
    )
    return stopped | (active & expired)


def bulk_replay_job_controls(*, job: BulkReplayJob) -> list[str]:
    """What an operator may do with the job now: ``pause`` (queued or running), ``cancel``
    (queued, running or paused) and ``resume`` (failed, cancelled, paused, or its lease ran
    out), by the rules the services apply."""
    controls = []
    if job.state in ACTIVE_STATES:
        controls.append("pause")
    if job.state in CANCELLABLE_STATES:
        controls.append("cancel")
    resumable = BulkReplayJob.objects.filter(pk=job.pk).filter(
        _resumable(timezone.now())
    )
    if resumable.exists():
        controls.append("resume")
    return controls


def _control_action_record(
    *, job: BulkReplayJob, action: str, actor: Actor, reason: str, **details: Any
) -> OperatorAction:
    """The operator action of a start, cancel or resume: which job, its rate and how far it
    got, sealed with the rest of the trail. It names no events (its chunks' actions do)."""
    return operator_action_record(
        action=action,
        actor=actor,
        reason=reason,
        bulk_job=job,
        details={
            "rate": job.rate,
            "run": job.run,
            "processed": job.processed,
            "total": job.total or job.dry_run_count,
            **details,
        },
    )


def bulk_replay_job_create(
    *,
    source: WebhookSource | None,
    status: str,
    since: datetime | None,
    event_ids: list[str],
    reason: str,
    created_by: Actor,
    rate: float | str | None = None,
    until: datetime | None = None,
) -> BulkReplayJob:
    """Records a replay by filter with its dry-run count; nothing is replayed until it starts.
    ``until`` bounds its window (rows received before it): a job whose filter must not take
    rows that arrive after it was made (the operator API's) gives one.
    Raises ``InvalidBulkReplayRate`` (and records nothing) for a rate out of range,
    ``InvalidBulkReplaySince`` for a ``since`` or ``until`` no stored date may hold."""
    job = BulkReplayJob(
        source=source,
        status=status,
        since=bulk_replay_since_check(since),
        until=bulk_replay_since_check(until),
        event_ids=list(event_ids),
        reason=reason,
        rate=bulk_replay_rate_parse(rate),
        **created_by.columns("created_by"),
    )
    job.dry_run_count = _job_queryset(job).count()
    job.save()
    logger.info(
        "bulk_replay.counted",
        extra={
            "bulk_job_id": job.pk,
            "dry_run_count": job.dry_run_count,
            "rate": job.rate,
        },
    )
    return job


def _run_publish_after_commit(job: BulkReplayJob) -> None:
    transaction.on_commit(
        lambda: bulk_replay_job_publish(job_id=job.pk, run=job.run, step=job.task_seq)
    )


def bulk_replay_job_start(
    *,
    job: BulkReplayJob,
    started_by: Actor,
    publish: bool = True,
) -> BulkReplayJob:
    """Queues the job and records who started it (an operator action with the job's rate);
    the operator actions of its chunks name them. Only a counted job starts, and only once: a
    conditional UPDATE decides. With ``publish`` its first task is published after commit
    (else the caller runs it)."""
    with transaction.atomic():
        updated = BulkReplayJob.objects.filter(
            pk=job.pk, state=BulkReplayJob.State.COUNTED
        ).update(
            state=BulkReplayJob.State.QUEUED,
            run=F("run") + 1,
            task_seq=0,
            **started_by.columns("started_by"),
            lease_expires_at=_lease_end(timezone.now()),
        )
        if not updated:
            raise BulkReplayJobNotStartable(
                f"bulk replay #{job.pk} is not waiting to start"
            )
        job.refresh_from_db()
        _control_action_record(
            job=job,
            action=OperatorAction.Action.START_BULK_REPLAY,
            actor=started_by,
            reason=job.reason,
        )
        if publish:
            _run_publish_after_commit(job)
    logger.info(
        "bulk_replay.started",
        extra={
            "bulk_job_id": job.pk,
            "actor": started_by.name,
            "run": job.run,
            "rate": job.rate,
        },
    )
    return job


# A job's chunks and its cancel queue for a transaction-scoped advisory lock (this
# namespace, the job's id) before they lock the job's row: PostgreSQL grants it in the order
# it was asked for, so a cancel waiting for a chunk goes before the next chunk. The row lock
# alone does not promise that: a waiter woken by a commit that updated the row locks its new
# version anew, and the next chunk may get there first.
_JOB_TURN_NAMESPACE = 0x42524A  # "BRJ"


def _job_turn(job_id: int) -> None:
    """Waits for the job's turn, until the caller's transaction ends (PostgreSQL; elsewhere
    one writer at a time already)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s, %s)",
            [_JOB_TURN_NAMESPACE, job_id % 2_147_483_647],
        )


def _job_stop(
    *,
    job_id: int,
    state: str,
    allowed: tuple[str, ...],
    action: str,
    actor: Actor,
    reason: str,
) -> BulkReplayJob:
    """Moves a job in one of the ``allowed`` states to ``state`` (cancelled or paused), with
    the operator action ``action`` saying who, why, from which state and how far it got.
    The job's turn and then its row lock are taken first (``_job_turn``): a chunk at work
    commits before (its rows stay replayed) and every later task of the run finds the job
    stopped and does nothing, so it stops after at most its current chunk. Raises
    ``BulkReplayJobNotCancellable`` for a job in any other state, ``BulkReplayJobNotFound``
    for an unknown id."""
    with transaction.atomic():
        _job_turn(job_id)
        job = BulkReplayJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            raise BulkReplayJobNotFound(f"no bulk replay #{job_id}")
        verb = "cancelled" if state == BulkReplayJob.State.CANCELLED else "paused"
        if job.state not in allowed:
            states = ", ".join(allowed[:-1]) + f" or {allowed[-1]}"
            raise BulkReplayJobNotCancellable(
                f"bulk replay #{job_id} is {job.state}: only a {states} job can be {verb}"
            )
        state_before = job.state
        job.state = state
        if state == BulkReplayJob.State.CANCELLED:
            job.finished_at = timezone.now()
        job.lease_expires_at = None
        job.next_chunk_at = None
        job.save(
            update_fields=["state", "finished_at", "lease_expires_at", "next_chunk_at"]
        )
        _control_action_record(
            job=job,
            action=action,
            actor=actor,
            reason=reason,
            state_before=state_before,
        )
    logger.info(
        f"bulk_replay.{verb}",
        extra={"bulk_job_id": job.pk, "actor": actor.name, "processed": job.processed},
    )
    return job


def bulk_replay_job_cancel(
    *,
    job_id: int,
    reason: str,
    cancelled_by: Actor,
) -> BulkReplayJob:
    """Cancels a queued, running or paused job (``_job_stop``). A cancelled job may still be
    resumed (``bulk_replay_job_resume``), from where it stopped."""
    return _job_stop(
        job_id=job_id,
        state=BulkReplayJob.State.CANCELLED,
        allowed=CANCELLABLE_STATES,
        action=OperatorAction.Action.CANCEL_BULK_REPLAY,
        actor=cancelled_by,
        reason=reason,
    )


def bulk_replay_job_pause(
    *,
    job_id: int,
    reason: str,
    paused_by: Actor,
) -> BulkReplayJob:
    """Pauses a queued or running job: it stops as a cancel stops it (``_job_stop``), but
    says ``paused``, an operator's intent to go on: ``bulk_replay_job_resume`` goes on from
    where it stopped, ``bulk_replay_job_cancel`` ends it."""
    return _job_stop(
        job_id=job_id,
        state=BulkReplayJob.State.PAUSED,
        allowed=ACTIVE_STATES,
        action=OperatorAction.Action.PAUSE_BULK_REPLAY,
        actor=paused_by,
        reason=reason,
    )


def bulk_replay_job_resume(
    *,
    job_id: int,
    resumed_by: Actor,
    reason: str = "",
    rate: float | str | None = None,
    publish: bool = True,
) -> BulkReplayJob:
    """Queues a failed, cancelled or interrupted job again, as a new run that goes on from
    where it stopped: only rows past ``last_event_pk`` that still match the filter are taken,
    so no row is replayed twice. The run keeps the job's rate, or takes ``rate`` when given.
    The chunks of the new run name ``resumed_by``; an operator action records the resume.
    One conditional UPDATE decides between concurrent resumes (and a chunk still at work,
    which holds the job's row lock and renews the lease): exactly one wins, the others raise
    ``BulkReplayJobNotResumable``. Raises ``BulkReplayJobNotFound`` for an unknown id and
    ``InvalidBulkReplayRate`` (changing nothing) for a rate out of range."""
    new_rate = bulk_replay_rate_parse(rate)
    now = timezone.now()
    changes = {
        "state": BulkReplayJob.State.QUEUED,
        "run": F("run") + 1,
        "task_seq": 0,
        **resumed_by.columns("resumed_by"),
        "error": "",
        "finished_at": None,
        "lease_expires_at": _lease_end(now),
        "next_chunk_at": None,
        "rate_since": None,
        "rate_base": 0,
        "last_chunk_at": None,
    }
    if new_rate is not None:
        changes["rate"] = new_rate
    with transaction.atomic():
        updated = (
            BulkReplayJob.objects.filter(pk=job_id)
            .filter(_resumable(now))
            .update(**changes)
        )
        job = BulkReplayJob.objects.filter(pk=job_id).first()
        if job is None:
            raise BulkReplayJobNotFound(f"no bulk replay #{job_id}")
        if not updated:
            raise BulkReplayJobNotResumable(
                f"bulk replay #{job_id} is not resumable: it is {job.state}"
                + (
                    f", its lease runs until {job.lease_expires_at:%Y-%m-%d %H:%M:%S%z}"
                    if job.state in ACTIVE_STATES and job.lease_expires_at
                    else ""
                )
            )
        _control_action_record(
            job=job,
            action=OperatorAction.Action.RESUME_BULK_REPLAY,
            actor=resumed_by,
            reason=reason,
            rate_changed=new_rate is not None,
        )
        if publish:
            _run_publish_after_commit(job)
    logger.info(
        "bulk_replay.resumed",
        extra={
            "bulk_job_id": job.pk,
            "actor": resumed_by.name,
            "run": job.run,
            "rate": job.rate,
        },
    )
    return job


def _job_actor(job: BulkReplayJob) -> Actor:
    """Whose run this is: the last resumer, else the starter (else, for a job started before
    starters were recorded, its creator)."""
    if job.resumed_by_name:
        return Actor(name=job.resumed_by_name, user=job.resumed_by)
    if job.started_by_name:
        return Actor(name=job.started_by_name, user=job.started_by)
    if job.created_by_name:
        return Actor(name=job.created_by_name, user=job.created_by)
    return Actor.system()


@dataclass
class _Slice:
    """The slice a task (or the command) is running. Without a rate a slice has no end of its
    own (the task's time bound ends it); with one it takes ``pace.size`` rows, and ``start``
    is where it stands in the schedule (``webhooks.pacing``)."""

    pace: Pace | None = None
    start: datetime | None = None
    taken: int = 0
    replayed: int = 0
    # Every row left waits for an earlier event of its entity: the slice ends, and the next
    # task comes ``ORDER_WAIT_SECONDS`` later (or at the next slice's due time).
    waiting: bool = False

    def room(self, chunk_size: int) -> int:
        if self.pace is None:
            return chunk_size
        return min(chunk_size, self.pace.size - self.taken)

    def full(self) -> bool:
        return self.pace is not None and self.taken >= self.pace.size

    def next_due(self) -> datetime:
        """When the next slice is due (``webhooks.pacing``); a slice with a pace only."""
        if self.pace is None or self.start is None:
            raise RuntimeError("a slice without a rate has no schedule")
        return next_slice_due(start=self.start, replayed=self.replayed, pace=self.pace)


# A job whose every row left waits for an earlier event of its entity looks again this
# much later: long enough not to spin, short next to a worker's round trip.
ORDER_WAIT_SECONDS = 0.1


@dataclass(frozen=True)
class _Pick:
    """What a chunk replays (``chunk``, in id order), how far the job then got (``cursor``),
    the rows it went past that wait (``waiting``), and whether rows remain (``more``)."""

    chunk: list[int]
    cursor: int
    waiting: list[int]
    more: bool


def _chunk_pick(
    job: BulkReplayJob,
    remaining: QuerySet[InboxEvent],
    *,
    limit: int,
    chunk_size: int,
) -> _Pick:
    """The rows of the job's next chunk, at most ``limit``: the rows that waited, then the
    next rows past the cursor, in id order, one event of an entity (a document) at most, and
    none whose entity has an earlier event not finished yet (one a previous chunk replayed,
    still on its way; one waiting for its retry). Those wait in the job, at most a chunk's
    worth (past that the cursor stops), and go in a later chunk, once the earlier event is
    done. Replayed together, two events of a document could be published in two messages (a
    claim's limit, two relays at once) and two workers could apply the later one first: the
    earlier one would then be ``ignored_out_of_order``, its revision never written."""
    matching = _job_queryset(job)
    waited = (
        list(
            matching.filter(pk__in=job.waiting_event_pks)
            .order_by("pk")
            .values_list("pk", "source_id", "entity_id")
        )
        if job.waiting_event_pks
        else []
    )
    room = max(chunk_size - len(waited), 0)
    # One row past the room says whether more follow: no empty last task.
    fetched = list(
        remaining.order_by("pk").values_list("pk", "source_id", "entity_id")[: room + 1]
    )
    fresh, more_fresh = fetched[:room], len(fetched) > room
    candidates = waited + fresh
    first = (
        inbox_entities_first_unfinished(
            keys={(source_id, entity_id) for _, source_id, entity_id in candidates},
            exclude=[pk for pk, _, _ in candidates],
            below=candidates[-1][0],
        )
        if candidates
        else {}
    )
    chunk: list[int] = []
    waiting: list[int] = []
    seen: set[tuple[int, str]] = set()
    cursor = job.last_event_pk
    stopped = False
    for pk, source_id, entity_id in candidates:
        past_cursor = pk > job.last_event_pk
        if len(chunk) >= limit:
            if past_cursor:
                stopped = True  # this row and the next stay past the cursor
                break
            waiting.append(pk)
            continue
        if entity_id:
            key = (source_id, entity_id)
            earlier = first.get(key)
            if key in seen or (earlier is not None and earlier.pk < pk):
                seen.add(key)
                waiting.append(pk)
                cursor = max(cursor, pk)
                continue
            seen.add(key)
        chunk.append(pk)
        cursor = max(cursor, pk)
    return _Pick(
        chunk=chunk,
        cursor=cursor,
        waiting=waiting,
        more=more_fresh or stopped or bool(waiting),
    )


def _chunk_run(
    *, job_id: int, run: int, slice_: _Slice, claim_step: int | None
) -> tuple[BulkReplayJob | None, bool]:
    """Replays the job's next chunk and commits it together with the job's progress, its
    measured rate, the next slice's due time and a renewed lease in one transaction, holding
    the job's row lock: the job's row is written once per chunk, never per event. Returns the
    job and whether rows may remain; does nothing for a job that is finished or cancelled,
    was resumed since (a task of an earlier run), or whose task ``claim_step`` already ran
    (a message delivered twice)."""
    chunk_size = settings.BULK_REPLAY_CHUNK_SIZE
    now = timezone.now()
    fields = [
        "state",
        "started_at",
        "total",
        "processed",
        "last_event_pk",
        "lease_expires_at",
        "finished_at",
        "next_chunk_at",
        "rate_since",
        "rate_base",
        "last_chunk_at",
        "waiting_event_pks",
    ]
    with transaction.atomic():
        _job_turn(job_id)
        job = BulkReplayJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.run != run or job.state not in ACTIVE_STATES:
            return job, False
        if claim_step is not None:
            if job.task_seq != claim_step:
                logger.info(
                    "bulk_replay.task_skipped",
                    extra={"bulk_job_id": job_id, "run": run, "step": claim_step},
                )
                return job, False
            job.task_seq = claim_step + 1
            fields.append("task_seq")
        remaining = _job_queryset(job).filter(pk__gt=job.last_event_pk)
        if job.state == BulkReplayJob.State.QUEUED:  # a run begins
            job.state = BulkReplayJob.State.RUNNING
            job.started_at = job.started_at or now
            job.total = job.processed + remaining.count() + len(job.waiting_event_pks)
        if job.rate is not None and slice_.pace is None:
            slice_.pace = pace_for(
                rate=job.rate, tick=settings.BULK_REPLAY_RATE_TICK_SECONDS
            )
            slice_.start = slice_start(due=job.next_chunk_at, now=now, pace=slice_.pace)
        limit = slice_.room(chunk_size)
        pick = _chunk_pick(job, remaining, limit=limit, chunk_size=chunk_size)
        chunk, more = pick.chunk, pick.more
        slice_.waiting = more and not chunk
        job.last_event_pk = pick.cursor
        job.waiting_event_pks = pick.waiting
        if chunk:
            replayed = 0
            try:
                action = inbox_events_replay(
                    events_queryset=InboxEvent.objects.filter(pk__in=chunk),
                    actor=_job_actor(job),
                    reason=job.reason,
                    action=OperatorAction.Action.BULK_REPLAY,
                    bulk_job=job,
                )
                replayed = action.event_count
            except NothingToReplay:
                pass  # a concurrent replay took every row of this chunk
            job.processed += replayed
            slice_.taken += len(chunk)
            slice_.replayed += replayed
            done = timezone.now()
            job.last_chunk_at = done
            if (
                job.rate_since is None
            ):  # the measure starts at the run's first chunk's end
                job.rate_since, job.rate_base = done, job.processed
        else:
            done = timezone.now()
        if more:
            lease_from = done
            if slice_.full() or slice_.waiting:
                due = slice_.next_due() if slice_.pace is not None else done
                if slice_.waiting:
                    due = max(due, done + timedelta(seconds=ORDER_WAIT_SECONDS))
                job.next_chunk_at = due
                lease_from = max(done, due)
            job.lease_expires_at = _lease_end(lease_from)
        else:
            job.state = BulkReplayJob.State.SUCCEEDED
            job.total = max(job.total, job.processed)
            job.finished_at = done
            job.lease_expires_at = None
            job.next_chunk_at = None
        job.save(update_fields=fields)
    return job, more


def _run_fail(*, job_id: int, run: int, error: str) -> None:
    """Marks the run failed (resumable at once). If even that cannot be written (the database
    is gone), the job's lease runs out and it becomes resumable all the same."""
    try:
        BulkReplayJob.objects.filter(
            pk=job_id, run=run, state__in=ACTIVE_STATES
        ).update(
            state=BulkReplayJob.State.FAILED,
            error=error[:2000],
            finished_at=timezone.now(),
            lease_expires_at=None,
            next_chunk_at=None,
        )
    except Exception:
        logger.exception("bulk_replay.fail_unrecorded", extra={"bulk_job_id": job_id})


def bulk_replay_job_run(
    *,
    job_id: int,
    run: int,
    step: int | None = None,
    seconds: float | None = None,
    progress: Callable[[BulkReplayJob], None] | None = None,
    publish_next: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> BulkReplayJob | None:
    """Runs chunks of the job's ``run`` (one operator action per chunk, linked to the job),
    each chunk's progress committed with it, and calls ``progress`` with the job after each.

    Without a rate: until no row is left or ``seconds`` have passed; then, with
    ``publish_next``, queues the next task of the chain through ``dispatch``. With a rate: one
    slice of the schedule (``webhooks.pacing``), then, with ``publish_next``, the next task is
    queued for the next slice's due time (an ``eta``, so no worker waits); without it (the
    ``replay_events`` command) it sleeps until then and goes on.

    ``step`` is the task of the run this is (the message carries it): a task that already ran
    does nothing. An error fails the job (resumable); a task of an earlier run, or of a
    cancelled job, does nothing."""
    deadline = None if seconds is None else time.monotonic() + seconds
    job = None
    claim = step
    slice_ = _Slice()
    try:
        while True:
            job, more = _chunk_run(
                job_id=job_id, run=run, slice_=slice_, claim_step=claim
            )
            claim = None
            if job is None or job.run != run:
                return job
            if progress is not None:
                progress(job)
            if not more:
                break
            if slice_.waiting or (slice_.pace is not None and slice_.full()):
                slice_ = _Slice()
                if publish_next:
                    bulk_replay_job_publish(
                        job_id=job_id,
                        run=run,
                        step=job.task_seq,
                        eta=job.next_chunk_at,
                    )
                    return job
                due = job.next_chunk_at or timezone.now()
                wait = (due - timezone.now()).total_seconds()
                if wait > 0:
                    sleep(wait)
                continue
            if slice_.pace is not None:
                continue
            if deadline is not None and time.monotonic() >= deadline:
                if publish_next:
                    bulk_replay_job_publish(job_id=job_id, run=run, step=job.task_seq)
                return job
    except BaseException as exc:  # re-raised; an interrupted command fails the job too
        logger.exception(
            "bulk_replay.failed", extra={"bulk_job_id": job_id, "run": run}
        )
        _run_fail(job_id=job_id, run=run, error=str(exc) or type(exc).__name__)
        raise
    if job.state == BulkReplayJob.State.SUCCEEDED:
        logger.info(
            "bulk_replay.finished",
            extra={"bulk_job_id": job.pk, "processed": job.processed},
        )
    return job
