"""The deduplication ledger's own horizon (docs/subsystems/inbox.md, "The deduplication
ledger"): keys whose day ended INBOX_DEDUP_DAYS before today, and whose inbox row has left,
are deleted in batches along the ledger's primary key, each batch its own short
transaction. A redelivery of such an event is then a new event. PostgreSQL and SQLite
alike: the ledger is there on both."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Max, Min, Q
from django.utils import timezone

from . import statements
from .models import InboxEvent, InboxKey, InboxKeyPurge
from .partitions import DAY, day_start

logger = logging.getLogger(__name__)

# Keys deleted by one statement: a few tens of milliseconds on PostgreSQL (docs/scaling.md,
# "Retention by dropping a partition"), so that the row locks it takes never queue ingest.
KEY_PURGE_BATCH = 10_000


@dataclass(frozen=True)
class KeyPurge:
    received_before: datetime
    deleted: int
    batches: int


def key_purge_cutoff(*, now: datetime | None = None) -> datetime:
    """The keys received before this instant are purged: the start of the day that ended
    INBOX_DEDUP_DAYS before today's start, or the oldest inbox row's received time when that
    is earlier. Keys leave in the order they came, so a row still in the inbox (a day
    retention holds back, or no retention at all) keeps its key and every later one."""
    horizon = day_start(now or timezone.now()) - settings.INBOX_DEDUP_DAYS * DAY
    oldest = InboxEvent.objects.aggregate(oldest=Min("received_at"))["oldest"]
    return horizon if oldest is None else min(horizon, oldest)


def _resume_from() -> int:
    return (
        InboxKeyPurge.objects.order_by("-pk")
        .values_list("resume_from", flat=True)
        .first()
        or 0
    )


def inbox_keys_purge(
    *, now: datetime | None = None, batch_size: int = KEY_PURGE_BATCH
) -> KeyPurge:
    """Deletes the ledger's keys received before ``key_purge_cutoff`` whose inbox row is
    gone, never one whose row is still there. Walks the ledger's primary key (ids grow with
    time) from where the last run stopped, ``batch_size`` keys a batch, each batch one
    DELETE of an id range in its own transaction, and stops at the first batch that holds
    no key past the cutoff. A run that deleted keys is recorded (``InboxKeyPurge``) and
    logged with its counts. Idempotent; safe beside a concurrent run or ingest (a duplicate
    delivered as its key goes waits for the delete, then is a new event)."""
    before = key_purge_cutoff(now=now)
    adapted = InboxKey._meta.get_field("received_at").get_db_prep_value(
        before, connection
    )
    sql = statements.key_purge_sql(connection.vendor)
    start = from_key_id = _resume_from()
    resume: int | None = None
    deleted = batches = 0
    while True:
        batch = (
            InboxKey.objects.filter(pk__gte=start)
            .order_by("pk")[:batch_size]
            .aggregate(
                keys=Count("pk"),
                first=Min("pk"),
                last=Max("pk"),
                past=Count("pk", filter=Q(received_at__lt=before)),
                first_kept=Min("pk", filter=Q(received_at__gte=before)),
            )
        )
        if not batch["past"]:
            break
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                sql, {"first": batch["first"], "last": batch["last"], "before": adapted}
            )
            gone = cursor.rowcount
        deleted += gone
        batches += 1
        # The next run starts at the first key this one left: one past the cutoff whose row
        # is there, or else the first one not yet past it (an id is taken a moment after
        # its received time, so ids and times may cross at the cutoff: an older key after
        # it is taken next time).
        kept = batch["first"] if gone < batch["past"] else batch["first_kept"]
        if kept is not None:
            resume = kept if resume is None else min(resume, kept)
        start = batch["last"] + 1
        if batch["keys"] < batch_size:
            break
    if deleted:
        resume_from = start if resume is None else resume
        InboxKeyPurge.objects.create(
            purged_at=timezone.now(),
            received_before=before,
            deleted=deleted,
            batches=batches,
            from_key_id=from_key_id,
            resume_from=resume_from,
        )
        logger.info(
            "inbox.keys_purged",
            extra={
                "deleted": deleted,
                "batches": batches,
                "received_before": before.isoformat(),
                "from_key_id": from_key_id,
                "resume_from": resume_from,
            },
        )
    return KeyPurge(received_before=before, deleted=deleted, batches=batches)


def oldest_key_overdue_days(*, now: datetime | None = None) -> float:
    """How many days past the purge's cutoff the oldest key is kept (0 when none is): a
    purge that silently does nothing shows here. The oldest key is the first one from where
    the last run stopped, read through the ledger's primary key."""
    oldest = (
        InboxKey.objects.filter(pk__gte=_resume_from())
        .order_by("pk")
        .values_list("received_at", flat=True)
        .first()
    )
    if oldest is None:
        return 0.0
    cutoff = key_purge_cutoff(now=now)
    return max((cutoff - oldest).total_seconds() / 86400, 0.0)
