"""Reads."""

from __future__ import annotations

import functools
import operator
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict, cast

from django.conf import settings
from django.db import DataError, connection, models
from django.db.models import Count, Max, Min, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from core.models import BoundedQuerySet
from core.selectors import COUNT_CAP, capped_count

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

from trail.models import OperatorAction

from . import statements
from .models import (
    REPLAY_REPEATS_CAUSES,
    DeadLetterCause,
    InboxAttempt,
    InboxEvent,
    ProcessingStatus,
    SourceHold,
    WebhookSecret,
    WebhookSource,
)
from .partitions import INBOX, partitions, period_start


@dataclass(frozen=True)
class SourceSnapshot:
    """An enabled source and its secrets with their expiry, as read at ``loaded_at``
    (``time.monotonic``). Its ``repr`` (what an error page shows of it) names no secret."""

    source: WebhookSource
    secrets: tuple[tuple[str, datetime | None], ...] = field(repr=False)
    loaded_at: float

    def secrets_valid(self, now: datetime | None = None) -> list[str]:
        """The secrets that verify signatures at ``now``: those without expiry and those
        still in their rotation grace period."""
        now = now or timezone.now()
        return [
            secret
            for secret, expires_at in self.secrets
            if expires_at is None or expires_at > now
        ]


# Per process: slug -> the snapshot read last (see ``webhook_source_snapshot``).
_snapshots: dict[str, SourceSnapshot] = {}


def _snapshot_load(slug: str) -> SourceSnapshot | None:
    now = timezone.now()
    expires_at = WebhookSecret._meta.get_field("expires_at")
    params = [expires_at.get_db_prep_value(now, connection), slug, True]
    with connection.cursor() as cursor:
        cursor.execute(statements.source_with_secrets_sql(connection.vendor), params)
        rows = cursor.fetchall()
    if not rows:
        return None
    fields = statements.SNAPSHOT_SOURCE_FIELDS
    width = len(fields)
    source = WebhookSource.from_db(connection.alias, fields, rows[0][:width])
    secrets = [
        (row[width], _aware(row[width + 1])) for row in rows if row[width] is not None
    ]
    return SourceSnapshot(
        source=source, secrets=tuple(secrets), loaded_at=time.monotonic()
    )


def _aware(value: datetime | str | None) -> datetime | None:
    """A stored instant as an aware datetime (SQLite hands back naive UTC, or text)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if timezone.is_aware(value) else timezone.make_aware(value, UTC)


def webhook_source_snapshot(*, slug: str, fresh: bool = False) -> SourceSnapshot | None:
    """The enabled source ``slug`` and its secrets, in one query, read at most
    ``WEBHOOK_SOURCE_CACHE_SECONDS`` ago in this process (``fresh``: now). This runs on every
    webhook request: a process serving a source steadily reads it once per period, not once
    per request. A change (a source disabled, a secret rotated) reaches every process within
    that period; in the process that made it, at once (``webhook_source_snapshot_forget``).
    Unknown and disabled slugs are not kept: each request for one reads the database."""
    max_age = settings.WEBHOOK_SOURCE_CACHE_SECONDS
    snapshot = None if fresh or max_age <= 0 else _snapshots.get(slug)
    if snapshot is not None and time.monotonic() - snapshot.loaded_at <= max_age:
        return snapshot
    snapshot = _snapshot_load(slug)
    if snapshot is None:
        _snapshots.pop(slug, None)
    elif max_age > 0:
        _snapshots[slug] = snapshot
    return snapshot


def webhook_source_snapshot_forget(*, slug: str | None = None) -> None:
    """Drops this process's snapshot of ``slug`` (of every source with ``None``)."""
    if slug is None:
        _snapshots.clear()
    else:
        _snapshots.pop(slug, None)


def webhook_source_secrets_now(*, slug: str) -> list[str]:
    """The valid secrets of the enabled source ``slug`` as stored now (none if it is gone or
    disabled); the process's snapshot is refreshed with them."""
    snapshot = webhook_source_snapshot(slug=slug, fresh=True)
    return snapshot.secrets_valid() if snapshot is not None else []


class _SecretCount(TypedDict):
    secret_count: int
    public_key_count: int
    previous_valid_until: datetime | None


def webhook_source_list() -> QuerySet[WithAnnotations[WebhookSource, _SecretCount]]:
    """Every source by slug, with how many secrets it has (never a secret), how many public
    keys, until when an earlier rotation's previous ones stay valid (``None``: none does),
    and its hold."""
    kind = WebhookSecret.Kind
    return (
        WebhookSource.objects.annotate(
            secret_count=Count("secrets", filter=Q(secrets__kind=kind.SECRET)),
            public_key_count=Count("secrets", filter=Q(secrets__kind=kind.PUBLIC_KEY)),
            previous_valid_until=Max(
                "secrets__expires_at",
                filter=Q(secrets__expires_at__gt=timezone.now()),
            ),
        )
        .select_related("hold")
        .order_by("slug")
    )


def webhook_source_key_kind(*, source: WebhookSource) -> str | None:
    """What the source verifies with (``WebhookSecret.Kind``): the kind of its newest
    secret or key (a rotation keeps to it); ``None`` for a source with neither."""
    return (
        WebhookSecret.objects.filter(source=source)
        .order_by("-created_at", "-pk")
        .values_list("kind", flat=True)
        .first()
    )


def webhook_secret_kind(*, source_id: int, fingerprint: str) -> str | None:
    """Whether the fingerprint an inbox row recorded names a secret or a public key of its
    source (``WebhookSecret.Kind``); ``None`` for none (rows stored before it was kept)."""
    if not fingerprint:
        return None
    return (
        WebhookSecret.objects.filter(source_id=source_id, fingerprint=fingerprint)
        .values_list("kind", flat=True)
        .first()
    )


@dataclass(frozen=True)
class PublicKeyShown:
    """A public key of a source as the admin and ``webhook_source list`` show it."""

    public_key: str
    fingerprint: str
    created_at: datetime
    expires_at: datetime | None


def webhook_source_public_keys(
    *, source_ids: list[int], valid_only: bool = False
) -> dict[int, list[PublicKeyShown]]:
    """The public keys of these sources, newest first, by source id (only those valid now
    with ``valid_only``); never a secret: rows of kind ``public_key`` only, which the
    database holds to the shape of a ``whpk_`` key."""
    rows = WebhookSecret.objects.filter(
        source_id__in=source_ids, kind=WebhookSecret.Kind.PUBLIC_KEY
    )
    if valid_only:
        rows = rows.filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        )
    keys: dict[int, list[PublicKeyShown]] = {pk: [] for pk in source_ids}
    for source_id, public_key, fingerprint, created_at, expires_at in rows.order_by(
        "-created_at", "-pk"
    ).values_list("source_id", "secret", "fingerprint", "created_at", "expires_at"):
        keys[source_id].append(
            PublicKeyShown(public_key, fingerprint, created_at, expires_at)
        )
    return keys


@dataclass(frozen=True)
class SourceDeliveryState:
    slug: str
    last_delivery_at: datetime | None
    expected_delivery_interval_seconds: int | None


def webhook_source_delivery_states() -> list[SourceDeliveryState]:
    """Each enabled source with the time of its latest stored delivery (a new inbox row;
    ``None`` when none) and its expected delivery interval. One statement: a ``LIMIT 1``
    probe of ``webhooks_inbox_source_idx`` per source (and partition), whatever the size of
    the inbox and however long a source has been silent.

    The source is named as a range of one, ordered by source then received time: that
    order is the index's own, and no other index gives it. With an equality the planner
    drops the source from the order, and may walk ``webhooks_inbox_received_idx`` back
    past every other source's rows until it meets one of a silent source's (9,095 rows
    read per source in ``tests/webhooks/test_source_delivery_metrics.py``, where the range
    reads one)."""
    latest = (
        InboxEvent.objects.filter(
            source_id__gte=models.OuterRef("pk"), source_id__lte=models.OuterRef("pk")
        )
        .order_by("source_id", "-received_at")
        .values("received_at")[:1]
    )
    rows = (
        WebhookSource.objects.filter(is_enabled=True)
        .annotate(last_delivery_at=models.Subquery(latest))
        .order_by("slug")
        .values_list("slug", "last_delivery_at", "expected_delivery_interval_seconds")
    )
    return [SourceDeliveryState(*row) for row in rows]


def webhook_secrets_valid(
    *, source: WebhookSource, now: datetime | None = None
) -> list[str]:
    """The secrets that verify signatures right now: the current one(s) and those still in
    their rotation grace period."""
    now = now or timezone.now()
    return list(
        WebhookSecret.objects.filter(source=source)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .values_list("secret", flat=True)
    )


def inbox_event_get(*, source_slug: str, event_id: str) -> InboxEvent | None:
    """What the event status API shows: none of the columns ingest filled from the body,
    nor the error text (``inbox_event_status_message`` says what a client may read), and
    whether its source holds it (``inbox_event_held_reason``). One query."""
    return (
        InboxEvent.objects.filter(source__slug=source_slug, event_id=event_id)
        .select_related("source__hold")
        .only(
            "event_id",
            "event_type",
            "processing_status",
            "attempts",
            "received_at",
            "processed_at",
            "delivery_count",
            "dead_letter_cause",
            "source__hold__paused_at",
        )
        .first()
    )


# --- what a replay meets again --------------------------------------------------------------


def inbox_events_replay_repeats(
    *, events_queryset: QuerySet[InboxEvent], cap: int = COUNT_CAP
) -> int:
    """How many of ``events_queryset`` are dead-lettered for a cause a replay meets again
    (``REPLAY_REPEATS_CAUSES``: their data was rejected), counted up to ``cap + 1``: what a
    replay form says before it asks for a confirmation."""
    return capped_count(
        events_queryset.filter(
            processing_status=ProcessingStatus.DEAD_LETTERED,
            dead_letter_cause__in=REPLAY_REPEATS_CAUSES,
        ),
        cap=cap,
    )


# --- one entity's events in order -----------------------------------------------------------

# The statuses of an event not finished with: waiting, being processed, or waiting for its
# retry. A later event of the same entity released before it finishes could apply first.
UNFINISHED_STATUSES = (
    ProcessingStatus.RECEIVED,
    ProcessingStatus.PROCESSING,
    ProcessingStatus.FAILED,
)


@dataclass(frozen=True)
class UnfinishedEvent:
    """The earliest unfinished event of an entity, with what tells whether a message for it
    is on its way (``webhooks.outbox``, the drain's ``_blocker_lost``)."""

    pk: int
    event_id: str
    processing_status: str
    dispatched_at: datetime | None
    held_at: datetime | None
    lease_expires_at: datetime | None


def inbox_entities_first_unfinished(
    *, keys: set[tuple[int, str]], exclude: list[int], below: int
) -> dict[tuple[int, str], UnfinishedEvent]:
    """For each ``(source_id, entity_id)`` of ``keys``, its unfinished event
    (``UNFINISHED_STATUSES``) of the lowest id below ``below``, ``exclude`` left out (the
    rows the caller is about to release): what a release of the entity's next events must
    wait for (docs/subsystems/relay.md, "One document's events in order"). Read through the
    entity index; no lock taken."""
    keys = {(source_id, entity_id) for source_id, entity_id in keys if entity_id}
    if not keys:
        return {}
    rows = (
        InboxEvent.objects.filter(
            entity_id__in={entity_id for _, entity_id in keys},
            source_id__in={source_id for source_id, _ in keys},
            processing_status__in=UNFINISHED_STATUSES,
            pk__lt=below,
        )
        .exclude(pk__in=exclude)
        .order_by("pk")
        .values_list(
            "pk",
            "source_id",
            "entity_id",
            "event_id",
            "processing_status",
            "dispatched_at",
            "held_at",
            "lease_expires_at",
        )
    )
    first: dict[tuple[int, str], UnfinishedEvent] = {}
    for pk, source_id, entity_id, event_id, status, dispatched, held, lease in rows:
        key = (source_id, entity_id)
        if key in keys and key not in first:
            first[key] = UnfinishedEvent(
                pk=pk,
                event_id=event_id,
                processing_status=status,
                dispatched_at=dispatched,
                held_at=held,
                lease_expires_at=lease,
            )
    return first


# --- paused sources -------------------------------------------------------------------------

# The statuses of an event that waits for processing: a paused source holds these.
WAITING_STATUSES = (ProcessingStatus.RECEIVED, ProcessingStatus.FAILED)
HELD_SOURCE_PAUSED = "source_paused"


def inbox_event_held_reason(*, event: InboxEvent) -> str:
    """Why the event waits unprocessed: ``source_paused`` while its source is paused and the
    event has not been processed yet (``received``, or ``failed`` waiting for its retry);
    empty otherwise. Reads the source's hold (``event.source.current_hold``)."""
    if event.processing_status not in WAITING_STATUSES:
        return ""
    hold = event.source.current_hold
    if hold is not None and hold.paused_at is not None:
        return HELD_SOURCE_PAUSED
    return ""


def webhook_source_held_count(*, source_id: int, cap: int = COUNT_CAP) -> int:
    """The events of a source that wait for processing (``received`` or ``failed``), counted
    up to ``cap + 1`` (``core.selectors.capped_count``): what a pause holds."""
    return capped_count(
        InboxEvent.objects.filter(
            source_id=source_id, processing_status__in=WAITING_STATUSES
        ),
        cap=cap,
    )


def webhook_source_pause_gauges(
    *, now: datetime | None = None, cap: int = COUNT_CAP
) -> tuple[list[tuple[str, float]], list[tuple[str, int]]]:
    """Per enabled source, by slug: seconds since it was paused (0 when not), and how many of
    its events a pause holds (0 when not paused; counted up to ``cap + 1``). Two statements
    whatever the number of sources: what ``/metrics`` reads at each scrape."""
    now = now or timezone.now()
    enabled = WebhookSource.objects.filter(is_enabled=True).order_by("slug")
    paused = [
        (slug, max((now - since).total_seconds(), 0.0) if since else 0.0)
        for slug, since in enabled.values_list("slug", "hold__paused_at")
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            statements.paused_sources_held_sql(connection.vendor),
            [*WAITING_STATUSES, cap + 1, True],
        )
        held = [(slug, int(count)) for slug, count in cursor.fetchall()]
    return paused, held


def webhook_sources_paused() -> QuerySet[SourceHold]:
    """The holds of the paused sources, with their source, longest paused first."""
    return (
        SourceHold.objects.filter(paused_at__isnull=False)
        .select_related("source")
        .order_by("paused_at", "source__slug")
    )


_STATUS_MESSAGES: dict[str, str] = {
    ProcessingStatus.IGNORED_OUT_OF_ORDER: "ignored: a newer event was already applied",
    ProcessingStatus.IGNORED_DUPLICATE_VERSION: (
        "ignored: this version was already applied"
    ),
    ProcessingStatus.IGNORED_UNSUPPORTED: "ignored: the event type is not supported",
    ProcessingStatus.FAILED: "processing failed; will retry",
}


def inbox_event_status_message(*, event: InboxEvent) -> str:
    """What an API client may read about the row's outcome: one fixed message per outcome
    (docs/security.md, "Error text"). Never ``error_message``, which holds whatever an
    exception said (SQL included) and is for the admin only."""
    if event.processing_status == ProcessingStatus.DEAD_LETTERED:
        cause = event.dead_letter_cause
        if cause not in DeadLetterCause.values:  # one this release does not know
            cause = DeadLetterCause.UNRECORDED
        return f"dead-lettered: {DeadLetterCause(cause).label}"
    return _STATUS_MESSAGES.get(event.processing_status, "")


def inbox_event_occurred_at(*, inbox_event_id: int) -> datetime | str | None:
    """The row's ``occurred_at``; the database's own text of it when Python cannot hold the
    date (one an older deployment stored, docs/security.md, "Values the database refuses")."""
    rows = InboxEvent.objects.filter(pk=inbox_event_id)
    try:
        return rows.values_list("occurred_at", flat=True).first()
    except (DataError, ValueError, OverflowError):
        text = Cast("occurred_at", output_field=models.TextField())
        return rows.annotate(text=text).values_list("text", flat=True).first()


MAX_EVENT_TYPES = 100


def inbox_event_types(*, limit: int = MAX_EVENT_TYPES) -> list[str]:
    """The distinct event types of the inbox, read with a loose index scan of
    ``(event_type, received_at)`` (one index probe per type) instead of ``SELECT DISTINCT``
    over the table."""
    with connection.cursor() as cursor:
        cursor.execute(statements.event_types_sql(connection.vendor, limit=limit))
        return [row[0] for row in cursor.fetchall()]


def inbox_event_body(*, inbox_event_id: int) -> bytes | None:
    """The stored raw body of one row (``None`` once purged)."""
    body = (
        InboxEvent.objects.filter(pk=inbox_event_id)
        .values_list("raw_body", flat=True)
        .first()
    )
    return bytes(body) if body is not None else None


def inbox_events_attempts_alias(queryset: QuerySet[InboxEvent]) -> QuerySet[InboxEvent]:
    """The rows, sortable by ``attempts_total``, their attempts in every round, and
    ``attempt_rounds``, the rounds that made one (a round's first attempt is number 1: a
    replay starts the count again). An alias: a count enters a statement only when it sorts
    by it, a lookup per row in the attempts' (event, number) index naming the row's received
    time too, the attempts' partition key, so that it reads the one partition holding them.
    What a page shows is read for its rows alone, after them
    (``inbox_events_attempts_fill``): a lookup in the rows' statement is planned over every
    attempts partition whatever the rows, and over a year of daily partitions that planning
    cost more than the rows (docs/scaling.md, "At a year of daily partitions")."""
    attempts = InboxAttempt.objects.filter(
        event=OuterRef("pk"), event_received_at=OuterRef("received_at")
    ).order_by()
    counted = attempts.values("event").annotate(n=Count("pk")).values("n")
    firsts = (
        attempts.filter(number=1).values("event").annotate(n=Count("pk")).values("n")
    )
    return queryset.alias(
        attempts_total=Coalesce(Subquery(counted), 0),
        attempt_rounds=Coalesce(Subquery(firsts), 0),
    )


def inbox_events_attempts_fill(rows: list[InboxEvent]) -> list[InboxEvent]:
    """``rows``, each with ``attempts_total`` and ``attempt_rounds`` as
    ``inbox_events_attempts_alias`` names them, read in one statement bounded by the rows'
    first and last received time: PostgreSQL plans and reads only the attempts partitions
    of the days the rows were received on."""
    if not rows:
        return rows
    times = [row.received_at for row in rows]
    counts: dict[Any, tuple[int, int]] = {
        event: (total, rounds)
        for event, total, rounds in InboxAttempt.objects.filter(
            event_id__in=[row.pk for row in rows],
            event_received_at__gte=min(times),
            event_received_at__lte=max(times),
        )
        .order_by()
        .values("event")
        .annotate(total=Count("pk"), rounds=Count("pk", filter=Q(number=1)))
        .values_list("event", "total", "rounds")
    }
    # Attributes of the rows as the console shows them, not columns.
    for row in cast(list[Any], rows):
        row.attempts_total, row.attempt_rounds = counts.get(row.pk, (0, 0))
    return rows


def inbox_events_by_pks(*, pks: list[int]) -> QuerySet[InboxEvent]:
    """The rows an operator action names, with their source, in id order."""
    return (
        InboxEvent.objects.filter(pk__in=pks)
        .select_related("source")
        .only("pk", "event_id", "source__slug")
        .order_by("pk")
    )


def inbox_event_products(*, event: InboxEvent, limit: int = 10) -> list[models.Model]:
    """What the event produced in the apps its handlers write to (a research revision, say):
    every row of another app that points at it. Found through the relations those apps
    declare, so that the inbox names none of them."""
    found: list[models.Model] = []
    for relation in InboxEvent._meta.related_objects:
        model = relation.related_model
        if isinstance(model, str):  # "self": the inbox's own
            continue
        if model._meta.app_label == InboxEvent._meta.app_label or relation.many_to_many:
            continue
        related = model._base_manager.filter(**{relation.field.name: event})
        found.extend(related.order_by("pk")[:limit])
    return found


def inbox_events_newest(
    queryset: QuerySet[InboxEvent], *, rows: int = COUNT_CAP
) -> QuerySet[InboxEvent]:
    """The whole inbox newest first (``queryset`` unfiltered), read from the start of
    yesterday's partition period on when those rows alone are more than ``rows``
    (docs/scaling.md, "The console's first pages at ten million rows"): every page a count
    capped at ``rows`` offers then lies among them, since every other row is older. The
    queryset returned knows it holds more than ``rows`` rows and the period of the whole
    inbox, from its first row to its newest (``core.models.BoundedQuerySet``): the page's
    statements plan and open the newest partitions only, where over every partition kept
    PostgreSQL plans and opens each of them for each statement. Else, or on the embedded
    SQLite default, ``queryset`` as it was."""
    if connection.vendor != "postgresql" or not isinstance(queryset, BoundedQuerySet):
        return queryset
    since = period_start(period_start(timezone.now()) - timedelta(microseconds=1))
    recent = queryset.filter(received_at__gte=since)
    if capped_count(recent, cap=rows) <= rows:
        return queryset
    # The whole inbox's first and last row, in a statement without values: prepared, it is
    # planned once per connection (core/plans.py), where planned for a bound it costs more.
    bounds = queryset.order_by().aggregate(
        first=Min("received_at"), last=Max("received_at")
    )
    first, last = bounds["first"], bounds["last"]
    return recent.period_known("received_at", first, last).more_than_known(rows)


# How many inbox rows an id prefix may name when the operator actions are searched by it.
ACTION_SEARCH_EVENTS_MAX = 50


def inbox_event_search_q(*, term: str) -> Q:
    """Inbox rows whose event id or entity id starts with ``term`` (an index range scan on
    each: the two id indexes use the pattern operator class)."""
    return functools.reduce(operator.or_, _search_prefixes(term))


def _search_prefixes(term: str) -> list[Q]:
    """What ``inbox_event_search_q`` finds, one condition an id index."""
    return [Q(event_id__startswith=term), Q(entity_id__startswith=term)]


# The most rows a search reads the received times of, to bound its page's statements by
# them; a search finding more (a prefix as short as ``evt``) is bounded by the days (time
# partitions) that hold one of its rows instead. Read from an id index alone, 100,000 rows'
# times take about 20 ms on PostgreSQL (10,000 read row by row took about 10), 500,000 take
# 110-160 ms (docs/scaling.md, "A search reads the days of the rows it finds").
SEARCH_BOUNDS_ROWS = 100_000


def inbox_events_search(
    queryset: QuerySet[InboxEvent], *, term: str
) -> QuerySet[InboxEvent]:
    """The rows of ``queryset`` that ``term`` finds (``inbox_event_search_q``), bounded by
    the first and last received time of the rows it finds, read first (up to
    ``SEARCH_BOUNDS_ROWS`` of them from each of the two id indexes, which hold them). On
    partitions, every statement of a page then reads the days those rows lie in, not every
    day kept (docs/scaling.md, "Time partitions of the inbox"); no row found, no other
    statement reads the inbox's rows. A search that finds more is bounded by the days that
    hold one of its rows (``_days_found``). A row received after that first statement is in
    the next page shown."""
    prefixes = _search_prefixes(term)
    matches = functools.reduce(operator.or_, prefixes)
    bounds = _received_bounds(prefixes)
    if bounds is None:
        return queryset.none()
    filtered = bool(queryset.query.where)
    queryset = queryset.filter(matches)
    if bounds.capped:
        days = _days_found(prefixes)
        if days is None:
            return queryset
        queryset = queryset.filter(_days_q(days))
        if not isinstance(queryset, BoundedQuerySet):
            return queryset
        if days and days[0][0] is not None:
            # The date hierarchy's period, from the days that hold a row: its first and
            # last row read instead would walk the received-time index from each end of
            # those days through every row that does not match (342 of a 590 ms page at
            # ten million rows, docs/scaling.md, "Time partitions of the inbox").
            queryset = queryset.period_known(
                "received_at", days[0][0], days[-1][1] - timedelta(microseconds=1)
            )
        if not filtered:
            # An index held more rows than that: the page's capped count would read
            # those days in their order on disk until it had enough (docs/scaling.md).
            queryset = queryset.more_than_known(SEARCH_BOUNDS_ROWS)
        return queryset
    return queryset.filter(received_at__gte=bounds.first, received_at__lte=bounds.last)


@dataclass(frozen=True)
class _Bounds:
    first: datetime
    last: datetime
    capped: bool  # an index held more than SEARCH_BOUNDS_ROWS: the times are of some


def _received_bounds(prefixes: list[Q]) -> _Bounds | None:
    """The first and last received time of the rows ``prefixes`` find, one aggregate in
    the database for each id index, of up to ``SEARCH_BOUNDS_ROWS`` rows each; None when
    none is found. Each reads the received times its index holds beside the ids
    (``webhooks.0038``), so that neither visits a row: the conditions together would be
    read as a bitmap of rows, each row visited, and PostgreSQL's own MIN and MAX walk the
    received-time index through every row of the day that does not match."""
    first: datetime | None = None
    last: datetime | None = None
    capped = False
    for prefix in prefixes:
        bounds = (
            InboxEvent.objects.filter(prefix)
            .order_by()
            .values("received_at")[: SEARCH_BOUNDS_ROWS + 1]
            .aggregate(first=Min("received_at"), last=Max("received_at"), n=Count("*"))
        )
        if not bounds["n"]:
            continue
        capped = capped or bounds["n"] > SEARCH_BOUNDS_ROWS
        first = bounds["first"] if first is None else min(first, bounds["first"])
        last = bounds["last"] if last is None else max(last, bounds["last"])
    if first is None or last is None:
        return None
    return _Bounds(first=first, last=last, capped=capped)


def _days_found(prefixes: list[Q]) -> list[tuple[datetime | None, datetime]] | None:
    """The received times of the inbox's partitions that hold a row one of ``prefixes``
    finds, in one statement: a probe of each partition's id index for each prefix (its
    ``LIMIT 1``), an index-only scan that stops at the index's first entry in the prefix's
    range. Ranges ``(start, end)`` in time order, adjacent days one range, ``start`` None for
    the first partition (from the earliest). None when the inbox is not partitioned
    (SQLite).

    A probe of the prefixes together was planned as a scan of the partition in its order on
    disk, stopped at its first match (a third of a day's rows matched, by the statistics):
    at ten million rows the 238,988 rows stored before a day's first match were read, 167
    ms, wherever the rows found lie within their day (docs/bench-log/2026-12-07.md, "The
    date hierarchy of a search of days").

    Without it, a search of many rows that all lie in older days let PostgreSQL read the
    newest days row by row through the received-time index, looking for a match that is not
    there: its plan for the page (newest first) and for the date hierarchy's first and last
    received times assumes the matches spread evenly over every day kept. On three million
    rows over 30 days, a prefix of 100,000 rows of one day 28 days back took 5.6 s a page
    (docs/scaling.md, "Time partitions of the inbox")."""
    days = partitions(INBOX)
    if not days:
        return None
    probes = [
        InboxEvent.objects.filter(prefix, _received_within(day.start, day.end))
        .order_by()
        .annotate(day=Value(number))
        .values_list("day", flat=True)[:1]
        for number, day in enumerate(days)
        for prefix in prefixes
    ]
    held = set(probes[0].union(*probes[1:], all=True))
    ranges: list[list] = []
    for number in sorted(held):
        day = days[number]
        if ranges and ranges[-1][1] == day.start:
            ranges[-1][1] = day.end
        else:
            ranges.append([day.start, day.end])
    return [(start, end) for start, end in ranges]


def _days_q(days: list[tuple[datetime | None, datetime]]) -> Q:
    """The rows received within ``days`` (``_days_found``); none when it is empty."""
    if not days:
        return Q(pk__in=[])
    return functools.reduce(
        operator.or_, (_received_within(start, end) for start, end in days)
    )


def _received_within(start: datetime | None, end: datetime) -> Q:
    """Received from ``start`` (None: the first partition, from the earliest) to ``end``."""
    within = Q(received_at__lt=end)
    return within if start is None else within & Q(received_at__gte=start)


def operator_actions_on_events_q(*, term: str) -> Q | None:
    """Operator actions on an inbox row whose event id starts with ``term`` (the newest
    ``ACTION_SEARCH_EVENTS_MAX`` such rows, in the days that hold one), or None when no row
    matches."""
    matches = Q(event_id__startswith=term)
    rows = InboxEvent.objects.filter(matches)
    days = _days_found([matches])
    if days is not None:  # the newest rows of the days that hold one (_days_found)
        rows = rows.filter(_days_q(days))
    pks = list(
        rows.order_by("-received_at").values_list("pk", flat=True)[
            :ACTION_SEARCH_EVENTS_MAX
        ]
    )
    if not pks:
        return None
    if connection.vendor == "postgresql":
        return functools.reduce(
            lambda q, pk: q | Q(event_ids__contains=[pk]),
            pks[1:],
            Q(event_ids__contains=[pks[0]]),
        )
    # SQLite (local runs) has no JSON containment: the actions are few there.
    wanted = set(pks)
    return Q(
        pk__in=[
            action.pk
            for action in OperatorAction.objects.only("event_ids").iterator()
            if wanted.intersection(action.event_ids)
        ]
    )


# The most events of one bulk replay whose outcomes a page counts (one grouped query).
BULK_OUTCOMES_MAX = 100_000


def _bulk_job_event_ids_sql() -> str:
    table = OperatorAction._meta.db_table
    return (
        f"SELECT (jsonb_array_elements_text(event_ids::jsonb))::bigint FROM {table} "  # noqa: S608 - our names
        "WHERE bulk_job_id = %s AND action = 'bulk_replay'"
    )


def bulk_replay_job_events_q(*, job_id: int) -> Q:
    """The inbox rows a bulk replay job replayed (the event ids of its chunks' actions)."""
    if connection.vendor == "postgresql":
        # Our table and column names; the job's id is a parameter.
        return Q(
            pk__in=models.expressions.RawSQL(_bulk_job_event_ids_sql(), [job_id])  # noqa: S611
        )
    ids: set[int] = set()
    for event_ids in OperatorAction.objects.filter(
        bulk_job_id=job_id, action=OperatorAction.Action.BULK_REPLAY
    ).values_list("event_ids", flat=True):
        ids.update(int(pk) for pk in event_ids)
    return Q(pk__in=ids)


def bulk_replay_job_outcomes(*, job_id: int, replayed: int) -> dict[str, int] | None:
    """What became of the events a bulk replay job replayed, by their status now
    (``processed``, ``dead_lettered`` again, still ``received``...); None when the job
    replayed more than ``BULK_OUTCOMES_MAX`` events (too many to count on a page)."""
    if replayed > BULK_OUTCOMES_MAX:
        return None
    if not replayed:
        return {}
    return dict(
        InboxEvent.objects.filter(bulk_replay_job_events_q(job_id=job_id))
        .order_by()
        .values_list("processing_status")
        .annotate(n=models.Count("id"))
        .values_list("processing_status", "n")
    )
