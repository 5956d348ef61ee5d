"""The inbox's outbox sweep: the row's status and times are the source of truth, messages are
only a prompt. Run by ``webhooks.tasks.inbox_sweep_task`` (beat)."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, Q, Value
from django.utils import timezone

from .dispatch import inbox_event_publish
from .models import InboxEvent, ProcessingStatus

logger = logging.getLogger(__name__)

MAX_BATCHES_PER_SWEEP = 20


def inbox_sweep_due_q(*, now) -> Q:
    """Rows whose message may be lost: ``received`` for longer than
    ``INBOX_REDISPATCH_AFTER_SECONDS``, ``failed`` rows whose retry time has come, and
    ``processing`` rows whose lease expired; in each case not dispatched within the last
    ``INBOX_REDISPATCH_AFTER_SECONDS``. Served by ``webhooks_inbox_sweep_idx`` (partial on
    these three statuses).

    A ``received`` row may just be waiting in a long queue: re-publishing it every interval
    would add a message per queued row each time and feed the backlog. Its re-dispatches are
    therefore spaced by half its age as well (dispatched before the midpoint between receipt
    and now), so a row waiting T seconds gets about log2(T / interval) extra messages."""
    stale = now - timedelta(seconds=settings.INBOX_REDISPATCH_AFTER_SECONDS)
    not_recently_dispatched = Q(dispatched_at__isnull=True) | Q(dispatched_at__lt=stale)
    half_age_ago = ExpressionWrapper(
        F("received_at") + (Value(now) - F("received_at")) / 2,
        output_field=DateTimeField(),
    )
    received = Q(processing_status=ProcessingStatus.RECEIVED, received_at__lt=stale) & (
        Q(dispatched_at__isnull=True) | Q(dispatched_at__lt=half_age_ago)
    )
    due = (
        received
        | Q(processing_status=ProcessingStatus.FAILED, next_attempt_at__lte=now)
        | Q(processing_status=ProcessingStatus.PROCESSING, lease_expires_at__lt=now)
    )
    return due & not_recently_dispatched


@transaction.atomic
def _inbox_sweep_claim(*, batch_size: int) -> list[tuple[int, str]]:
    """Claims up to ``batch_size`` due rows and stamps ``dispatched_at``; returns their
    ``(id, event_id)`` pairs. ``SKIP LOCKED``
    leaves rows another sweep (or a running task) holds; once that sweep commits, its stamp
    takes the rows out of the due set, so overlapping sweeps never publish a row twice."""
    now = timezone.now()
    rows = list(
        InboxEvent.objects.select_for_update(skip_locked=True)
        .filter(inbox_sweep_due_q(now=now))
        .order_by("id")
        .values_list("id", "event_id")[:batch_size]
    )
    if rows:
        InboxEvent.objects.filter(id__in=[pk for pk, _ in rows]).update(
            dispatched_at=now
        )
    return rows


def inbox_sweep(*, batch_size: int = 500) -> int:
    """Re-dispatches inbox rows whose message may have been lost; returns how many.

    Works in bounded batches, each claimed and stamped in its own transaction and published
    after it commits. A publish that fails (broker down) is retried by a later sweep, once
    ``INBOX_REDISPATCH_AFTER_SECONDS`` have passed. Each message carries the row's event id as
    its correlation id, as the one published by the ingest request did."""
    published = 0
    for _ in range(MAX_BATCHES_PER_SWEEP):
        rows = _inbox_sweep_claim(batch_size=batch_size)
        for inbox_event_id, event_id in rows:
            if inbox_event_publish(inbox_event_id=inbox_event_id, event_id=event_id):
                published += 1
        if len(rows) < batch_size:
            break
    if published:
        logger.info("inbox.sweep_redispatched", extra={"count": published})
    return published
