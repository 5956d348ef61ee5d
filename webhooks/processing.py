"""The processing service: one inbox row through its handler, at most once.

Two transactions per run, on purpose:

1. **Claim** (short): lock the row, skip it if it is terminal, not yet due, or leased by a live
   attempt; otherwise count the attempt, set ``processing`` with a lease and record an
   ``InboxAttempt`` row. This commits before the handler runs, so the attempt of a worker that
   dies mid-way stays visible, and its expired lease tells the sweep to re-dispatch the row.
2. **Run**: lock the row again and check that the claim still holds (a run whose lease expired
   and was taken over must not apply anything); call the handler in a savepoint; write the new
   status and close the attempt. The domain change and the status commit together, under the
   row lock, so a concurrent or repeated run of the same row finds it terminal and does
   nothing.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import metrics
from core.errors import PermanentProcessingError

from .handlers import HandlerResult, handler_get
from .models import TERMINAL_STATUSES, InboxAttempt, InboxEvent, ProcessingStatus

logger = logging.getLogger(__name__)

HANDLER_STATUSES = TERMINAL_STATUSES - {ProcessingStatus.DEAD_LETTERED}
STALE_STATUSES = {
    ProcessingStatus.IGNORED_OUT_OF_ORDER,
    ProcessingStatus.IGNORED_DUPLICATE_VERSION,
}
WORKER_LOST_ERROR = "worker lost: the lease expired before the attempt finished"
ERROR_MAX_CHARS = 2000


class Skip:
    MISSING = "missing"
    TERMINAL = "terminal"
    LEASED = "leased"
    NOT_DUE = "not_due"
    LEASE_LOST = "lease_lost"


@dataclass(frozen=True)
class ProcessingOutcome:
    """What one run did: ``status`` is the row's status afterwards; ``skipped`` names why
    nothing was attempted; ``retry_at`` is set when a retry is due at that time."""

    status: str
    skipped: str = ""
    retry_at: datetime | None = None


@dataclass(frozen=True)
class _Claim:
    event_pk: int
    attempt_pk: int
    number: int


def inbox_retry_delay(*, attempt: int) -> float:
    """Exponential backoff with full jitter: uniform in ``[0, min(max, base * 2**(n-1))]``."""
    base = float(settings.INBOX_RETRY_BASE_SECONDS)
    ceiling = float(settings.INBOX_RETRY_MAX_SECONDS)
    exponent = min(max(attempt - 1, 0), 62)
    return random.uniform(0, min(ceiling, base * 2**exponent))


def _log_extra(event: InboxEvent, **fields) -> dict:
    return {
        "correlation_id": event.event_id,
        "inbox_event_id": event.pk,
        "source_id": event.source_id,
        "event_type": event.event_type,
        **fields,
    }


def _error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, PermanentProcessingError):
        text = f"{type(exc).__name__}: {text}"
    return text[:ERROR_MAX_CHARS]


def _dead_letter(event: InboxEvent, *, error: str) -> None:
    event.processing_status = ProcessingStatus.DEAD_LETTERED
    event.error_message = error
    event.next_attempt_at = None
    event.lease_expires_at = None
    event.save(
        update_fields=[
            "processing_status",
            "error_message",
            "next_attempt_at",
            "lease_expires_at",
        ]
    )


@transaction.atomic
def _inbox_event_claim(
    *, inbox_event_id: int, worker: str
) -> _Claim | ProcessingOutcome:
    now = timezone.now()
    event = (
        InboxEvent.objects.select_for_update()
        .defer("raw_body", "headers")
        .filter(pk=inbox_event_id)
        .first()
    )
    if event is None:
        return ProcessingOutcome(status="", skipped=Skip.MISSING)
    status = event.processing_status
    if status in TERMINAL_STATUSES:
        return ProcessingOutcome(status=status, skipped=Skip.TERMINAL)
    if (
        status == ProcessingStatus.PROCESSING
        and event.lease_expires_at
        and event.lease_expires_at > now
    ):
        return ProcessingOutcome(status=status, skipped=Skip.LEASED)
    if (
        status == ProcessingStatus.FAILED
        and event.next_attempt_at
        and event.next_attempt_at > now
    ):
        return ProcessingOutcome(status=status, skipped=Skip.NOT_DUE)

    if status == ProcessingStatus.PROCESSING:
        # The previous attempt's worker died (or hung past its lease): close its attempt.
        InboxAttempt.objects.filter(event=event, finished_at__isnull=True).update(
            finished_at=now,
            outcome=InboxAttempt.Outcome.RETRY,
            resulting_status=ProcessingStatus.FAILED,
            error=WORKER_LOST_ERROR,
        )
        logger.warning(
            "inbox.worker_lost", extra=_log_extra(event, attempts=event.attempts)
        )
        if event.attempts >= settings.INBOX_MAX_ATTEMPTS:
            _dead_letter(event, error=WORKER_LOST_ERROR)
            return ProcessingOutcome(status=ProcessingStatus.DEAD_LETTERED)

    event.attempts += 1
    event.processing_status = ProcessingStatus.PROCESSING
    event.lease_expires_at = now + timedelta(
        seconds=settings.INBOX_PROCESSING_LEASE_SECONDS
    )
    event.save(update_fields=["attempts", "processing_status", "lease_expires_at"])
    attempt = InboxAttempt.objects.create(
        event=event, number=event.attempts, started_at=now, worker=worker[:255]
    )
    return _Claim(event_pk=event.pk, attempt_pk=attempt.pk, number=event.attempts)


def _handler_call(event: InboxEvent) -> HandlerResult:
    handler = handler_get(event.source.handler)
    result = handler(event)
    if result.status not in HANDLER_STATUSES:
        raise ValueError(f"handler returned an invalid status {result.status!r}")
    return result


@transaction.atomic
def _inbox_event_run(*, claim: _Claim) -> tuple[InboxEvent, ProcessingOutcome]:
    event = (
        InboxEvent.objects.select_for_update(of=("self",))
        .select_related("source")
        .get(pk=claim.event_pk)
    )
    if (
        event.processing_status != ProcessingStatus.PROCESSING
        or event.attempts != claim.number
    ):
        # Our lease expired and another run took the row over: it owns the outcome now.
        return event, ProcessingOutcome(
            status=event.processing_status, skipped=Skip.LEASE_LOST
        )

    now_started = timezone.now()
    error: BaseException | None = None
    try:
        with transaction.atomic():  # a failing handler leaves no domain change behind
            result = _handler_call(event)
    except PermanentProcessingError as exc:
        error = exc
    except Exception as exc:  # any other failure may pass: retry with backoff
        error = exc
    now = timezone.now()
    attempt_fields = {"finished_at": now}

    if error is None:
        event.processing_status = result.status
        event.processed_at = now
        event.error_message = result.note[:ERROR_MAX_CHARS]
        event.next_attempt_at = None
        event.lease_expires_at = None
        event.save(
            update_fields=[
                "processing_status",
                "processed_at",
                "error_message",
                "next_attempt_at",
                "lease_expires_at",
            ]
        )
        attempt_fields.update(
            outcome=InboxAttempt.Outcome.SUCCEEDED
            if result.status == ProcessingStatus.PROCESSED
            else InboxAttempt.Outcome.IGNORED,
            resulting_status=result.status,
        )
        outcome = ProcessingOutcome(status=result.status)
    else:
        text = _error_text(error)
        permanent = isinstance(error, PermanentProcessingError)
        if permanent or event.attempts >= settings.INBOX_MAX_ATTEMPTS:
            _dead_letter(event, error=text)
            attempt_fields.update(
                outcome=InboxAttempt.Outcome.DEAD_LETTERED,
                resulting_status=ProcessingStatus.DEAD_LETTERED,
                error=text,
            )
            outcome = ProcessingOutcome(status=ProcessingStatus.DEAD_LETTERED)
        else:
            retry_at = now + timedelta(
                seconds=inbox_retry_delay(attempt=event.attempts)
            )
            event.processing_status = ProcessingStatus.FAILED
            event.error_message = text
            event.next_attempt_at = retry_at
            event.lease_expires_at = None
            # The task publishes the retry for that time; the sweep covers a lost message.
            event.dispatched_at = retry_at
            event.save(
                update_fields=[
                    "processing_status",
                    "error_message",
                    "next_attempt_at",
                    "lease_expires_at",
                    "dispatched_at",
                ]
            )
            attempt_fields.update(
                outcome=InboxAttempt.Outcome.RETRY,
                resulting_status=ProcessingStatus.FAILED,
                error=text,
            )
            outcome = ProcessingOutcome(
                status=ProcessingStatus.FAILED, retry_at=retry_at
            )
    InboxAttempt.objects.filter(pk=claim.attempt_pk).update(**attempt_fields)
    logger.debug(
        "inbox.handler_timing",
        extra=_log_extra(event, seconds=(now - now_started).total_seconds()),
    )
    return event, outcome


def _outcome_record(event: InboxEvent, outcome: ProcessingOutcome) -> None:
    """Metrics and logs, once the outcome is committed."""
    status = outcome.status
    if status == ProcessingStatus.DEAD_LETTERED:
        metrics.DEAD_LETTERS.inc()
        logger.error(
            "inbox.dead_lettered",
            extra=_log_extra(
                event, attempts=event.attempts, error=event.error_message[:500]
            ),
        )
        return
    if status == ProcessingStatus.FAILED:
        logger.warning(
            "inbox.retry_scheduled",
            extra=_log_extra(
                event,
                attempts=event.attempts,
                next_attempt_at=outcome.retry_at.isoformat(),
                error=event.error_message[:500],
            ),
        )
        return
    if status in STALE_STATUSES:
        metrics.WEBHOOK_STALE_EVENTS.inc()
    if event.occurred_at and event.processed_at:
        metrics.WEBHOOK_PROCESSING_LATENCY.observe(
            max((event.processed_at - event.occurred_at).total_seconds(), 0)
        )
    logger.info(
        "inbox.processed",
        extra=_log_extra(event, status=status, attempts=event.attempts),
    )


def inbox_event_process(*, inbox_event_id: int, worker: str = "") -> ProcessingOutcome:
    """Processes one inbox row through its source's handler.

    Idempotent per row: a terminal row is never processed again, and of two concurrent runs
    only the one holding the claim applies anything. Transient failures leave the row
    ``failed`` with ``next_attempt_at`` (exponential backoff, full jitter) until
    ``INBOX_MAX_ATTEMPTS``; ``PermanentProcessingError`` dead-letters at once."""
    claim = _inbox_event_claim(inbox_event_id=inbox_event_id, worker=worker)
    if isinstance(claim, ProcessingOutcome):
        if claim.status == ProcessingStatus.DEAD_LETTERED and not claim.skipped:
            # Dead-lettered at claim time: its last attempt's worker was lost.
            metrics.DEAD_LETTERS.inc()
            logger.error(
                "inbox.dead_lettered",
                extra={"inbox_event_id": inbox_event_id, "error": WORKER_LOST_ERROR},
            )
        elif claim.skipped:
            logger.debug(
                "inbox.skipped",
                extra={"inbox_event_id": inbox_event_id, "reason": claim.skipped},
            )
        return claim
    event, outcome = _inbox_event_run(claim=claim)
    if not outcome.skipped:
        _outcome_record(event, outcome)
    return outcome
