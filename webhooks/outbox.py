"""The inbox as an outbox (docs/architecture.md, "Request paths"): which rows wait for a
processing message, claimed by the relay (``core.relay``) in each worker.

A row waits for a message when it is ``received`` and no message was published for it yet
(``dispatched_at`` is null: a new event, a replayed one), or ``failed`` with its retry due and
no message for that retry. Both are read through partial indexes that hold only such rows, so
a claim stays an index probe however large the inbox grows. The sweep publishes again what a
lost message left behind (see ``inbox_sweep_due_q``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import DateTimeField, ExpressionWrapper, F, Q, QuerySet, Value
from django.utils import timezone

from core.relay import Outbox, Publication, relay_round

from .dispatch import PROCESS_TASK
from .models import InboxEvent, ProcessingStatus


def _waiting_new() -> QuerySet[InboxEvent]:
    return InboxEvent.objects.filter(
        processing_status=ProcessingStatus.RECEIVED, dispatched_at__isnull=True
    )


def _waiting_retries(now: datetime) -> QuerySet[InboxEvent]:
    return InboxEvent.objects.filter(
        processing_status=ProcessingStatus.FAILED,
        dispatched_at__isnull=True,
        next_attempt_at__lte=now,
    )


def inbox_sweep_due_q(*, now) -> Q:
    """The sweep's rows, whose message may be lost: ``received`` for longer than
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


def _publications(rows: list[tuple[int, str]]) -> list[Publication]:
    """Messages of at most ``INBOX_BATCH_SIZE`` rows. A message of one row carries its event
    id as the correlation id; the worker binds each row's own while it processes it."""
    size = max(settings.INBOX_BATCH_SIZE, 1)
    publications = []
    for start in range(0, len(rows), size):
        chunk = rows[start : start + size]
        publications.append(
            Publication(
                task=PROCESS_TASK,
                args=[[pk for pk, _ in chunk]],
                correlation_id=chunk[0][1] if len(chunk) == 1 else "",
            )
        )
    return publications


def _take(queryset: QuerySet[InboxEvent], limit: int, now: datetime) -> list[tuple]:
    """Locks up to ``limit`` rows of ``queryset`` that no other relay holds, in id order, and
    stamps them dispatched. Runs inside the relay's transaction."""
    rows = list(
        queryset.select_for_update(skip_locked=True)
        .order_by("id")
        .values_list("id", "event_id")[:limit]
    )
    if rows:
        InboxEvent.objects.filter(id__in=[pk for pk, _ in rows]).update(
            dispatched_at=now
        )
    return rows


def inbox_outbox_claim(limit: int) -> tuple[int, list[Publication]]:
    now = timezone.now()
    rows = _take(_waiting_new(), limit, now)
    if len(rows) < limit:
        rows += _take(_waiting_retries(now), limit - len(rows), now)
    return len(rows), _publications(rows)


def inbox_outbox_sweep(limit: int) -> tuple[int, list[Publication]]:
    now = timezone.now()
    rows = _take(InboxEvent.objects.filter(inbox_sweep_due_q(now=now)), limit, now)
    return len(rows), _publications(rows)


def inbox_outbox_has_waiting() -> bool:
    """Two index probes, outside any transaction: an idle relay takes no lock."""
    return _waiting_new().exists() or _waiting_retries(timezone.now()).exists()


def inbox_outbox_oldest_waiting() -> datetime | None:
    """When the oldest event still waiting for its first message was received (the lowest
    id: one probe of the partial index)."""
    return _waiting_new().order_by("id").values_list("received_at", flat=True).first()


INBOX_OUTBOX = Outbox(
    name="inbox",
    claim=inbox_outbox_claim,
    sweep=inbox_outbox_sweep,
    oldest_waiting=inbox_outbox_oldest_waiting,
    has_waiting=inbox_outbox_has_waiting,
)


# Batches of one ``inbox_sweep`` call at most: a relay goes on in its next rounds.
MAX_SWEEP_BATCHES = 20


def inbox_sweep(*, limit: int = 500) -> int:
    """One sweep of the inbox outbox, as the relay runs it: batches of up to ``limit`` rows,
    each claimed, stamped and published in its own transaction, until one comes back short
    (at most ``MAX_SWEEP_BATCHES``). Returns the rows published again."""
    published = 0
    for _ in range(MAX_SWEEP_BATCHES):
        count = relay_round(INBOX_OUTBOX, INBOX_OUTBOX.sweep, limit)
        published += count
        if count < limit:
            break
    return published
