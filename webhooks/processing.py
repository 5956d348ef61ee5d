"""The processing service: inbox rows through their integration's handler, at most once each
(docs/subsystems/processing.md, "A batch of inbox events on a worker" and "An inbox row").

A worker takes a batch of rows (one message carries up to ``INBOX_BATCH_SIZE`` ids):

1. **Sets** (PostgreSQL, a message's first delivery): the rows that can be taken are read in
   one statement, without a lock or a write (``statements.batch_read_sql``); an
   integration's rows go as a set: ``handle_batch`` and one close of every row with its
   attempt (``statements.BATCH_FINISH_SQL``), in one transaction, the close taking each row
   only if nothing claimed it since the read. A set that does not commit leaves nothing.
2. **Claims** of the other rows, in one statement, committed (``statements.BATCH_CLAIM_SQL``):
   every ``received`` row and every ``failed`` row whose retry is due becomes ``processing``
   with its lease and an ``InboxAttempt``. Rows in any other state are sorted out one by one
   under their row lock (terminal, leased, not due, held by a paused source, or left by a
   worker that died). Each claimed event runs in a transaction of its own through the ORM:
   its domain change, then its status and its attempt, closed only while the claim still
   holds. A failure rolls that back and is recorded in a second transaction; retries back off
   per event and poison events dead-letter per event.

Rows of a paused source are never taken (docs/subsystems/relay.md, "Pausing a source").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.db import DataError, connection, transaction
from django.db.models import DEFERRED, DateTimeField, Model
from django.utils import timezone

from core.backoff import full_jitter_delay
from core.db import SessionLockTimeout, set_statement_execute
from core.errors import PermanentProcessingError
from core.logging import correlation_id_bound
from core.tracing import links_add, span, tracing_enabled

from . import metrics, statements
from .integrations import (
    BatchIntegration,
    HandlerResult,
    integration_batch_get,
    integration_get,
)
from .models import (
    TERMINAL_STATUSES,
    DeadLetterCause,
    InboxAttempt,
    InboxEvent,
    ProcessingStatus,
    SourceHold,
    WebhookSource,
)
from .pausing import inbox_event_held

logger = logging.getLogger(__name__)

HANDLER_STATUSES = TERMINAL_STATUSES - {ProcessingStatus.DEAD_LETTERED}
STALE_STATUSES = {
    ProcessingStatus.IGNORED_OUT_OF_ORDER,
    ProcessingStatus.IGNORED_DUPLICATE_VERSION,
}
WORKER_LOST_ERROR = "worker lost: the lease expired before the attempt finished"
ERROR_MAX_CHARS = 2000

# The columns the one-by-one claim reads: never the ones ingest filled from the body, so
# that a row whose stored values cannot be read back can still be claimed and closed.
_STATE_FIELDS = (
    "event_id",
    "received_at",
    "event_type",
    "source_id",
    "processing_status",
    "attempts",
    "next_attempt_at",
    "lease_expires_at",
    "dispatched_at",
    "traceparent",
)
# What the one-by-one claim reads of the source: its handler, and whether it holds its rows.
_SOURCE_STATE_FIELDS = ("source__slug", "source__handler")


class Skip(StrEnum):
    """Why a row was not attempted (``ProcessingOutcome.skipped``; counted by the batch's
    log line)."""

    MISSING = "missing"
    TERMINAL = "terminal"
    LEASED = "leased"
    NOT_DUE = "not_due"
    LEASE_LOST = "lease_lost"
    HELD = "held"


@dataclass(frozen=True)
class ProcessingOutcome:
    """What one run did: ``status`` is the row's status afterwards; ``skipped`` names why
    nothing was attempted; ``retry_at`` is set when a retry is due at that time."""

    status: str
    skipped: str = ""
    retry_at: datetime | None = None


@dataclass
class _Claim:
    event: InboxEvent  # built from the claim's columns, or loaded one by one
    attempt_pk: int
    handler: str
    # The row's received time (its time partition's key), for the close to name its day.
    received_at: datetime


def inbox_retry_delay(*, attempt: int) -> float:
    """Exponential backoff with full jitter (``core.backoff``) from
    ``INBOX_RETRY_BASE_SECONDS`` up to ``INBOX_RETRY_MAX_SECONDS``."""
    return full_jitter_delay(
        attempt=attempt,
        base=settings.INBOX_RETRY_BASE_SECONDS,
        ceiling=settings.INBOX_RETRY_MAX_SECONDS,
    )


def _log_extra(event: InboxEvent, **fields) -> dict:
    return {
        "correlation_id": event.event_id,
        "inbox_event_id": event.pk,
        "source_id": event.source_id,
        "event_type": event.event_type,
        **fields,
    }


def _is_permanent(error: BaseException) -> bool:
    """Retrying cannot help: the domain rejected the data, or the database refused a value
    (``DataError`` is about the value, not the connection)."""
    return isinstance(error, PermanentProcessingError | DataError)


def _error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, PermanentProcessingError):
        text = f"{type(exc).__name__}: {text}"
    return text[:ERROR_MAX_CHARS]


def _instant(epoch) -> datetime | None:
    """A stored instant, from its seconds since the epoch; ``None`` if Python cannot hold it
    (the body, parsed again by the handler, names the value)."""
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(float(epoch), tz=UTC)
    except (OverflowError, ValueError, OSError):
        return None


# --- claim ---------------------------------------------------------------------------------


class _Loaded:
    """Instances of ``model`` built from some of its columns, as a query loads them
    (``Model.from_db``): the other fields deferred, read from the database if ever touched.
    ``model(**columns)`` would compute every other field's default, per row, which cost
    the claim about as much as the rest of it (docs/bench-log/2026-12-01.md, "Processing and the
    relay")."""

    def __init__(self, model: type[Model], names: tuple[str, ...]) -> None:
        self.model = model
        attnames = [field.attname for field in model._meta.concrete_fields]
        self.attnames = attnames
        self.positions = [attnames.index(name) for name in names]

    def build(self, *values):
        row = [DEFERRED] * len(self.attnames)
        for position, value in zip(self.positions, values, strict=True):
            row[position] = value
        return self.model.from_db(connection.alias, self.attnames, row)


_CLAIMED_EVENT = _Loaded(InboxEvent, (*statements.CLAIMED_FIELDS, "processing_status"))
_CLAIMED_SOURCE = _Loaded(WebhookSource, statements.CLAIMED_SOURCE_FIELDS)
# The claimed fields that come back as seconds since the epoch (``statements``).
_CLAIMED_INSTANTS = [
    position
    for position, name in enumerate(statements.CLAIMED_FIELDS)
    if isinstance(InboxEvent._meta.get_field(name), DateTimeField)
]
_CLAIMED_SOURCE_ID = statements.CLAIMED_FIELDS.index("source_id")


def _batch_claim_fast(*, ids: list[int], worker: str) -> list[_Claim]:
    """The common case of the claims taken before their runs in one statement (PostgreSQL):
    see ``statements.BATCH_CLAIM_SQL``. The UPDATE takes the rows' locks and PostgreSQL
    re-checks its condition on each row's latest version after any wait, so two claims can
    never both take a row. On the embedded SQLite default every row is claimed one by one
    (one writer at a time anyway)."""
    if connection.vendor != "postgresql" or not ids:
        return []
    now = timezone.now()
    days, received = _batch_received(ids)
    rows = set_statement_execute(
        statements.batch_claim_sql(days),
        {
            "ids": list(ids),
            "received": received,
            "now": now,
            "lease": now + timedelta(seconds=settings.INBOX_PROCESSING_LEASE_SECONDS),
            "worker": worker[:255],
        },
        lock_timeout_ms=settings.INBOX_LOCK_TIMEOUT_MS,
        planned_for_values=True,
    )
    return _claims_built(rows)


def _batch_read(*, ids: list[int], now: datetime) -> list[_Claim]:
    """The rows of ``ids`` a set can take (PostgreSQL), read without a lock or a write:
    ``statements.batch_read_sql``. Each claim's ``attempt_pk`` is 0 (its attempt is written
    by the set's close, ``statements.batch_finish_sql``)."""
    days, received = _batch_received(ids)
    rows = set_statement_execute(
        statements.batch_read_sql(days),
        {"ids": list(ids), "received": received, "now": now},
        planned_for_values=True,
    )
    return _claims_built(rows)


def _claims_built(rows: list[tuple]) -> list[_Claim]:
    """The claims of the rows a claim or a read returned (``statements.CLAIMED_FIELDS``, the
    source's, the received time, the attempt's id)."""
    claims = []
    for row in rows:
        *fields, slug, handler, received_at, attempt_pk = row
        for position in _CLAIMED_INSTANTS:
            fields[position] = _instant(fields[position])
        event = _CLAIMED_EVENT.build(*fields, ProcessingStatus.PROCESSING)
        source_id = fields[_CLAIMED_SOURCE_ID]
        event.source = _CLAIMED_SOURCE.build(source_id, slug, handler)
        claims.append(
            _Claim(
                event=event,
                attempt_pk=attempt_pk,
                handler=handler,
                received_at=received_at,
            )
        )
    return claims


def _batch_received(
    ids: list[int],
) -> tuple[tuple[datetime, datetime] | None, list[datetime]]:
    """The days the rows ``ids`` were received on and each row's received time, from their
    keys in the ledger, for the claim and a set's read to name
    (``statements.received_days``): planned over those days' time partitions alone, however
    many the inbox holds, and reading the rows alone whatever the partition's statistics
    say (docs/scaling.md, "Time partitions of the inbox"). ``(None, [])`` (every partition)
    when a row has no key: one that is gone, say."""
    received, found = set_statement_execute(
        statements.BATCH_RECEIVED_SQL, {"ids": list(ids)}
    )[0]
    if found < len(set(ids)):
        return None, []
    return statements.received_days(received), received


def _dead_letter_at_claim(event: InboxEvent, *, error: str) -> None:
    InboxEvent.objects.filter(pk=event.pk).update(
        processing_status=ProcessingStatus.DEAD_LETTERED,
        error_message=error,
        dead_letter_cause=DeadLetterCause.EXHAUSTED,
        next_attempt_at=None,
        lease_expires_at=None,
    )


@transaction.atomic
def _inbox_event_claim(
    *, inbox_event_id: int, worker: str
) -> _Claim | ProcessingOutcome:
    """One row, under its row lock: the rows the batch claim did not take."""
    now = timezone.now()
    event = (
        InboxEvent.objects.select_for_update(of=("self",))
        .select_related("source")
        .only(*_STATE_FIELDS, *_SOURCE_STATE_FIELDS)
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
    hold = SourceHold.objects.filter(source_id=event.source_id).first()
    if inbox_event_held(event, hold):
        # Its message came before the pause, or is an old one: the relay publishes the row
        # again when the source's drain releases it. A row whose lease expired stays as it
        # is; the sweep takes it once the source is no longer held.
        if status != ProcessingStatus.PROCESSING and event.dispatched_at is not None:
            InboxEvent.objects.filter(pk=event.pk).update(dispatched_at=None)
        return ProcessingOutcome(status=status, skipped=Skip.HELD)

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
            _dead_letter_at_claim(event, error=WORKER_LOST_ERROR)
            return ProcessingOutcome(status=ProcessingStatus.DEAD_LETTERED)

    event.attempts += 1
    event.processing_status = ProcessingStatus.PROCESSING
    event.lease_expires_at = now + timedelta(
        seconds=settings.INBOX_PROCESSING_LEASE_SECONDS
    )
    InboxEvent.objects.filter(pk=event.pk).update(
        attempts=event.attempts,
        processing_status=ProcessingStatus.PROCESSING,
        lease_expires_at=event.lease_expires_at,
    )
    attempt = InboxAttempt.objects.create(
        event=event,
        event_received_at=event.received_at,
        number=event.attempts,
        started_at=now,
        worker=worker[:255],
    )
    return _Claim(
        event=event,
        attempt_pk=attempt.pk,
        handler=event.source.handler,
        received_at=event.received_at,
    )


def _body_load(claim: _Claim) -> None:
    """The columns the handler reads that the one-by-one claim left out."""
    if "raw_body" not in claim.event.get_deferred_fields():
        return
    row = InboxEvent.objects.filter(pk=claim.event.pk)
    columns = ("raw_body", "entity_id", "entity_type", "source_version")
    try:
        values = row.values(*columns, "occurred_at").get()
    except (OverflowError, ValueError):
        # A date the database holds and Python cannot (a year 0, stored by a release before
        # ingest refused it): read as missing, as the set claim's ``_instant`` does, so that
        # the handler, parsing the body again, rejects the event naming the value.
        values = {**row.values(*columns).get(), "occurred_at": None}
    for name, value in values.items():
        setattr(claim.event, name, value)


# --- run -----------------------------------------------------------------------------------


class _LeaseLost(Exception):
    """Our lease expired and another run took the row over: that run owns the outcome."""


def _close(
    claim: _Claim,
    *,
    status: str,
    outcome: str,
    error: str = "",
    cause: str = "",
    next_attempt_at: datetime | None = None,
) -> None:
    """The row's outcome and its attempt's, while the claim holds; ``_LeaseLost`` otherwise.
    The per-event path (the embedded SQLite default, an integration without ``handle_batch``,
    a set that did not commit) through the ORM: a conditional update of the row, then of its
    attempt; a set closes with ``statements.BATCH_FINISH_SQL``."""
    now = timezone.now()
    event = claim.event
    terminal_ok = status in HANDLER_STATUSES
    fields = {
        "processing_status": status,
        "processed_at": now if terminal_ok else None,
        "error_message": error,
        "dead_letter_cause": cause,
        "next_attempt_at": next_attempt_at,
        "lease_expires_at": None,
    }
    if next_attempt_at is not None:
        fields["dispatched_at"] = None
    closed = InboxEvent.objects.filter(
        pk=event.pk,
        processing_status=ProcessingStatus.PROCESSING,
        attempts=event.attempts,
    ).update(**fields)
    if not closed:
        raise _LeaseLost()
    InboxAttempt.objects.filter(pk=claim.attempt_pk).update(
        finished_at=now,
        outcome=outcome,
        resulting_status=status,
        error="" if terminal_ok else error,
    )
    event.processing_status = status
    event.processed_at = now if terminal_ok else None
    event.error_message = error
    event.next_attempt_at = next_attempt_at


def _success_write(claim: _Claim, result: HandlerResult) -> None:
    _close(
        claim,
        status=result.status,
        outcome=InboxAttempt.Outcome.SUCCEEDED
        if result.status == ProcessingStatus.PROCESSED
        else InboxAttempt.Outcome.IGNORED,
        error=result.note[:ERROR_MAX_CHARS],
    )


def _failure_write(claim: _Claim, error: BaseException) -> ProcessingOutcome:
    text = _error_text(error)
    if _is_permanent(error) or claim.event.attempts >= settings.INBOX_MAX_ATTEMPTS:
        cause = (
            DeadLetterCause.REJECTED
            if _is_permanent(error)
            else DeadLetterCause.EXHAUSTED
        )
        _close(
            claim,
            status=ProcessingStatus.DEAD_LETTERED,
            outcome=InboxAttempt.Outcome.DEAD_LETTERED,
            error=text,
            cause=cause,
        )
        return ProcessingOutcome(status=ProcessingStatus.DEAD_LETTERED)
    retry_at = timezone.now() + timedelta(
        seconds=inbox_retry_delay(attempt=claim.event.attempts)
    )
    # The relay publishes the row again once the retry is due (``dispatched_at`` cleared).
    _close(
        claim,
        status=ProcessingStatus.FAILED,
        outcome=InboxAttempt.Outcome.RETRY,
        error=text,
        next_attempt_at=retry_at,
    )
    return ProcessingOutcome(status=ProcessingStatus.FAILED, retry_at=retry_at)


def _handler_call(claim: _Claim) -> HandlerResult:
    _body_load(claim)
    result = integration_get(claim.handler).handle(claim.event)
    if result.status not in HANDLER_STATUSES:
        raise ValueError(f"handler returned an invalid status {result.status!r}")
    return result


def _claimed_event_run(claim: _Claim) -> ProcessingOutcome:
    """Runs the handler and writes its outcome in one transaction with the domain change.

    No savepoint on the way: when the handler (or anything in that transaction) fails, the
    whole transaction rolls back, domain change included, and the failure is recorded in a
    second one, under the same claim condition."""
    try:
        with transaction.atomic():
            result = _handler_call(claim)
            _success_write(claim, result)
        return ProcessingOutcome(status=result.status)
    except _LeaseLost:
        return ProcessingOutcome(status="", skipped=Skip.LEASE_LOST)
    except Exception as exc:  # PermanentProcessingError, or anything a retry may cure
        error = exc
    try:
        with transaction.atomic():
            return _failure_write(claim, error)
    except _LeaseLost:
        return ProcessingOutcome(status="", skipped=Skip.LEASE_LOST)


@dataclass(frozen=True)
class _Close:
    """A run's outcome, as ``_close`` writes it."""

    status: str
    outcome: str
    error: str = ""
    cause: str = ""


def _result_close(result: HandlerResult | PermanentProcessingError) -> _Close:
    if isinstance(result, PermanentProcessingError):
        return _Close(
            status=ProcessingStatus.DEAD_LETTERED,
            outcome=InboxAttempt.Outcome.DEAD_LETTERED,
            error=_error_text(result),
            cause=DeadLetterCause.REJECTED,
        )
    if result.status not in HANDLER_STATUSES:
        raise ValueError(f"handler returned an invalid status {result.status!r}")
    return _Close(
        status=result.status,
        outcome=InboxAttempt.Outcome.SUCCEEDED
        if result.status == ProcessingStatus.PROCESSED
        else InboxAttempt.Outcome.IGNORED,
        error=result.note[:ERROR_MAX_CHARS],
    )


def _batch_finish(
    claims: list[_Claim], closes: list[_Close], *, worker: str, started: datetime
) -> None:
    """Every read row's outcome and its attempt in one statement
    (``statements.BATCH_FINISH_SQL``); ``_LeaseLost`` when one of the rows was taken since
    the read."""
    now = timezone.now()
    processed_at = [now if c.status in HANDLER_STATUSES else None for c in closes]
    received = [claim.received_at for claim in claims]
    closed = set_statement_execute(
        statements.batch_finish_sql(statements.received_days(received)),
        {
            "ids": [claim.event.pk for claim in claims],
            "received": received,
            "numbers": [claim.event.attempts for claim in claims],
            "statuses": [c.status for c in closes],
            "processed_at": processed_at,
            "errors": [c.error for c in closes],
            "causes": [c.cause for c in closes],
            "outcomes": [c.outcome for c in closes],
            "attempt_errors": [
                "" if c.status in HANDLER_STATUSES else c.error for c in closes
            ],
            "started": started,
            "now": now,
            "worker": worker[:255],
        },
        planned_for_values=True,
    )
    if len(closed) != len(claims):
        raise _LeaseLost()
    for claim, close, at in zip(claims, closes, processed_at, strict=True):
        event = claim.event
        event.processing_status = close.status
        event.processed_at = at
        event.error_message = close.error
        event.next_attempt_at = None


def _claims_batch_run(
    claims: list[_Claim],
    integration: BatchIntegration,
    *,
    worker: str,
    started: datetime,
) -> list[ProcessingOutcome] | None:
    """The rows of one integration, as read by ``_batch_read``, as a set: ``handle_batch``
    and one close of every row with its attempt, in one transaction. ``None`` when the set
    did not commit (a value the database refused, a lock waited for too long, a row taken
    since the read, anything raised): nothing of it is left, and the caller claims the rows
    and runs them per event, which gives each its own outcome, retry or dead letter."""
    try:
        with transaction.atomic():
            results = integration.handle_batch([claim.event for claim in claims])
            closes = [_result_close(result) for result in results]
            if len(closes) != len(claims):
                raise ValueError(
                    "handle_batch returned a result count unlike the batch's"
                )
            _batch_finish(claims, closes, worker=worker, started=started)
    except Exception as exc:  # the per-event path sorts each event out
        logger.warning(
            "inbox.batch_fallback",
            extra={
                "handler": integration.name,
                "events": len(claims),
                "error": _error_text(exc)[:500],
            },
        )
        return None
    return [ProcessingOutcome(status=close.status) for close in closes]


def _sets_run(
    read: list[_Claim], *, worker: str, started: datetime
) -> Iterator[tuple[_Claim, ProcessingOutcome]]:
    """The rows ``read`` (``_batch_read`` at ``started``) whose integration offers
    ``handle_batch``, as sets (PostgreSQL): each integration's in one transaction with its
    domain change (docs/subsystems/processing.md, "A set in one transaction"). Yields the
    outcome of every row a set closed; the others are left to the claims."""
    groups: dict[str, tuple[BatchIntegration, list[_Claim]]] = {}
    for claim in read:
        integration = integration_batch_get(claim.handler)
        if integration is not None:
            groups.setdefault(claim.handler, (integration, []))[1].append(claim)
    for handler, (integration, group) in groups.items():
        # A batch of one too: one write path for a set, whatever its size.
        if not tracing_enabled():
            batch = _claims_batch_run(
                group, integration, worker=worker, started=started
            )
        else:
            with _handler_span(group, handler) as handled:
                batch = _claims_batch_run(
                    group, integration, worker=worker, started=started
                )
                handled.set_attribute("webhook.applied_as_set", batch is not None)
                if batch is not None and len(batch) == 1:
                    handled.set_attribute("webhook.outcome", batch[0].status)
        if batch is not None:
            yield from zip(group, batch, strict=True)


# The batch's log line names at most this many rows (a message carries INBOX_BATCH_SIZE).
LOG_IDS_MAX = 50


@dataclass
class _BatchRecord:
    """What a batch did, for its one log line and its metrics, written once it is over."""

    worker: str
    counts: dict[str, int] = dataclass_field(default_factory=dict)
    inbox_event_ids: list[int] = dataclass_field(default_factory=list)
    event_ids: list[str] = dataclass_field(default_factory=list)
    as_set: int = 0
    dead_letters: int = 0
    stale: int = 0
    latencies: list[float] = dataclass_field(default_factory=list)

    def count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def outcome(self, event: InboxEvent, outcome: ProcessingOutcome) -> None:
        """One committed outcome: its own log line (DEBUG, or WARNING and ERROR for a retry
        and a dead letter, which an operator reads one by one), counted for the batch's."""
        self.count(outcome.status)
        if len(self.inbox_event_ids) < LOG_IDS_MAX:
            self.inbox_event_ids.append(event.pk)
            self.event_ids.append(event.event_id)
        status = outcome.status
        if status == ProcessingStatus.DEAD_LETTERED:
            self.dead_letters += 1
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
                    next_attempt_at=outcome.retry_at.isoformat()
                    if outcome.retry_at
                    else None,
                    error=event.error_message[:500],
                ),
            )
            return
        if status in STALE_STATUSES:
            self.stale += 1
        if event.occurred_at and event.processed_at:
            self.latencies.append(
                max((event.processed_at - event.occurred_at).total_seconds(), 0)
            )
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "inbox.processed",
                extra=_log_extra(event, status=status, attempts=event.attempts),
            )

    def write(self, *, events: int, started: float) -> None:
        """The metrics, once for the batch, and its one INFO line: counts by outcome (a
        status, or why a row was skipped), how many applied as a set, and the first
        ``LOG_IDS_MAX`` rows it finished (``ids_truncated`` when there were more). A batch of
        one row carries its event id as correlation id, as that row's own line did."""
        if self.dead_letters:
            metrics.DEAD_LETTERS.inc(self.dead_letters)
        if self.stale:
            metrics.WEBHOOK_STALE_EVENTS.inc(self.stale)
        for latency in self.latencies:
            metrics.WEBHOOK_PROCESSING_LATENCY.observe(latency)
        finished = sum(
            n for key, n in self.counts.items() if key in TERMINAL_STATUSES | {"failed"}
        )
        extra = {
            "worker": self.worker,
            "events": events,
            "counts": self.counts,
            "applied_as_set": self.as_set,
            "inbox_event_ids": self.inbox_event_ids,
            "event_ids": self.event_ids,
            "ids_truncated": finished > len(self.inbox_event_ids),
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
        }
        if len(self.event_ids) == 1 and events == 1:
            with correlation_id_bound(self.event_ids[0]):
                logger.info("inbox.batch_processed", extra=extra)
        else:
            logger.info("inbox.batch_processed", extra=extra)


def inbox_events_process(
    *, ids: list[int], worker: str = "", sets: bool = True
) -> list[ProcessingOutcome]:
    """Processes a batch of inbox rows through their sources' handlers; returns one outcome
    per id, in the order given.

    On PostgreSQL the rows of an integration that offers ``handle_batch`` run as a set, each
    set in one transaction with its domain change (``sets``, the default; a message
    delivered again runs without, docs/subsystems/processing.md, "A set in one
    transaction"); every other row is claimed, then run in a transaction of its own.

    Idempotent per row: a terminal row is never processed again, and of two concurrent runs
    only one commits an outcome. Transient failures leave the row ``failed`` with
    ``next_attempt_at`` (exponential backoff, full jitter) until ``INBOX_MAX_ATTEMPTS``;
    ``PermanentProcessingError`` and a value the database refuses (``DataError``)
    dead-letter at once."""
    started = time.monotonic()
    unique = list(dict.fromkeys(ids))  # an id given twice is processed once
    outcomes: dict[int, ProcessingOutcome] = {}
    record = _BatchRecord(worker=worker)
    # The session's lock_timeout, for the claims taken one by one and the events run one at
    # a time; the set statements set their own transaction's.
    session_timeout = SessionLockTimeout(settings.INBOX_LOCK_TIMEOUT_MS)
    read: list[_Claim] = []
    try:
        if sets and unique and connection.vendor == "postgresql":
            now = timezone.now()
            read = _batch_read(ids=unique, now=now)
            for closed, outcome in _sets_run(read, worker=worker, started=now):
                record.as_set += 1
                with correlation_id_bound(closed.event.event_id):
                    record.outcome(closed.event, outcome)
                outcomes[closed.event.pk] = outcome
        rest = [pk for pk in unique if pk not in outcomes]
        claims = _batch_claim_fast(ids=rest, worker=worker)
        claimed = {claim.event.pk for claim in claims}
        for pk in rest:
            if pk in claimed:
                continue
            session_timeout.ensure()
            claim = _inbox_event_claim(inbox_event_id=pk, worker=worker)
            if isinstance(claim, _Claim):
                claims.append(claim)
                continue
            outcomes[pk] = claim
            if claim.status == ProcessingStatus.DEAD_LETTERED and not claim.skipped:
                # Dead-lettered at claim time: its last attempt's worker was lost.
                record.dead_letters += 1
                record.count(claim.status)
                logger.error(
                    "inbox.dead_lettered",
                    extra={"inbox_event_id": pk, "error": WORKER_LOST_ERROR},
                )
            elif claim.skipped:
                record.count(claim.skipped)
                logger.debug(
                    "inbox.skipped",
                    extra={"inbox_event_id": pk, "reason": claim.skipped},
                )
        claims.sort(key=lambda c: c.event.pk)
        if tracing_enabled():
            # The message's process span links to the requests that wrote its rows (once
            # each: a row a set read and then claimed is one request): a batch has many,
            # none of them its parent.
            linked = {c.event.pk: c.event.traceparent for c in (*read, *claims)}
            links_add(linked.values())
        if claims:
            session_timeout.ensure()
        for claim in claims:
            with correlation_id_bound(claim.event.event_id):
                outcome = _claim_run(claim)
                if outcome.skipped:
                    record.count(outcome.skipped)
                else:
                    record.outcome(claim.event, outcome)
            outcomes[claim.event.pk] = outcome
    finally:
        session_timeout.reset()
    record.write(events=len(unique), started=started)
    return [outcomes[pk] for pk in ids]


def _claim_run(claim: _Claim) -> ProcessingOutcome:
    """One claimed row in a transaction of its own, within its handler's span when tracing."""
    if not tracing_enabled():
        return _claimed_event_run(claim)
    with _handler_span([claim], claim.handler) as handled:
        outcome = _claimed_event_run(claim)
        handled.set_attribute("webhook.outcome", outcome.skipped or outcome.status)
    return outcome


def _handler_span(claims: list[_Claim], handler: str):
    """Tracing: the span of a handler's run over ``claims`` (one event, or a set), a child
    of the batch's, linked to the requests that wrote the rows. The event's id and source,
    never its body."""
    first = claims[0].event
    attributes: dict[str, str | int] = {
        "webhook.handler": handler,
        "webhook.source": first.source.slug,
    }
    if len(claims) == 1:
        attributes["webhook.event_id"] = first.event_id
        attributes["webhook.inbox_event_id"] = first.pk
    else:
        attributes["webhook.event_count"] = len(claims)
    return span(
        f"handle {handler}",
        attributes=attributes,
        links=[claim.event.traceparent for claim in claims],
    )


def inbox_event_process(*, inbox_event_id: int, worker: str = "") -> ProcessingOutcome:
    """One row: a batch of one (see ``inbox_events_process``)."""
    return inbox_events_process(ids=[inbox_event_id], worker=worker)[0]
