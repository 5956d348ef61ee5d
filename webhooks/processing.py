"""The processing service: one inbox row through its handler, at most once.

Two transactions per run, on purpose:

1. **Claim** (short): lock the row, skip it if it is terminal, not yet due, or leased by a live
   attempt; otherwise count the attempt, set ``processing`` with a lease and record an
   ``InboxAttempt`` row (the common case is one conditional UPDATE with the attempt's INSERT).
   This commits before the handler runs, so the attempt of a worker that dies mid-way stays
   visible, and its expired lease tells the sweep to re-dispatch the row.
2. **Run**: lock the row again and check that the claim still holds (a run whose lease expired
   and was taken over must not apply anything); call the handler; write the new status and
   close the attempt. The domain change and the status commit together, under the row lock,
   so a concurrent or repeated run of the same row finds it terminal and does nothing. A
   failure rolls all of that back and is recorded in a transaction of its own.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DataError, connection, transaction
from django.utils import timezone

from core.errors import PermanentProcessingError

from . import metrics
from .integrations import HandlerResult, integration_get
from .models import (
    TERMINAL_STATUSES,
    DeadLetterCause,
    InboxAttempt,
    InboxEvent,
    ProcessingStatus,
)

logger = logging.getLogger(__name__)

HANDLER_STATUSES = TERMINAL_STATUSES - {ProcessingStatus.DEAD_LETTERED}
STALE_STATUSES = {
    ProcessingStatus.IGNORED_OUT_OF_ORDER,
    ProcessingStatus.IGNORED_DUPLICATE_VERSION,
}
WORKER_LOST_ERROR = "worker lost: the lease expired before the attempt finished"

_FAST_CLAIM_SQL = f"""
WITH claimed AS (
    UPDATE {InboxEvent._meta.db_table}
       SET processing_status = 'processing',
           attempts = attempts + 1,
           lease_expires_at = %(lease)s
     WHERE id = %(id)s
       AND (processing_status = 'received'
            OR (processing_status = 'failed'
                AND (next_attempt_at IS NULL OR next_attempt_at <= %(now)s)))
    RETURNING id, attempts
)
INSERT INTO {InboxAttempt._meta.db_table}
       (event_id, number, started_at, outcome, resulting_status, error, worker)
SELECT id, attempts, %(now)s, 'started', '', '', %(worker)s FROM claimed
RETURNING id, number
"""  # noqa: S608 - table names from the models, values bound
ERROR_MAX_CHARS = 2000
# The columns a claim and a failure write read: never the ones ingest filled from the body,
# so that a row whose stored values cannot be read back can still be claimed and closed.
_STATE_FIELDS = (
    "event_id",
    "event_type",
    "source_id",
    "processing_status",
    "attempts",
    "next_attempt_at",
    "lease_expires_at",
    "error_message",
    "dead_letter_cause",
)
# What reading a stored value back can raise: PostgreSQL holds years Python's dates cannot
# (psycopg raises DataError), SQLite gives back text that does not parse (ValueError).
_LOAD_ERRORS = (DataError, ValueError, OverflowError)


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


class UnreadableRow(Exception):
    """The row's stored columns cannot be read back (written by an older deployment that did
    not refuse the value): nothing can process it, dead-letter at once."""


def _is_permanent(error: BaseException) -> bool:
    """Retrying cannot help: the domain rejected the data, the database refused a value
    (``DataError`` is about the value, not the connection), or the row cannot be read."""
    return isinstance(error, PermanentProcessingError | DataError | UnreadableRow)


def _error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, PermanentProcessingError | UnreadableRow):
        text = f"{type(exc).__name__}: {text}"
    return text[:ERROR_MAX_CHARS]


def _dead_letter(event: InboxEvent, *, error: str, cause: str) -> None:
    event.processing_status = ProcessingStatus.DEAD_LETTERED
    event.error_message = error
    event.dead_letter_cause = cause
    event.next_attempt_at = None
    event.lease_expires_at = None
    event.save(
        update_fields=[
            "processing_status",
            "error_message",
            "dead_letter_cause",
            "next_attempt_at",
            "lease_expires_at",
        ]
    )


def _inbox_event_claim_fast(*, inbox_event_id: int, worker: str) -> _Claim | None:
    """The common case in one statement: a ``received`` row, or a ``failed`` row whose retry
    is due, becomes ``processing`` with its lease, and its attempt row is inserted, atomically.
    The conditional UPDATE takes the same row lock as ``SELECT ... FOR UPDATE`` and PostgreSQL
    re-checks its condition on the row's latest version after any wait, so two runs can never
    both claim. ``None``: the row is in another state, for ``_inbox_event_claim`` to sort out.

    A data-modifying ``WITH`` is PostgreSQL's: on the embedded SQLite default the claim is
    always ``_inbox_event_claim``'s (SQLite has one writer at a time anyway)."""
    if connection.vendor != "postgresql":
        return None
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            _FAST_CLAIM_SQL,
            {
                "id": inbox_event_id,
                "now": now,
                "lease": now
                + timedelta(seconds=settings.INBOX_PROCESSING_LEASE_SECONDS),
                "worker": worker[:255],
            },
        )
        row = cursor.fetchone()
    if row is None:
        return None
    return _Claim(event_pk=inbox_event_id, attempt_pk=row[0], number=row[1])


@transaction.atomic
def _inbox_event_claim(
    *, inbox_event_id: int, worker: str
) -> _Claim | ProcessingOutcome:
    now = timezone.now()
    event = (
        InboxEvent.objects.select_for_update()
        .only(*_STATE_FIELDS)
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
            _dead_letter(
                event, error=WORKER_LOST_ERROR, cause=DeadLetterCause.EXHAUSTED
            )
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
    result = integration_get(event.source.handler).handle(event)
    if result.status not in HANDLER_STATUSES:
        raise ValueError(f"handler returned an invalid status {result.status!r}")
    return result


class _LeaseLost(Exception):
    def __init__(self, event: InboxEvent):
        super().__init__("lease lost")
        self.event = event


def _unreadable_columns(pk: int) -> list[str]:
    """The columns of the row that cannot be read back, one probe each (a rare path)."""
    names = []
    for field in InboxEvent._meta.concrete_fields:
        try:
            InboxEvent.objects.filter(pk=pk).values_list(field.attname).first()
        except _LOAD_ERRORS:
            names.append(field.name)
    return names


def _claimed_event_lock(*, claim: _Claim, state_only: bool = False) -> InboxEvent:
    """The row, locked, if the claim still holds; ``_LeaseLost`` if our lease expired and
    another run took the row over (that run owns the outcome now). ``state_only``: only the
    columns a failure write needs. ``UnreadableRow`` if the row's columns cannot be read."""
    rows = InboxEvent.objects.select_for_update(of=("self",))
    rows = rows.only(*_STATE_FIELDS) if state_only else rows.select_related("source")
    try:
        event = rows.get(pk=claim.event_pk)
    except _LOAD_ERRORS as exc:
        columns = ", ".join(_unreadable_columns(claim.event_pk)) or "a column"
        raise UnreadableRow(
            f"the stored {columns} cannot be read back: {type(exc).__name__}: {exc}"
        ) from exc
    if (
        event.processing_status != ProcessingStatus.PROCESSING
        or event.attempts != claim.number
    ):
        raise _LeaseLost(event)
    return event


def _success_write(event: InboxEvent, *, claim: _Claim, result: HandlerResult) -> None:
    now = timezone.now()
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
    InboxAttempt.objects.filter(pk=claim.attempt_pk).update(
        finished_at=now,
        outcome=InboxAttempt.Outcome.SUCCEEDED
        if result.status == ProcessingStatus.PROCESSED
        else InboxAttempt.Outcome.IGNORED,
        resulting_status=result.status,
    )


def _failure_write(
    event: InboxEvent, *, claim: _Claim, error: BaseException
) -> ProcessingOutcome:
    now = timezone.now()
    text = _error_text(error)
    attempt_fields = {"finished_at": now, "error": text}
    if _is_permanent(error) or event.attempts >= settings.INBOX_MAX_ATTEMPTS:
        cause = (
            DeadLetterCause.REJECTED
            if _is_permanent(error)
            else DeadLetterCause.EXHAUSTED
        )
        _dead_letter(event, error=text, cause=cause)
        attempt_fields.update(
            outcome=InboxAttempt.Outcome.DEAD_LETTERED,
            resulting_status=ProcessingStatus.DEAD_LETTERED,
        )
        outcome = ProcessingOutcome(status=ProcessingStatus.DEAD_LETTERED)
    else:
        retry_at = now + timedelta(seconds=inbox_retry_delay(attempt=event.attempts))
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
        )
        outcome = ProcessingOutcome(status=ProcessingStatus.FAILED, retry_at=retry_at)
    InboxAttempt.objects.filter(pk=claim.attempt_pk).update(**attempt_fields)
    return outcome


def _inbox_event_run(*, claim: _Claim) -> tuple[InboxEvent, ProcessingOutcome]:
    """Runs the handler and writes its outcome in one transaction with the domain change.

    No savepoint on the way: when the handler (or anything in that transaction) fails, the
    whole transaction rolls back, domain change included, and the failure is recorded in a
    second one, after checking again that the claim still holds."""
    try:
        with transaction.atomic():
            event = _claimed_event_lock(claim=claim)
            result = _handler_call(event)
            _success_write(event, claim=claim, result=result)
        return event, ProcessingOutcome(status=result.status)
    except _LeaseLost as lost:
        return lost.event, ProcessingOutcome(
            status=lost.event.processing_status, skipped=Skip.LEASE_LOST
        )
    except Exception as exc:  # PermanentProcessingError, or anything a retry may cure
        error = exc
    try:
        with transaction.atomic():
            event = _claimed_event_lock(claim=claim, state_only=True)
            return event, _failure_write(event, claim=claim, error=error)
    except _LeaseLost as lost:
        return lost.event, ProcessingOutcome(
            status=lost.event.processing_status, skipped=Skip.LEASE_LOST
        )


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
    ``INBOX_MAX_ATTEMPTS``; ``PermanentProcessingError``, a value the database refuses
    (``DataError``) and a row whose columns cannot be read back dead-letter at once."""
    claim = _inbox_event_claim_fast(
        inbox_event_id=inbox_event_id, worker=worker
    ) or _inbox_event_claim(inbox_event_id=inbox_event_id, worker=worker)
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
