"""The inbox's figures by the hour, for the dashboard (docs/scaling.md, "The dashboard at
scale").

Beat counts them every DASHBOARD_FIGURES_INTERVAL_SECONDS (``inbox_figures_count``): one
read of the last 25 hours of the inbox through its ``received_at`` index, grouped by the UTC
hour, into ``InboxHourlyFigures`` (events and deliveries by processing status) and
``InboxHourlyLatency`` (a histogram of each latency). The dashboard reads those and, live,
only the events received since the count stopped (``inbox_figures_window``): what a page
costs follows the traffic since the last count, not the day's.

Percentiles cannot be added up, so each latency is kept as a histogram per hour, in buckets
that each span 1% of their values (negative values mirrored, and one bucket for less than a
millisecond either way), each with its count, its least and its greatest value. A
percentile is read from the window's buckets merged, interpolated by rank between a
bucket's least and greatest value: it falls in the exact figure's bucket (within 1% of it),
and is the exact figure where the ranks it reads lie in buckets of one or two values."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, models, transaction
from django.db.models import Max, Min, Sum
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from trail.models import OperatorAction
from webhooks.models import InboxEvent
from webhooks.selectors import webhook_sources_paused

from .models import (
    InboxFiguresCounted,
    InboxHourlyFigures,
    InboxHourlyLatency,
    LatencyFigure,
)

HOUR = timedelta(hours=1)
# The dashboard's window: the hour now and the 23 before it, the chart's 24 bars.
WINDOW_HOURS = 24
# A count covers one hour more than the window: a dashboard whose clock is behind the
# counting worker's (by less than an hour) still finds its first hour counted.
COUNTED_HOURS = WINDOW_HOURS + 1
# A delivery's row carries the time it was received and commits a moment later (within the
# web's statement timeout): a count stops this long before it starts, so that it never
# passes a row not committed yet. The dashboard reads the later rows live.
COUNTED_LAG = timedelta(minutes=1)
# Latency buckets: a value of at least 1 ms falls in 1 + floor(log(v / 1 ms) / log(1.01)),
# a negative one in the same negated, anything nearer zero in bucket 0.
BUCKET_FLOOR = 0.001
BUCKET_GROWTH = 1.01
_LOG_GROWTH = math.log(BUCKET_GROWTH)
_DELETE_CHUNK = 500


def hour_start(instant: datetime) -> datetime:
    return instant.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def window_start(now: datetime) -> datetime:
    """The start of the dashboard's window: the start of the hour 23 hours before ``now``'s."""
    return hour_start(now) - (WINDOW_HOURS - 1) * HOUR


def latency_bucket(seconds: float) -> int:
    """The histogram bucket of a latency (the same as the SQL of ``_FIGURES_SQL``)."""
    size = abs(seconds)
    if size < BUCKET_FLOOR:
        return 0
    index = 1 + math.floor(math.log(size / BUCKET_FLOOR) / _LOG_GROWTH)
    return index if seconds > 0 else -index


# A histogram: bucket -> [count, least, greatest].
Histogram = dict[int, list[float]]


def latency_percentiles(
    histogram: Histogram,
) -> tuple[float | None, float | None]:
    """p50 and p95 of the values a histogram holds, interpolated between the closest ranks
    as PostgreSQL's ``percentile_cont`` does; each rank's value interpolated between its
    bucket's least and greatest value."""
    ordered = sorted(histogram.items())
    total = int(sum(count for count, _, _ in histogram.values()))
    if not total:
        return None, None

    def value_at(rank: int) -> float:
        for _, (count, low, high) in ordered:
            if rank < count:
                return low if count < 2 else low + (high - low) * rank / (count - 1)
            rank -= int(count)
        raise AssertionError("a rank past the histogram")

    def pick(q: float) -> float:
        position = q * (total - 1)
        low = int(position)
        high = min(low + 1, total - 1)
        below, above = value_at(low), value_at(high)
        return below + (above - below) * (position - low)

    return pick(0.5), pick(0.95)


# --- pauses ------------------------------------------------------------------------------


def _instant(value: Any) -> datetime | None:
    """A stored instant as SQLite gives it back (text), or None when Python cannot hold it."""
    if value is None or isinstance(value, datetime):
        return value
    try:
        parsed = parse_datetime(str(value))
    except ValueError:
        return None
    if parsed is not None and timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, UTC)
    return parsed


# A pause: a source's events were held from ``start`` to ``end``.
PauseWindow = tuple[int, datetime, datetime]


def pause_windows(*, since: datetime, now: datetime) -> list[PauseWindow]:
    """The pauses that ended since ``since`` or go on now, as (source id, paused at,
    resumed at or ``now``): each resume's operator action records when its pause began
    (``details["paused_at"]``), a source paused now has its hold. An event received since
    ``since`` can only have waited in these."""
    windows: list[PauseWindow] = []
    resumes = OperatorAction.objects.filter(
        action=OperatorAction.Action.RESUME_SOURCE, created_at__gte=since
    ).only("created_at", "details")
    for resume in resumes:
        details = resume.details if isinstance(resume.details, dict) else {}
        source_id = details.get("source_id")
        paused_at = _instant(details.get("paused_at"))
        if isinstance(source_id, int) and paused_at is not None:
            windows.append((source_id, paused_at, resume.created_at))
    for hold in webhook_sources_paused():
        if hold.paused_at is not None:
            windows.append((hold.source_id, hold.paused_at, now))
    return windows


def _held_seconds(
    windows: list[PauseWindow], *, source_id: int, start: datetime, end: datetime
) -> float:
    """How long of ``start`` to ``end`` the source's events were held by a pause."""
    held = 0.0
    for window_source, paused, resumed in windows:
        if window_source == source_id:
            overlap = (min(end, resumed) - max(start, paused)).total_seconds()
            held += max(overlap, 0.0)
    return held


# --- the figures of a range of received times ----------------------------------------------


@dataclass
class InboxFigures:
    """The figures of the events received in a range, by the UTC hour of their receipt:
    (hour, status) -> [events, deliveries], and (hour, latency, bucket) -> [count, least,
    greatest]."""

    counts: dict[tuple[datetime, str], list[int]] = field(default_factory=dict)
    latency: dict[tuple[datetime, str, int], list[float]] = field(default_factory=dict)

    def events_add(
        self, hour: datetime, status: str, *, events: int, deliveries: int
    ) -> None:
        row = self.counts.setdefault((hour, status), [0, 0])
        row[0] += events
        row[1] += deliveries

    def bucket_add(
        self,
        hour: datetime,
        figure: str,
        bucket: int,
        *,
        count: int,
        low: float,
        high: float,
    ) -> None:
        row = self.latency.get((hour, figure, bucket))
        if row is None:
            self.latency[(hour, figure, bucket)] = [count, low, high]
        else:
            row[0] += count
            row[1] = min(row[1], low)
            row[2] = max(row[2], high)

    def value_add(self, hour: datetime, figure: str, seconds: float) -> None:
        bucket = latency_bucket(seconds)
        self.bucket_add(hour, figure, bucket, count=1, low=seconds, high=seconds)


# One statement: the events of the range (through the ``received_at`` index of each day's
# partition) grouped by hour and status, and each latency's values by hour and bucket. The
# time a pause held an event is read from the pauses given (``pause_windows``), for the
# events of a paused source within the pauses' span only.
_FIGURES_SQL = """
WITH pauses AS (
    SELECT * FROM unnest(%(sources)s::bigint[], %(starts)s::timestamptz[],
                         %(ends)s::timestamptz[]) AS p(source_id, paused, resumed)
), events AS (
    SELECT date_trunc('hour', e.received_at, 'UTC') AS hour,
           e.processing_status AS status,
           e.delivery_count,
           EXTRACT(EPOCH FROM (e.processed_at - e.received_at)) AS total,
           CASE WHEN e.processed_at IS NULL THEN NULL
                WHEN NOT e.source_id = ANY(%(paused_sources)s::bigint[])
                     OR e.processed_at <= %(first_pause)s
                     OR e.received_at >= %(last_resume)s
                THEN 0
                ELSE COALESCE((
                    SELECT sum(GREATEST(EXTRACT(EPOCH FROM (
                        LEAST(e.processed_at, p.resumed)
                        - GREATEST(e.received_at, p.paused))), 0))
                      FROM pauses p WHERE p.source_id = e.source_id), 0)
           END AS held,
           CASE WHEN isfinite(e.occurred_at)
                THEN EXTRACT(EPOCH FROM (e.received_at - e.occurred_at))
           END AS delay
      FROM {table} e
     WHERE e.received_at >= %(start)s {until}
), latencies AS (
    SELECT hour, v.figure, v.seconds::float8 AS seconds
      FROM events,
           LATERAL (VALUES ('processing', total - held),
                           ('held', CASE WHEN held > 0 THEN held END),
                           ('producer_delay', delay)) AS v(figure, seconds)
     WHERE v.seconds IS NOT NULL
)
SELECT hour, status, NULL::integer, count(*), sum(delivery_count),
       NULL::float8, NULL::float8
  FROM events
 GROUP BY hour, status
UNION ALL
SELECT hour, figure, bucket, count(*), NULL, min(seconds), max(seconds)
  FROM (SELECT hour, figure, seconds,
               CASE WHEN abs(seconds) < %(floor)s THEN 0
                    ELSE (sign(seconds)
                          * (1 + floor(ln(abs(seconds) / %(floor)s) / %(log_growth)s))
                         )::integer
               END AS bucket
          FROM latencies) AS b
 GROUP BY hour, figure, bucket
"""


def inbox_figures_sql(
    *, start: datetime, end: datetime | None, windows: list[PauseWindow]
) -> tuple[str, dict[str, Any]]:
    """The statement of PostgreSQL's reading of the figures, and its parameters."""
    sources = [window[0] for window in windows]
    starts = [window[1] for window in windows]
    ends = [window[2] for window in windows]
    sql = _FIGURES_SQL.format(
        table=connection.ops.quote_name(InboxEvent._meta.db_table),
        until="AND e.received_at < %(end)s" if end is not None else "",
    )
    return sql, {
        "sources": sources,
        "starts": starts,
        "ends": ends,
        "paused_sources": sorted(set(sources)),
        "first_pause": min(starts, default=start),
        "last_resume": max(ends, default=start),
        "start": start,
        "end": end,
        "floor": BUCKET_FLOOR,
        "log_growth": _LOG_GROWTH,
    }


def _figures_in_sql(
    *, start: datetime, end: datetime | None, windows: list[PauseWindow]
) -> InboxFigures:
    sql, params = inbox_figures_sql(start=start, end=end, windows=windows)
    figures = InboxFigures()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    for hour, name, bucket, count, deliveries, low, high in rows:
        if bucket is None:
            figures.events_add(hour, name, events=count, deliveries=deliveries)
        else:
            figures.bucket_add(hour, name, bucket, count=count, low=low, high=high)
    return figures


def _figures_in_python(
    *, start: datetime, end: datetime | None, windows: list[PauseWindow]
) -> InboxFigures:
    """The same figures read row by row: the embedded default's (SQLite). Each instant is
    read as the stored text and parsed alone: one that Python cannot hold (a producer's year
    0, stored as given) leaves its delay out instead of failing the page."""
    table = InboxEvent._meta.db_table
    instants = ", ".join(
        f"CAST({name} AS TEXT)"
        for name in ("received_at", "processed_at", "occurred_at")
    )
    sql = (
        f"SELECT source_id, processing_status, delivery_count, {instants}"  # noqa: S608 - the model's names, values are parameters
        f" FROM {table} WHERE received_at >= %s"
    )
    params = [connection.ops.adapt_datetimefield_value(start)]
    if end is not None:
        sql += " AND received_at < %s"
        params.append(connection.ops.adapt_datetimefield_value(end))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    figures = InboxFigures()
    for source_id, status, deliveries, *stored in rows:
        received, processed, occurred = map(_instant, stored)
        if received is None:
            continue
        hour = hour_start(received)
        figures.events_add(hour, status, events=1, deliveries=deliveries)
        if processed is not None:
            held = _held_seconds(
                windows, source_id=source_id, start=received, end=processed
            )
            total = (processed - received).total_seconds()
            figures.value_add(hour, LatencyFigure.PROCESSING, total - held)
            if held > 0:
                figures.value_add(hour, LatencyFigure.HELD, held)
        if occurred is not None:
            delay = (received - occurred).total_seconds()
            figures.value_add(hour, LatencyFigure.PRODUCER_DELAY, delay)
    return figures


def inbox_figures_between(
    *, start: datetime, end: datetime | None, now: datetime
) -> InboxFigures:
    """The figures of the events received from ``start`` to before ``end`` (none: every
    later one), their latencies less the time a pause held them as the pauses stand at
    ``now``."""
    windows = pause_windows(since=start, now=now)
    if connection.vendor == "postgresql":
        return _figures_in_sql(start=start, end=end, windows=windows)
    return _figures_in_python(start=start, end=end, windows=windows)


# --- the count ---------------------------------------------------------------------------


def _rows_replace(
    model: type[models.Model],
    *,
    keys: tuple[str, ...],
    values: tuple[str, ...],
    wanted: dict[tuple, list],
) -> int:
    """Makes ``model``'s rows exactly ``wanted`` (key fields' values -> the other fields'):
    rows that did not change are not written, rows no longer wanted are deleted. Returns
    how many rows were written or deleted."""
    rows = model._default_manager
    stored = {
        tuple(row[: len(keys)]): (row[-1], list(row[len(keys) : -1]))
        for row in rows.values_list(*keys, *values, "pk")
    }
    gone = [pk for key, (pk, _) in stored.items() if key not in wanted]
    for chunk in range(0, len(gone), _DELETE_CHUNK):
        rows.filter(pk__in=gone[chunk : chunk + _DELETE_CHUNK]).delete()
    written = [
        model(
            **dict(zip(keys, key, strict=True)), **dict(zip(values, row, strict=True))
        )
        for key, row in wanted.items()
        if key not in stored or stored[key][1] != row
    ]
    rows.bulk_create(
        written,
        update_conflicts=True,
        unique_fields=list(keys),
        update_fields=list(values),
    )
    return len(gone) + len(written)


def inbox_figures_count(*, now: datetime | None = None) -> InboxFiguresCounted:
    """Counts the figures of the events received in the last COUNTED_HOURS hours, up to
    COUNTED_LAG before ``now``, by the hour, and stores them in place of the last count's
    (the rows whose figures did not change are left as they are, the hours before the
    count's dropped), in one short transaction after the read. Idempotent; counts that end
    at once take turns on the row of ``InboxFiguresCounted``, and a count that finds a later
    one stored leaves it standing."""
    started = time.monotonic()
    at = now or timezone.now()
    end = at - COUNTED_LAG
    start = hour_start(end) - (COUNTED_HOURS - 1) * HOUR
    figures = inbox_figures_between(start=start, end=end, now=at)
    InboxFiguresCounted.objects.get_or_create(id=1)
    with transaction.atomic():
        counted = InboxFiguresCounted.objects.select_for_update().get(id=1)
        if counted.counted_at is not None and counted.counted_at > at:
            return counted
        _rows_replace(
            InboxHourlyFigures,
            keys=("hour", "processing_status"),
            values=("events", "deliveries"),
            wanted={key: list(row) for key, row in figures.counts.items()},
        )
        _rows_replace(
            InboxHourlyLatency,
            keys=("hour", "figure", "bucket"),
            values=("count", "low", "high"),
            wanted={key: list(row) for key, row in figures.latency.items()},
        )
        counted.counted_from, counted.counted_to, counted.counted_at = start, end, at
        counted.seconds = time.monotonic() - started
        counted.save()
    return counted


# --- the dashboard's window ----------------------------------------------------------------


@dataclass
class InboxWindow:
    """The inbox's figures over the dashboard's window: the events received before
    ``counted_to`` as they stood at ``counted_at`` (the last count's), the later ones as
    they stand now; all of them as they stand now when ``counted_to`` is None."""

    by_status: dict[str, int]
    events: int
    deliveries: int
    per_hour: dict[datetime, int]
    latency: dict[str, Histogram]
    counted_to: datetime | None
    counted_at: datetime | None


def _counted(
    *, since: datetime
) -> tuple[InboxFiguresCounted | None, list[tuple], list[tuple]]:
    """The last count, if it covers ``since``, with its figures of the hours from
    ``since``: its rows by (hour, status), and its latencies' buckets over those hours. A
    count that ends while they are read is read again (it writes its figures and its row in
    one transaction)."""
    for _ in range(3):
        counted = InboxFiguresCounted.objects.filter(
            id=1, counted_from__lte=since, counted_to__isnull=False
        ).first()
        if counted is None:
            break
        counts = list(
            InboxHourlyFigures.objects.filter(hour__gte=since).values_list(
                "hour", "processing_status", "events", "deliveries"
            )
        )
        buckets = list(
            InboxHourlyLatency.objects.filter(hour__gte=since)
            .values("figure", "bucket")
            .annotate(n=Sum("count"), least=Min("low"), greatest=Max("high"))
            .values_list("figure", "bucket", "n", "least", "greatest")
            .order_by()
        )
        if InboxFiguresCounted.objects.filter(
            id=1, counted_at=counted.counted_at
        ).exists():
            return counted, counts, buckets
    return None, [], []


def _bucket_merge(histogram: Histogram, bucket: int, row: list[float]) -> None:
    merged = histogram.get(bucket)
    if merged is None:
        histogram[bucket] = list(row)
    else:
        merged[0] += row[0]
        merged[1] = min(merged[1], row[1])
        merged[2] = max(merged[2], row[2])


def inbox_figures_window(*, since: datetime, now: datetime) -> InboxWindow:
    """The figures of the events received since ``since`` (the start of an hour): the last
    count's for the hours it covers, and the events received after the count stopped read
    live. Before a first count, or when the last one does not reach back to ``since``, every
    event of the window is read live."""
    counted, counts, buckets = _counted(since=since)
    live_from = since if counted is None else max(since, counted.counted_to or since)
    live = inbox_figures_between(start=live_from, end=None, now=now)
    by_status: dict[str, int] = {}
    per_hour: dict[datetime, int] = {}
    events = deliveries = 0
    rows = [(hour, status, n, d) for hour, status, n, d in counts] + [
        (hour, status, n, d) for (hour, status), (n, d) in live.counts.items()
    ]
    for hour, status, n, d in rows:
        by_status[status] = by_status.get(status, 0) + n
        per_hour[hour] = per_hour.get(hour, 0) + n
        events += n
        deliveries += d
    latency: dict[str, Histogram] = {}
    for figure, bucket, n, low, high in buckets:
        _bucket_merge(latency.setdefault(figure, {}), bucket, [n, low, high])
    for (_, figure, bucket), row in live.latency.items():
        _bucket_merge(latency.setdefault(figure, {}), bucket, row)
    return InboxWindow(
        by_status=by_status,
        events=events,
        deliveries=deliveries,
        per_hour=per_hour,
        latency=latency,
        counted_to=counted.counted_to if counted else None,
        counted_at=counted.counted_at if counted else None,
    )
