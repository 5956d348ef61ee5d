"""The sealer: every ledger row takes its place in the verifiable log, once, whatever its id
(docs/subsystems/log.md, "The verifiable log"; docs/security.md, "What the log holds").

Beat's ``audit.seal_inbox`` runs ``ledger_rows_seal`` and then signs a checkpoint. A round
goes through the ledgers of ``audit.ledgers`` in their order and appends, in batches of
``AUDIT_SEAL_BATCH_SIZE``, every row older than ``AUDIT_SEAL_HORIZON_SECONDS`` that is ready
(an attempt once closed) and not in the log yet, each batch in the transaction that moves the
kind's cursor.

How no row is skipped, with no write to the row. Each ledger row carries ``log_ticket``, the
id of the transaction that inserted it, set by the database (``core.models.TransactionTicket``)
and never changed. On PostgreSQL, once every transaction below a snapshot's ``xmin`` has
ended, no row with a smaller ticket can still appear. The sealer walks each ledger in
``(log_ticket, id)`` order from its cursor (``audit.LogCursor``) and takes every visible row
not in the log (an anti-join on the log's unique ``(kind, record_id)``); the cursor then moves
up to the last row handled, but never past ``xmin``: a row of a transaction still running
(whatever its id) is found by a later round. Rows of transactions above ``xmin`` that are
already visible are taken at once and passed over by later rounds' anti-join. A row younger
than the horizon stops the walk there; a row old enough but not ready goes to the cursor's
``pending`` list, which every round looks at again. Rows without a ticket are walked by id:
on SQLite (whose writers run one at a time, so that ids are assigned in commit order, and the
sealer's own transaction holds the write lock) and, on PostgreSQL, the rows written before the
column existed.

The first round also takes the retired HMAC chain in (``hmac_chain_retire``); a purge appends
its own entries (``body_purges_log``). Verification (``audit.verification``) trusts none of the
cursors: it compares the whole log with every ledger and names each row the log is missing."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import BooleanField, Case, Exists, OuterRef, QuerySet, Value, When
from django.utils import timezone

from trail.models import OperatorAction
from webhooks.models import InboxEvent
from webhooks.retention import purge_stamp

from .leaves import LeafInput
from .ledgers import (
    BODY_PURGE,
    CHAIN_RETIRED,
    EVIDENCE_PURGE,
    LEDGERS,
    PARTITION_DROP,
    SEAL,
    Ledger,
    scanned_ledgers,
)
from .log import log_append, log_lock
from .models import AuditSeal, AuditSealActionEntry, AuditSealEntry, LogCursor, LogLeaf
from .services import PurgeExcuses, audit_trail_verify

logger = logging.getLogger(__name__)

__all__ = [
    "SealReport",
    "body_purges_log",
    "hmac_chain_retire",
    "hmac_chain_retired",
    "ledger_rows_seal",
    "partition_drop_log",
    "unlogged",
]

# Problems of the retired chain recorded in its retirement entry, at most.
_RETIREMENT_PROBLEMS = 200


@dataclass
class SealReport:
    """What a round appended, per kind; ``busy``: another sealer held the log and this round
    stopped."""

    appended: dict[str, int] = field(default_factory=dict)
    busy: bool = False

    @property
    def leaves(self) -> int:
        return sum(self.appended.values())

    def count(self, kind: str, n: int) -> None:
        if n:
            self.appended[kind] = self.appended.get(kind, 0) + n


@dataclass
class _Budget:
    """What a round may still spend: batches, and time (a round ends well inside the task's
    soft time limit, so that it reaches its checkpoint; the rest is the next round's)."""

    batches: int
    deadline: float

    def spend(self) -> bool:
        if self.batches <= 0 or time.monotonic() >= self.deadline:
            return False
        self.batches -= 1
        return True


class _Busy(Exception):
    """Another sealer holds the log's lock: this round ends; the other one does the work."""


def _locked() -> None:
    if not log_lock(wait=False):
        raise _Busy


def _xmin() -> int | None:
    """The oldest transaction id still running (PostgreSQL); ``None`` on SQLite."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
        return int(cursor.fetchone()[0])


def unlogged(ledger: Ledger) -> QuerySet[Any]:
    """The ledger's rows that are not in the log: an anti-join on the log's unique
    ``(kind, record_id)``, whatever the number of rows logged."""
    model = ledger.model_class
    return ledger.with_record_id(model._default_manager.all()).filter(
        ~Exists(
            LogLeaf.objects.filter(
                kind=ledger.kind, record_id=OuterRef("log_record_id")
            )
        )
    )


def _with_ready(queryset: QuerySet[Any], ledger: Ledger) -> QuerySet[Any]:
    """``log_ready``: whether each row is complete (``Ledger.ready``)."""
    if ledger.ready is None:
        return queryset.annotate(log_ready=Value(True, output_field=BooleanField()))
    return queryset.annotate(
        log_ready=Case(
            When(ledger.ready, then=Value(True)),
            default=Value(False),
            output_field=BooleanField(),
        )
    )


def _leaves(ledger: Ledger, rows: Sequence[tuple[Any, ...]]) -> list[LeafInput]:
    """Leaves of rows read as ``(record id, *columns)``."""
    built = ledger.leaf_fields(row[1:] for row in rows)
    return [
        ledger.leaf(row[0], fields) for row, fields in zip(rows, built, strict=True)
    ]


Key = tuple[int, int]


@dataclass
class _Walk:
    """One round's walk through one ledger: where the scan has got to (``position``, ahead
    of the persisted cursor while it may not pass ``xmin``), the rows it passed that are not
    ready and not pending yet, and whether it is done for this round."""

    position: Key
    floating: list[tuple[Key, int]] = field(default_factory=list)
    done: bool = False


def _batch_rows(
    ledger: Ledger, *, ticketed: bool, after: Key, limit: int, horizon: datetime
) -> list[tuple[Any, ...]]:
    queryset = _with_ready(unlogged(ledger), ledger)
    if ticketed:
        ticket, pk = after
        queryset = (
            queryset.filter(log_ticket__gte=ticket)
            .exclude(log_ticket=ticket, pk__lte=pk)
            .order_by("log_ticket", "pk")
        )
    else:
        queryset = queryset.filter(log_ticket__isnull=True, pk__gt=after[1]).order_by(
            "pk"
        )
    queryset = queryset.annotate(
        log_young=Case(
            When(**{f"{ledger.created}__gte": horizon}, then=Value(True)),
            default=Value(False),
            output_field=BooleanField(),
        )
    )
    return list(
        queryset.values_list(
            "log_ticket",
            "log_young",
            "log_ready",
            "pk",
            "log_record_id",
            *ledger.columns(),
        )[:limit]
    )


def _pending_take(
    ledger: Ledger, cursor: LogCursor
) -> tuple[list[tuple[Any, ...]], list[int]]:
    """The pending rows that are ready now (taken), and those still waiting."""
    if not cursor.pending:
        return [], []
    rows = list(
        _with_ready(unlogged(ledger), ledger)
        .filter(pk__in=cursor.pending)
        .order_by("pk")
        .values_list("log_ready", "pk", "log_record_id", *ledger.columns())
    )
    taken = [row[2:] for row in rows if row[0]]
    waiting = [row[1] for row in rows if not row[0]]
    return taken, waiting


def _cursor(kind: str) -> LogCursor:
    cursor, _ = LogCursor.objects.get_or_create(kind=kind)
    return cursor


def _walk_batch(
    ledger: Ledger,
    walk: _Walk,
    cursor: LogCursor,
    *,
    ticketed: bool,
    horizon: datetime,
    limit: int,
    report: SealReport,
    first: bool,
) -> None:
    """One batch, in the caller's transaction (which holds the log's lock)."""
    xmin = _xmin() if ticketed else None
    taken: list[tuple[Any, ...]] = []
    if first:
        taken, waiting = _pending_take(ledger, cursor)
        cursor.pending = waiting
    rows = _batch_rows(
        ledger, ticketed=ticketed, after=walk.position, limit=limit, horizon=horizon
    )
    for ticket, young, ready, *row in rows:
        key = (ticket or 0, row[0]) if ticketed else (0, row[0])
        if young:
            walk.done = True  # younger rows wait; the cursor stays before this one
            break
        if ready:
            taken.append(tuple(row[1:]))
        else:
            walk.floating.append((key, row[0]))
        walk.position = key
    else:
        walk.done = len(rows) < limit
    # The persisted cursor: as far as the walk got, never past xmin (a transaction still
    # running may yet commit rows below where the walk is).
    persisted = walk.position
    if xmin is not None:
        persisted = min(persisted, (xmin, 0))
    pending = [pk for key, pk in walk.floating if key <= persisted]
    walk.floating = [(key, pk) for key, pk in walk.floating if key > persisted]
    if pending:
        cursor.pending = sorted({*cursor.pending, *pending})
    if ticketed:
        cursor.ticket, cursor.ticket_id = persisted
    else:
        cursor.null_id = persisted[1]
    leaves = _leaves(ledger, taken)
    if leaves:
        log_append(leaves=leaves)
    cursor.save()
    report.count(ledger.kind, len(leaves))


def _ledger_seal(
    ledger: Ledger, *, horizon: datetime, report: SealReport, budget: _Budget
) -> None:
    limit = settings.AUDIT_SEAL_BATCH_SIZE
    cursor = _cursor(ledger.kind)
    walks = {
        False: _Walk(position=(0, cursor.null_id)),
        True: _Walk(position=(cursor.ticket, cursor.ticket_id)),
    }
    first = True
    for ticketed in (False, True):
        walk = walks[ticketed]
        while not walk.done and budget.spend():
            with transaction.atomic():
                _locked()
                cursor = _cursor(ledger.kind)
                _walk_batch(
                    ledger,
                    walk,
                    cursor,
                    ticketed=ticketed,
                    horizon=horizon,
                    limit=limit,
                    report=report,
                    first=first,
                )
            first = False


def ledger_rows_seal(
    *,
    now: datetime | None = None,
    max_batches: int = 200,
    max_seconds: float | None = None,
) -> SealReport:
    """Appends to the log every ledger row older than ``AUDIT_SEAL_HORIZON_SECONDS`` that is
    ready and not logged yet, ledger by ledger in ``audit.ledgers`` order, each in the order
    of its tickets (docs/subsystems/log.md, "The verifiable log"). The first round takes the
    retired HMAC chain in first. Idempotent, safe to run concurrently (a second sealer finds
    the log's lock taken and returns). A round starts at most ``max_batches`` batches, and none
    after ``max_seconds`` (half the task's soft time limit by default); the rest is left to
    the next round."""
    now = now or timezone.now()
    horizon = now - timedelta(seconds=settings.AUDIT_SEAL_HORIZON_SECONDS)
    report = SealReport()
    if max_seconds is None:
        max_seconds = settings.CELERY_TASK_SOFT_TIME_LIMIT / 2
    budget = _Budget(batches=max_batches, deadline=time.monotonic() + max_seconds)
    try:
        if not hmac_chain_retired() and not hmac_chain_retire(
            report=report, deadline=budget.deadline
        ):
            return report
        for ledger in scanned_ledgers():
            _ledger_seal(ledger, horizon=horizon, report=report, budget=budget)
    except _Busy:
        report.busy = True
    if report.leaves:
        logger.info(
            "audit.sealed",
            extra={"leaves": report.leaves, "appended": report.appended},
        )
    return report


# --- Purges --------------------------------------------------------------------------------


# What each purge drops, as its operator action names it: the action, its log kind, and where
# its details list the rows (``None``: the action's ``event_ids``).
PURGES: dict[str, tuple[str, str | None]] = {
    OperatorAction.Action.PURGE_BODIES: (BODY_PURGE, None),
    OperatorAction.Action.PURGE_EVIDENCE_BODIES: (EVIDENCE_PURGE, "mismatch_ids"),
}


def purged_ids(action: str, event_ids: Any, details: Any) -> list[int]:
    """The rows (inbox events, or mismatches) a purge action names."""
    _, key = PURGES[action]
    named = (
        event_ids
        if key is None
        else (details.get(key) if isinstance(details, dict) else None)
    )
    return (
        [pk for pk in named if isinstance(pk, int)] if isinstance(named, list) else []
    )


def partition_drop_log(*, action: OperatorAction) -> bool:
    """Appends the ``inbox_partition_drop`` entry of a ``drop_inbox_partition`` operator
    action, in the drop's own transaction: a day of the inbox is gone only once the log says
    who dropped it and what it held (docs/security.md, "What the log holds"). Its fields
    are the action's details and its id. Returns whether it appended."""
    if not isinstance(action.details, dict):
        return False
    with transaction.atomic():
        log_lock()
        if LogLeaf.objects.filter(kind=PARTITION_DROP, record_id=action.pk).exists():
            return False
        log_append(
            leaves=[
                LeafInput(
                    kind=PARTITION_DROP,
                    record_id=action.pk,
                    fields={**action.details, "operator_action_id": action.pk},
                )
            ]
        )
    return True


def body_purges_log(*, action: OperatorAction) -> int:
    """Appends a ``body_purge`` (``evidence_purge``) entry for each body a ``purge_bodies``
    (``purge_evidence_bodies``) operator action dropped, in the purge's own transaction: a
    body is gone only once the log says who purged it (docs/security.md, "What the log
    holds"). Returns how many entries it appended."""
    kind, _ = PURGES[action.action]
    stamp = (
        action.details.get("purged_at") if isinstance(action.details, dict) else None
    )
    ids = purged_ids(action.action, action.event_ids, action.details)
    if not isinstance(stamp, str) or not ids:
        return 0
    leaves = [
        LeafInput(
            kind=kind,
            record_id=pk,
            fields={"purged_at": stamp, "operator_action_id": action.pk},
        )
        for pk in sorted(set(ids))
    ]
    with transaction.atomic():
        log_lock()
        logged = set(
            LogLeaf.objects.filter(kind=kind, record_id__in=ids).values_list(
                "record_id", flat=True
            )
        )
        fresh = [leaf for leaf in leaves if leaf.record_id not in logged]
        if fresh:
            log_append(leaves=fresh)
    return len(fresh)


def _purges_found() -> dict[int, tuple[str, int]]:
    """Every body the recorded purges dropped, as the trail before the log accepted them: a
    row whose ``body_purged_at`` carries the stamp of a ``purge_bodies`` action that names it.
    Inbox row id -> (stamp, action id)."""
    named: dict[int, list[tuple[str, int]]] = {}
    for pk, event_ids, details in (
        OperatorAction.objects.filter(action=OperatorAction.Action.PURGE_BODIES)
        .order_by("pk")
        .values_list("pk", "event_ids", "details")
    ):
        stamp = details.get("purged_at") if isinstance(details, dict) else None
        if not isinstance(stamp, str) or not isinstance(event_ids, list):
            continue
        for event_pk in event_ids:
            if isinstance(event_pk, int):
                named.setdefault(event_pk, []).append((stamp, pk))
    found: dict[int, tuple[str, int]] = {}
    ids = list(named)
    for start in range(0, len(ids), 5000):
        for pk, purged_at in InboxEvent.objects.filter(
            pk__in=ids[start : start + 5000], body_purged_at__isnull=False
        ).values_list("pk", "body_purged_at"):
            if purged_at is None:
                continue
            stamp = purge_stamp(purged_at)
            for candidate, action_pk in named[pk]:
                if candidate == stamp:
                    found[pk] = (stamp, action_pk)
                    break
    return found


# --- The retired HMAC chain ----------------------------------------------------------------


def hmac_chain_retired() -> bool:
    return LogLeaf.objects.filter(kind=CHAIN_RETIRED).exists()


def _seal_groups(limit: int) -> Iterable[list[AuditSeal]]:
    """The seals in sequence order, in groups of about ``limit`` rows."""
    group: list[AuditSeal] = []
    rows = 0
    for seal in AuditSeal.objects.order_by("sequence").iterator(chunk_size=500):
        group.append(seal)
        rows += seal.row_count + seal.action_count
        if rows >= limit:
            yield group
            group, rows = [], 0
    if group:
        yield group


def _rows_of(ledger: Ledger, pks: Sequence[int]) -> list[LeafInput]:
    """The leaves of the rows ``pks`` that exist and are not logged yet, in the order given."""
    if not pks:
        return []
    rows = {
        row[0]: row
        for row in unlogged(ledger)
        .filter(pk__in=list(pks))
        .values_list("pk", *ledger.columns())
    }
    ordered = [rows[pk] for pk in pks if pk in rows]
    return _leaves(ledger, ordered)


def hmac_chain_retire(
    *, report: SealReport | None = None, deadline: float | None = None
) -> bool:
    """Takes the HMAC chain of the sealed trail into the log, once (docs/security.md, "The
    retired HMAC chain"): the chain is verified (as ``audit_verify`` does, the purges recorded
    until now accepted), then each seal's inbox rows and operator actions enter the log in the
    chain's order, each followed by the seal itself; then a ``body_purge`` entry for each
    body those purges dropped, and last the ``audit_chain_retired`` entry, which records the
    chain's head and what its verification found. No seal is made after it; ``audit_verify``
    keeps checking the chain for the period it covers, and that the head the log recorded is
    still its head.

    Runs in transactions of about ``AUDIT_SEAL_BATCH_SIZE`` rows (a long chain does not hold
    the log for long); interrupted, or past ``deadline`` (``time.monotonic()``), the next round
    verifies again and goes on with the rows not logged yet, and nothing else is logged
    before. Returns True once the chain is retired. Raises ``_Busy`` when another sealer
    holds the log."""
    report = report or SealReport()
    purges = _purges_found()
    verified = audit_trail_verify(purges=PurgeExcuses.of(purges))
    inbox, actions, seals = (
        LEDGERS["inbox_event"],
        LEDGERS["operator_action"],
        LEDGERS[SEAL],
    )
    for group in _seal_groups(settings.AUDIT_SEAL_BATCH_SIZE):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        leaves: list[LeafInput] = []
        with transaction.atomic():
            _locked()
            for seal in group:
                event_pks = list(
                    AuditSealEntry.objects.filter(seal=seal)
                    .order_by("inbox_event_id")
                    .values_list("inbox_event_id", flat=True)
                )
                action_pks = list(
                    AuditSealActionEntry.objects.filter(seal=seal)
                    .order_by("operator_action_id")
                    .values_list("operator_action_id", flat=True)
                )
                leaves += _rows_of(inbox, event_pks)
                leaves += _rows_of(actions, action_pks)
                leaves += _rows_of(seals, [seal.pk])
            if leaves:
                log_append(leaves=leaves)
        for leaf in leaves:
            report.count(leaf.kind, 1)
    with transaction.atomic():
        _locked()
        if hmac_chain_retired():
            return True
        logged = set(
            LogLeaf.objects.filter(kind=BODY_PURGE).values_list("record_id", flat=True)
        )
        leaves = [
            LeafInput(
                kind=BODY_PURGE,
                record_id=pk,
                fields={"purged_at": stamp, "operator_action_id": action_pk},
            )
            for pk, (stamp, action_pk) in sorted(purges.items())
            if pk not in logged
        ]
        sealed_actions = set(
            AuditSealActionEntry.objects.values_list("operator_action_id", flat=True)
        )
        problems = verified.problem_lines()
        head_sequence, head_hash = verified.head or (0, "")
        leaves.append(
            LeafInput(
                kind=CHAIN_RETIRED,
                record_id=head_sequence,
                fields={
                    "seals": verified.seals_checked,
                    "head_hash": head_hash,
                    "rows_checked": verified.rows_checked,
                    "actions_checked": verified.actions_checked,
                    "verified": verified.ok,
                    "problem_count": len(problems),
                    "problems": problems[:_RETIREMENT_PROBLEMS],
                    "unsealed_purges": sorted(
                        {a for _, a in purges.values()} - sealed_actions
                    ),
                },
            )
        )
        log_append(leaves=leaves)
    for leaf in leaves:
        report.count(leaf.kind, 1)
    log = logger.info if verified.ok else logger.error
    log(
        "audit.hmac_chain_retired",
        extra={
            "seals": verified.seals_checked,
            "verified": verified.ok,
            "problems": len(problems),
        },
    )
    return True
