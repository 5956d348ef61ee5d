"""The inbox as an outbox (docs/subsystems/relay.md): which rows wait for a
processing message, claimed by the relay (``core.relay``) in each worker.

A row waits for a message when it is ``received`` and no message was published for it yet
(``dispatched_at`` is null: a new event, a replayed one), or ``failed`` with its retry due and
no message for that retry. Both are read through partial indexes that hold only such rows, so
a claim stays an index probe however large the inbox grows. The sweep publishes again what a
lost message left behind (see ``inbox_sweep_due_q``).

Rows of a paused source are held (docs/subsystems/relay.md, "Pausing a source"). The claim, the
sweep and the lag leave them alone: a subquery over the holds (``SourceHold``: a handful of
rows, read once per statement) excludes the held sources. Each round, the relay serves every
held source apart (``InboxOutbox.held_claim``) under its hold's row lock: it sets the
source's waiting rows aside (``held_at``: out of the two partial indexes, so that a long pause
never makes a claim walk past its rows), and once the source is resumed it releases them in id
order, at the source's drain rate (every event one token), a document's next event only once
the one before it is finished (``_drain_release``), until none is left.

On PostgreSQL the inbox is partitioned by day (docs/scaling.md, "Time partitions of the
inbox"), and a statement that may find its rows on any day reads every partition's index. The
relay's look and claim read the partitions from yesterday on, and the others only while a row
received before yesterday waits (a replayed or retried event of an older day), which one
statement looks for at most every ``RELAY_LOOK_BACK_SECONDS`` (``InboxOutbox.since``).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import (
    DateTimeField,
    ExpressionWrapper,
    F,
    Q,
    QuerySet,
    Value,
)
from django.utils import timezone

from core.db import set_statement_sql, values_planned
from core.relay.outbox import Outbox, Publication, relay_round

from . import statements
from .dispatch import PROCESS_TASK
from .models import InboxEvent, ProcessingStatus, SourceHold
from .partitions import INBOX, partitions
from .pausing import drain_budget, drain_end
from .selectors import UnfinishedEvent, inbox_entities_first_unfinished

logger = logging.getLogger(__name__)


def _held_source_ids() -> QuerySet[SourceHold, Any]:
    """The sources whose events are held back (paused, or draining after a resume): a
    handful of rows at most, read once per statement."""
    return SourceHold.objects.values("source_id")


def _waiting_new(*, source_id: int | None = None) -> QuerySet[InboxEvent]:
    """New rows waiting for their first message: of every source not held, or of
    ``source_id`` only."""
    rows = InboxEvent.objects.filter(
        processing_status=ProcessingStatus.RECEIVED,
        dispatched_at__isnull=True,
        held_at__isnull=True,
    )
    if source_id is not None:
        return rows.filter(source_id=source_id)
    return rows.exclude(source_id__in=_held_source_ids())


def _waiting_retries(
    now: datetime, *, source_id: int | None = None
) -> QuerySet[InboxEvent]:
    """Retries that came due and wait for their message, as ``_waiting_new`` selects."""
    rows = InboxEvent.objects.filter(
        processing_status=ProcessingStatus.FAILED,
        dispatched_at__isnull=True,
        held_at__isnull=True,
        next_attempt_at__lte=now,
    )
    if source_id is not None:
        return rows.filter(source_id=source_id)
    return rows.exclude(source_id__in=_held_source_ids())


def inbox_sweep_due_q(*, now) -> Q:
    """The sweep's rows, whose message may be lost: ``received`` for longer than
    ``INBOX_REDISPATCH_AFTER_SECONDS``, ``failed`` rows whose retry time has come, and
    ``processing`` rows whose lease expired; in each case not dispatched within the last
    ``INBOX_REDISPATCH_AFTER_SECONDS``. Served by ``webhooks_inbox_status_idx`` (one range
    per status, the ``received`` one bounded by the received time).

    A ``received`` row may just be waiting in a long queue: re-publishing it every interval
    would add a message per queued row each time and feed the backlog. Its re-dispatches are
    therefore spaced by half its age as well (dispatched before the midpoint between receipt
    and now), so a row waiting T seconds gets about log2(T / interval) extra messages.

    Rows of held sources are left alone, whatever their state: a retry of a paused source
    waits too, and so does a row whose lease expired (it is taken once the source's drain is
    over). A row set aside (``held_at``) whose source is no longer held is published like a
    lost one."""
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
    return due & not_recently_dispatched & ~Q(source_id__in=_held_source_ids())


def _publications(
    rows: list[tuple[int, str, str]], *, again: bool = False
) -> list[Publication]:
    """Messages of at most ``INBOX_BATCH_SIZE`` rows, ``(id, event_id, entity_id)`` in the
    order given (id order within each claim). The rows of one entity travel in one message:
    one worker takes them together and applies them in id order, so that two workers never
    race one document's events within a batch. Only an entity with more rows
    than a message holds is split, in id order: a drain never releases that many of one
    entity at once (``_drain_release``), and a bulk replay puts back one of an entity at a
    time (docs/subsystems/relay.md, "Pausing a source"; docs/subsystems/processing.md, "A
    bulk replay job"). A message of one row carries its event id as the correlation id; the
    worker binds each row's own while it processes it.

    ``again`` (the sweep's: rows whose message may have been lost with a worker that died
    running them) asks the worker to claim the rows before it runs them
    (docs/subsystems/processing.md, "A set in one transaction")."""
    size = max(settings.INBOX_BATCH_SIZE, 1)
    groups: dict[str, list[tuple[int, str]]] = {}
    for pk, event_id, entity_id in rows:
        # A row without an entity orders against nothing: a group of its own.
        groups.setdefault(entity_id or f"#{pk}", []).append((pk, event_id))
    chunks: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] = []
    for group in groups.values():
        if current and len(current) + len(group) > size:
            chunks.append(current)
            current = []
        for start in range(0, len(group), size):
            part = group[start : start + size]
            if current and len(current) + len(part) > size:
                chunks.append(current)
                current = []
            current.extend(part)
    if current:
        chunks.append(current)
    publications = []
    for chunk in chunks:
        ids = [pk for pk, _ in chunk]
        publications.append(
            Publication(
                task=PROCESS_TASK,
                args=[ids, True] if again else [ids],
                correlation_id=chunk[0][1] if len(chunk) == 1 else "",
                rows=tuple(ids),
            )
        )
    return publications


def _take(
    queryset: QuerySet[InboxEvent], limit: int, now: datetime, *, order: str = "id"
) -> list[tuple]:
    """Locks up to ``limit`` rows of ``queryset`` that no other relay holds, in ``order``,
    and stamps them dispatched. Runs inside the relay's transaction."""
    rows = list(
        queryset.select_for_update(skip_locked=True)
        .order_by(order)
        .values_list("id", "event_id", "entity_id")[:limit]
    )
    if rows:
        InboxEvent.objects.filter(id__in=[pk for pk, _, _ in rows]).update(
            dispatched_at=now, held_at=None
        )
    return rows


# --- held sources -----------------------------------------------------------------------


def _rows_set_aside(*, source_id: int, limit: int, now: datetime) -> int:
    """Sets aside up to ``limit`` waiting rows of a held source (new rows and due retries):
    ``held_at`` takes them out of the outbox's partial indexes into
    ``webhooks_inbox_held_idx``, where a drain reads them by source in id order."""
    ids = list(
        _waiting_new(source_id=source_id)
        .select_for_update(skip_locked=True)
        .values_list("id", flat=True)[:limit]
    )
    if len(ids) < limit:
        ids += list(
            _waiting_retries(now, source_id=source_id)
            .select_for_update(skip_locked=True)
            .values_list("id", flat=True)[: limit - len(ids)]
        )
    if ids:
        InboxEvent.objects.filter(id__in=ids).update(held_at=now)
    return len(ids)


def _blocker_lost(event: UnfinishedEvent, *, hold: SourceHold, now: datetime) -> bool:
    """Whether no message will take ``event``, the earliest unfinished event of a document
    whose next events a drain holds back: one published before the drain started (a worker
    that takes it leaves it alone, and the sweep leaves a held source alone), one published
    longer than ``INBOX_REDISPATCH_AFTER_SECONDS`` ago and never taken (a lost message), or
    one whose worker was lost (its lease expired). Waiting for it would hold its document
    back for the whole drain, and the drain could never end: the drain publishes it again."""
    if event.held_at is not None:
        return False  # set aside: it is released in its turn
    if event.processing_status == ProcessingStatus.PROCESSING:
        return event.lease_expires_at is not None and event.lease_expires_at < now
    if event.dispatched_at is None:
        return False  # waiting to be set aside (a new row, a retry not yet due)
    stale = now - timedelta(seconds=settings.INBOX_REDISPATCH_AFTER_SECONDS)
    started = hold.drain_started_at or now
    return event.dispatched_at < started or event.dispatched_at < stale


def _drain_release(
    hold: SourceHold,
    candidates: list[tuple[int, str, str]],
    *,
    budget: int,
    now: datetime,
    stamp: datetime,
) -> list[tuple[int, str, str]]:
    """Which of the held rows ``candidates`` (``(id, event_id, entity_id)`` in id order) a
    drain releases now, at most ``budget``: in id order, except that a document's event
    waits while an earlier event of that document is unfinished (released and not done yet,
    waiting for its retry, or held by another transaction), and that at most
    ``INBOX_BATCH_SIZE`` of one document go in one round (one message: ``_publications``
    splits none). Released apart, two workers could apply a document's v8 before its v7,
    which the ordering rule would then ignore: its revision never written. An earliest
    unfinished event whose message is lost (``_blocker_lost``) goes again, first, conditionally
    stamped so that a worker holding it is not overtaken; the others of its document wait
    for the next round."""
    per_message = max(settings.INBOX_BATCH_SIZE, 1)
    first = inbox_entities_first_unfinished(
        keys={(hold.pk, entity_id) for _, _, entity_id in candidates},
        exclude=[pk for pk, _, _ in candidates],
        below=candidates[-1][0],
    )
    released: list[tuple[int, str, str]] = []
    waiting: set[str] = set()
    taken: dict[str, int] = {}
    for pk, event_id, entity_id in candidates:
        if len(released) >= budget:
            break
        if entity_id:
            if entity_id in waiting:
                continue
            earlier = first.get((hold.pk, entity_id))
            if earlier is not None and earlier.pk < pk:
                waiting.add(entity_id)
                if _blocker_lost(earlier, hold=hold, now=now) and _blocker_restamp(
                    earlier, stamp=stamp
                ):
                    released.append((earlier.pk, earlier.event_id, entity_id))
                continue
            if taken.get(entity_id, 0) >= per_message:
                waiting.add(entity_id)
                continue
            taken[entity_id] = taken.get(entity_id, 0) + 1
        released.append((pk, event_id, entity_id))
    return sorted(released)


def _blocker_restamp(event: UnfinishedEvent, *, stamp: datetime) -> bool:
    """Stamps a lost earliest event dispatched by the drain (its state unchanged since it
    was read, and no worker holding its row): whether it is to be published again."""
    rows = InboxEvent.objects.filter(
        pk=event.pk,
        processing_status=event.processing_status,
        dispatched_at=event.dispatched_at,
        held_at__isnull=True,
    )
    locked = list(rows.select_for_update(skip_locked=True).values_list("pk", flat=True))
    if not locked:
        return False
    return bool(InboxEvent.objects.filter(pk=event.pk).update(dispatched_at=stamp))


class InboxOutbox(Outbox[int]):
    """The inbox's outbox (module docstring): new rows and due retries, the sweep, held
    sources set aside and drained, and flow control."""

    name = "inbox"
    flow_control = True

    def __init__(self) -> None:
        # What ``since`` found and when (``time.monotonic()``); None: look again.
        self._since: datetime | None = None
        self._looked_back_at: float | None = None
        # The inbox's partitions' starts, read by the first claim after each look back
        # (``claim_starts``); None: read them again. An idle relay never reads them.
        self._partition_starts: tuple[datetime, ...] | None = None

    def since(self) -> datetime | None:
        """PostgreSQL: the received time from which the relay's look and claim read the
        inbox: yesterday's start (UTC) while no row received before it waits, else ``None``
        (every partition). Whether one does is looked for by one statement over the older
        partitions, at most every ``RELAY_LOOK_BACK_SECONDS`` (and in a relay's first round:
        ``look_everywhere``), so that such a row waits at most that long before a claim
        reads its partition; a claim of recent rows reads two days' partitions and those
        created ahead, however many days the inbox keeps."""
        now = time.monotonic()
        if (
            self._looked_back_at is not None
            and now - self._looked_back_at < settings.RELAY_LOOK_BACK_SECONDS
        ):
            return self._since
        recent = statements.day_start(timezone.now()) - timedelta(days=1)
        with connection.cursor() as cursor:
            cursor.execute(
                statements.relay_older_waiting_sql(recent), {"now": timezone.now()}
            )
            older = bool(cursor.fetchone()[0])
        self._since = None if older else recent
        self._partition_starts = None
        self._looked_back_at = now
        return self._since

    def claim_starts(self) -> tuple[datetime | None, ...]:
        """PostgreSQL: where each range of received times the claim reads in turn starts
        (``statements.relay_claim_sql``): ``since`` (``None``: from the oldest row), then
        each later partition's start up to now, then the first partition ahead's, whose
        range runs on over every partition ahead (empty unless a clock runs ahead). A
        partition made or dropped since the last look back only moves where a range ends:
        the ranges still cover every row from ``since`` on."""
        since = self.since()
        if self._partition_starts is None:
            self._partition_starts = tuple(
                p.start for p in partitions(INBOX) if p.start is not None
            )
        now = timezone.now()
        later = [s for s in self._partition_starts if since is None or s > since]
        ahead = [s for s in later if s > now]
        return (since, *(s for s in later if s <= now), *ahead[:1])

    def look_everywhere(self) -> None:
        self._looked_back_at = None

    def claim(self, limit: int) -> tuple[int, list[Publication]]:
        now = timezone.now()
        if connection.vendor == "postgresql":
            claim_sql = statements.relay_claim_sql(self.claim_starts())
            with connection.cursor() as cursor:
                cursor.execute(claim_sql, {"limit": limit, "now": now})
                taken = sorted(cursor.fetchall())
            if not taken:
                return 0, []
            received = [row[4] for row in taken]
            with values_planned(), connection.cursor() as cursor:
                cursor.execute(
                    set_statement_sql(
                        statements.relay_stamp_sql(statements.received_days(received))
                    ),
                    {
                        "ids": [row[1] for row in taken],
                        "received": received,
                        "now": now,
                    },
                )
            rows = [row[1:4] for row in taken]
            return len(rows), _publications(rows)
        rows = _take(_waiting_new(), limit, now)
        if len(rows) < limit:
            rows += _take(
                _waiting_retries(now), limit - len(rows), now, order="next_attempt_at"
            )
        return len(rows), _publications(rows)

    def sweep(self, limit: int) -> tuple[int, list[Publication]]:
        now = timezone.now()
        rows = _take(InboxEvent.objects.filter(inbox_sweep_due_q(now=now)), limit, now)
        return len(rows), _publications(rows, again=True)

    def oldest_waiting(self) -> datetime | None:
        """When the oldest event still waiting for its first message was received (the lowest
        id: one probe of the partial index). Held rows are not the relay's lag: they wait because
        an operator paused their source (``webhook_source_held_events`` counts them)."""
        return (
            _waiting_new().order_by("id").values_list("received_at", flat=True).first()
        )

    def has_waiting(self) -> bool:
        """Two index probes in one statement, outside any transaction: an idle relay takes no
        lock, and its round stays at two statements with ``InboxOutbox.held``."""
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    statements.relay_has_waiting_sql(self.since()),
                    {"now": timezone.now()},
                )
                return bool(cursor.fetchone()[0])
        new_sql, new_params = _waiting_new().values("id")[:1].query.sql_with_params()
        retry_sql, retry_params = (
            _waiting_retries(timezone.now()).values("id")[:1].query.sql_with_params()
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT EXISTS({new_sql}) OR EXISTS({retry_sql})",
                (*new_params, *retry_params),
            )
            return bool(cursor.fetchone()[0])

    def held(self) -> list[int]:
        """The sources whose events are held back now (paused or draining): one statement
        written once, read in every round of the relay (a queryset built each time was a
        tenth of a busy relay's CPU: docs/bench-log/2026-12-03.md, "One relay at a time")."""
        with connection.cursor() as cursor:
            cursor.execute(statements.RELAY_HELD_SQL)
            return [source_id for (source_id,) in cursor.fetchall()]

    def held_claim(self, source_id: int, limit: int) -> tuple[int, list[Publication]]:
        """Serves one held source, under its hold's row lock (``SKIP LOCKED``: a relay that
        finds it taken leaves it to the one holding it this round).

        Paused: its waiting rows are set aside. Draining: rows are set aside likewise, then the
        set-aside rows are released in id order, one token each, as many as the bucket holds
        (``_drain_release``: a document's next event also waits for the one before it to
        finish): stamped dispatched (never before the drain started: that is how a worker
        tells them from a message published before the pause) and published, the tokens
        spent, in this transaction, so that several relays together never exceed the rate. A
        drain with nothing left set aside ends: the source is normal again."""
        hold = (
            SourceHold.objects.select_for_update(skip_locked=True)
            .filter(pk=source_id)
            .first()
        )
        if hold is None:
            return 0, []  # drained since ``InboxOutbox.held`` read it, or locked
        now = timezone.now()
        if hold.paused_at is not None:
            _rows_set_aside(source_id=source_id, limit=limit, now=now)
            return 0, []
        budget, tokens = drain_budget(hold, now=now, limit=limit)
        if budget < 1:
            return 0, []
        _rows_set_aside(source_id=source_id, limit=limit, now=now)
        held = InboxEvent.objects.filter(source_id=source_id, held_at__isnull=False)
        candidates = list(
            held.select_for_update(skip_locked=True)
            .order_by("id")
            .values_list("id", "event_id", "entity_id")[:limit]
        )
        if not candidates:
            if not held.exists():  # (a row another transaction locks is still held)
                drain_end(hold)
            return 0, []
        stamp = max(now, hold.drain_started_at or now)
        rows = _drain_release(hold, candidates, budget=budget, now=now, stamp=stamp)
        if not rows:
            return 0, []
        InboxEvent.objects.filter(id__in=[pk for pk, _, _ in rows]).update(
            dispatched_at=stamp, held_at=None
        )
        SourceHold.objects.filter(pk=source_id).update(
            drain_released=F("drain_released") + len(rows),
            drain_tokens=tokens - len(rows) if hold.drain_rate is not None else 0,
            drain_tokens_at=now,
        )
        return len(rows), _publications(rows)

    def unfinished(self, ids: list[int]) -> set[int]:
        """Of rows a relay published, those whose message no worker has finished with: still
        waiting, being processed, or a published retry (a worker that finishes, fails or finds its
        source paused clears ``dispatched_at`` or moves the row on). Primary key probes."""
        if not ids:
            return set()
        if connection.vendor == "postgresql":
            # One statement of one text whatever the number of ids (an array, not a list of
            # placeholders): prepared once per connection, not parsed again each time.
            with connection.cursor() as cursor:
                cursor.execute(statements.RELAY_UNFINISHED_SQL, {"ids": list(ids)})
                return {pk for (pk,) in cursor.fetchall()}
        return set(
            InboxEvent.objects.filter(
                id__in=ids,
                dispatched_at__isnull=False,
                processing_status__in=statements.RELAY_UNFINISHED_STATUSES,
            ).values_list("id", flat=True)
        )

    def traceparents(self, publications: list[Publication]) -> list[tuple[str, ...]]:
        """Tracing only: the rows' stored contexts, one primary key read for the round."""
        ids = [pk for publication in publications for pk in publication.rows]
        stored = dict(
            InboxEvent.objects.filter(id__in=ids)
            .exclude(traceparent="")
            .values_list("id", "traceparent")
        )
        return [
            tuple(stored[pk] for pk in publication.rows if pk in stored)
            for publication in publications
        ]


INBOX_OUTBOX = InboxOutbox()


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
