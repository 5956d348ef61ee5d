"""Retention: raw bodies of old terminal events, bodies of old evidence of conflicts, and old
signature-failure counters. Separate from deduplication, which needs only the metadata: every
row's ids, hashes and fingerprints stay. Each batch is an operator action."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from core.actors import Actor
from trail.models import OperatorAction
from trail.services import (
    PurgeBodiesDetails,
    PurgeEvidenceBodiesDetails,
    PurgeSignatureFailuresDetails,
    operator_action_record,
)

from .models import TERMINAL_STATUSES, FingerprintMismatch, InboxEvent, SignatureFailure


def purge_stamp(value: datetime) -> str:
    """How a purge's time is written in its operator action, to be compared with the
    ``body_purged_at`` of the rows it purged."""
    return value.astimezone(UTC).isoformat()


# Records one batch of a purge: its row ids, how many bodies went, and their stamp.
_BatchRecord = Callable[[list[int], int, datetime], None]


def _bodies_purge(
    *,
    rows: QuerySet[Any],
    batch_size: int,
    record: _BatchRecord,
    progress: Callable[[int], None] | None,
) -> int:
    """Drops the body of ``rows`` (those not being purged by someone else) in batches, each
    its own short transaction that stamps ``body_purged_at`` and records the batch; returns
    how many bodies were dropped."""
    purged = 0
    model = rows.model
    while True:
        with transaction.atomic():
            ids = list(
                rows.select_for_update(skip_locked=True)
                .filter(body_purged_at__isnull=True)
                .order_by("id")
                .values_list("id", flat=True)[:batch_size]
            )
            if not ids:
                return purged
            stamp = timezone.now()
            count = model._default_manager.filter(id__in=ids).update(
                raw_body=None, body_purged_at=stamp
            )
            record(ids, count, stamp)
            purged += count
        if progress is not None:
            progress(purged)


def inbox_bodies_purge(
    *,
    older_than: datetime,
    actor: Actor,
    batch_size: int = 1000,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Drops the raw body of terminal inbox rows received before ``older_than`` and stamps
    ``body_purged_at``; keeps every other column, so the row still answers duplicates. Never
    touches a row that may still be processed. Works in batches, each its own short
    transaction; returns how many bodies were dropped.

    Each batch is recorded, in its own transaction, as a ``purge_bodies`` operator action that
    names the rows and carries the stamp they got, and the audit app logs each body's purge with
    it, in that transaction: ``audit_verify`` accepts a missing body only where the verifiable
    log holds such a purge (docs/security.md, "What the log holds")."""
    cutoff = purge_stamp(older_than)

    def record(ids: list[int], count: int, stamp: datetime) -> None:
        operator_action_record(
            action=OperatorAction.Action.PURGE_BODIES,
            actor=actor,
            reason=f"retention: terminal events received before {cutoff}",
            event_ids=ids,
            event_count=count,
            details=PurgeBodiesDetails(purged_at=purge_stamp(stamp), older_than=cutoff),
        )

    return _bodies_purge(
        rows=InboxEvent.objects.filter(
            received_at__lt=older_than, processing_status__in=TERMINAL_STATUSES
        ),
        batch_size=batch_size,
        record=record,
        progress=progress,
    )


def evidence_bodies_purge(
    *,
    older_than: datetime,
    actor: Actor,
    batch_size: int = 1000,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Drops the conflicting body of evidence last seen before ``older_than`` (its hashes,
    fingerprints, headers and counts stay) and stamps ``body_purged_at``; each batch, in its
    own transaction, a ``purge_evidence_bodies`` operator action naming the rows and the
    stamp. Returns how many bodies were dropped."""
    cutoff = purge_stamp(older_than)

    def record(ids: list[int], count: int, stamp: datetime) -> None:
        operator_action_record(
            action=OperatorAction.Action.PURGE_EVIDENCE_BODIES,
            actor=actor,
            reason=f"retention: evidence last seen before {cutoff}",
            details=PurgeEvidenceBodiesDetails(
                purged_at=purge_stamp(stamp), older_than=cutoff, mismatch_ids=ids
            ),
        )

    return _bodies_purge(
        rows=FingerprintMismatch.objects.filter(
            Q(last_seen_at__lt=older_than)
            | Q(last_seen_at__isnull=True, received_at__lt=older_than)
        ),
        batch_size=batch_size,
        record=record,
        progress=progress,
    )


@transaction.atomic
def signature_failures_purge(*, older_than: datetime, actor: Actor) -> int:
    """Deletes the signature-failure counters of minutes before ``older_than`` (their
    figures are in the metrics and the logs of their time), recorded as one operator action
    when there were any. Returns how many."""
    deleted, _ = SignatureFailure.objects.filter(window_start__lt=older_than).delete()
    if deleted:
        operator_action_record(
            action=OperatorAction.Action.PURGE_SIGNATURE_FAILURES,
            actor=actor,
            reason="retention: signature-failure counters",
            details=PurgeSignatureFailuresDetails(
                older_than=purge_stamp(older_than), deleted=deleted
            ),
        )
    return deleted
