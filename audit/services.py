"""Writes of the audit console: bulk replay jobs, the sealed audit trail, investigations."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from webhooks.models import FingerprintMismatch, InboxEvent, WebhookSource
from webhooks.replay import NothingToReplay, inbox_events_replay, replay_queryset_build
from webhooks.services import webhook_source_rotate

from .models import AuditSeal, AuditSealEntry, BulkReplayJob, OperatorAction

logger = logging.getLogger(__name__)

GENESIS_HASH = "0" * 64


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
    from .tasks import bulk_replay_job_run_task

    updated = BulkReplayJob.objects.filter(
        pk=job.pk, state=BulkReplayJob.State.COUNTED
    ).update(state=BulkReplayJob.State.QUEUED)
    if not updated:
        raise BulkReplayJobNotStartable(
            f"bulk replay #{job.pk} is not waiting to start"
        )
    transaction.on_commit(lambda: bulk_replay_job_run_task.delay(job.pk))
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


# --- Fingerprint mismatches -----------------------------------------------------------------


def fingerprint_mismatches_mark_investigated(
    *, mismatches: QuerySet[FingerprintMismatch], actor: AbstractBaseUser, note: str
) -> OperatorAction:
    """Marks the open mismatches investigated with the note and records one operator action."""
    now = timezone.now()
    with transaction.atomic():
        rows = list(
            FingerprintMismatch.objects.filter(
                pk__in=list(mismatches.values_list("pk", flat=True)),
                investigated_at__isnull=True,
            )
            .select_for_update()
            .order_by("pk")
        )
        ids = [row.pk for row in rows]
        FingerprintMismatch.objects.filter(pk__in=ids).update(
            investigated_at=now, investigated_by=actor, investigation_note=note
        )
        return OperatorAction.objects.create(
            action=OperatorAction.Action.MARK_INVESTIGATED,
            actor=actor,
            actor_name=actor.get_username(),
            reason=note,
            event_ids=sorted({row.event_id for row in rows}),
            event_count=len(ids),
            details={"mismatch_ids": ids},
        )


def webhook_source_rotate_by_operator(
    *,
    source: WebhookSource,
    secret: str,
    grace_seconds: int,
    actor: AbstractBaseUser,
    reason: str,
) -> OperatorAction:
    """Rotates the source's secret (``webhook_source_rotate``) and records who did it and why,
    in one transaction. The secret is the operator's own: the admin never shows one."""
    with transaction.atomic():
        webhook_source_rotate(source=source, secret=secret, grace_seconds=grace_seconds)
        return OperatorAction.objects.create(
            action=OperatorAction.Action.ROTATE_SECRET,
            actor=actor,
            actor_name=actor.get_username(),
            reason=reason,
            details={"source": source.slug, "grace_seconds": grace_seconds},
        )


# --- Sealed audit trail ---------------------------------------------------------------------


def row_digest(*, inbox_event_id: int, payload_hash: str, received_at: datetime) -> str:
    received = received_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    line = f"{inbox_event_id}|{payload_hash}|{received}"
    return hashlib.sha256(line.encode()).hexdigest()


def rows_hash_compute(digests: list[str]) -> str:
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


def seal_hash_compute(
    *, previous_hash: str, rows_hash: str, sequence: int, row_count: int
) -> str:
    line = f"{previous_hash}|{rows_hash}|{sequence}|{row_count}"
    return hashlib.sha256(line.encode()).hexdigest()


_SEAL_LOCK_KEY = 0x5EA1  # one sealer at a time, across every worker


def inbox_rows_seal(
    *, now: datetime | None = None, max_batches: int = 50
) -> list[AuditSeal]:
    """Seals inbox rows older than the horizon that no seal holds yet, in id order, into
    hash-chained batches. Idempotent and safe to run concurrently (one sealer at a time)."""
    now = now or timezone.now()
    horizon = now - timedelta(seconds=settings.AUDIT_SEAL_HORIZON_SECONDS)
    lookback = now - timedelta(seconds=settings.AUDIT_SEAL_LOOKBACK_SECONDS)
    batch_size = settings.AUDIT_SEAL_BATCH_SIZE
    seals: list[AuditSeal] = []
    for _ in range(max_batches):
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_try_advisory_xact_lock(%s)", [_SEAL_LOCK_KEY]
                    )
                    if not cursor.fetchone()[0]:
                        return seals
            last = AuditSeal.objects.order_by("-sequence").first()
            # Rows below the floor were all sealed (or committed) long ago: a transaction
            # open for longer than the lookback is not a case the trail has to cover.
            floor = 0
            old_seal = (
                AuditSeal.objects.filter(created_at__lt=lookback)
                .order_by("-sequence")
                .first()
            )
            if old_seal is not None:
                floor = old_seal.last_event_id
            # NOT EXISTS: an anti-join on the entries' unique index, whatever their number.
            candidates = list(
                InboxEvent.objects.filter(pk__gt=floor, received_at__lt=horizon)
                .filter(
                    ~Exists(
                        AuditSealEntry.objects.filter(inbox_event_id=OuterRef("pk"))
                    )
                )
                .order_by("pk")
                .values_list("pk", "payload_hash", "received_at")[:batch_size]
            )
            if not candidates:
                return seals
            digests = [
                row_digest(inbox_event_id=pk, payload_hash=ph, received_at=ra)
                for pk, ph, ra in candidates
            ]
            sequence = (last.sequence + 1) if last else 1
            previous_hash = last.seal_hash if last else GENESIS_HASH
            rows_hash = rows_hash_compute(digests)
            seal = AuditSeal.objects.create(
                sequence=sequence,
                previous_hash=previous_hash,
                rows_hash=rows_hash,
                seal_hash=seal_hash_compute(
                    previous_hash=previous_hash,
                    rows_hash=rows_hash,
                    sequence=sequence,
                    row_count=len(candidates),
                ),
                row_count=len(candidates),
                first_event_id=candidates[0][0],
                last_event_id=candidates[-1][0],
                horizon=horizon,
            )
            AuditSealEntry.objects.bulk_create(
                AuditSealEntry(inbox_event_id=pk, seal=seal, row_digest=digest)
                for (pk, _, _), digest in zip(candidates, digests, strict=True)
            )
            seals.append(seal)
        logger.info(
            "audit.sealed",
            extra={"sequence": seal.sequence, "row_count": seal.row_count},
        )
        if len(candidates) < batch_size:
            break
    return seals


@dataclass
class VerifyReport:
    seals_checked: int = 0
    rows_checked: int = 0
    broken_seals: list[str] = field(default_factory=list)
    altered_rows: list[int] = field(default_factory=list)
    deleted_rows: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.broken_seals or self.altered_rows or self.deleted_rows)


def audit_trail_verify(*, chunk_size: int = 5000) -> VerifyReport:
    """Recomputes the chain from the first seal and compares every sealed row with the inbox
    as it is now: names the seals whose chain or entries were tampered with, and the rows that
    were altered or deleted since they were sealed."""
    report = VerifyReport()
    previous_hash = GENESIS_HASH
    expected_sequence = 1
    for seal in AuditSeal.objects.order_by("sequence").iterator(chunk_size=500):
        report.seals_checked += 1
        entries = list(
            AuditSealEntry.objects.filter(seal=seal)
            .order_by("inbox_event_id")
            .values_list("inbox_event_id", "row_digest")
        )
        problems = []
        if seal.sequence != expected_sequence:
            problems.append(f"sequence {seal.sequence}, expected {expected_sequence}")
        if seal.previous_hash != previous_hash:
            problems.append("previous_hash does not match the previous seal")
        digests = [digest for _, digest in entries]
        if (
            len(entries) != seal.row_count
            or rows_hash_compute(digests) != seal.rows_hash
        ):
            problems.append("its entries do not match rows_hash")
        recomputed = seal_hash_compute(
            previous_hash=seal.previous_hash,
            rows_hash=seal.rows_hash,
            sequence=seal.sequence,
            row_count=seal.row_count,
        )
        if recomputed != seal.seal_hash:
            problems.append("seal_hash does not match its contents")
        if problems:
            report.broken_seals.append(f"seal #{seal.sequence}: " + "; ".join(problems))
        for start in range(0, len(entries), chunk_size):
            part = dict(entries[start : start + chunk_size])
            current = {
                pk: row_digest(inbox_event_id=pk, payload_hash=ph, received_at=ra)
                for pk, ph, ra in InboxEvent.objects.filter(pk__in=part).values_list(
                    "pk", "payload_hash", "received_at"
                )
            }
            for pk, digest in part.items():
                report.rows_checked += 1
                if pk not in current:
                    report.deleted_rows.append(pk)
                elif current[pk] != digest:
                    report.altered_rows.append(pk)
        previous_hash = seal.seal_hash
        expected_sequence = seal.sequence + 1
    return report
