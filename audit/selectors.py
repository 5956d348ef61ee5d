"""Reads of the audit console. Every query here is bounded: the dashboard reads only the last
24 h through the ``received_at`` index, and counts that could grow without limit are capped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, F, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.selectors import COUNT_CAP, capped_count
from idempotency.selectors import idempotency_records_stuck
from webhooks.models import (
    InboxEvent,
    OperatorAction,
    ProcessingStatus,
    SignatureFailure,
)
from webhooks.selectors import webhook_source_held_count, webhook_sources_paused


def _percentiles(values: list[float]) -> tuple[float | None, float | None]:
    """p50 and p95 of ``values`` interpolated between the closest ranks, as PostgreSQL's
    ``percentile_cont`` gives them (the same figures on either database)."""
    if not values:
        return None, None
    values = sorted(values)

    def pick(q: float) -> float:
        position = q * (len(values) - 1)
        low = int(position)
        high = min(low + 1, len(values) - 1)
        return values[low] + (values[high] - values[low]) * (position - low)

    return pick(0.5), pick(0.95)


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


def _latency_percentiles(since: datetime) -> dict[str, float | None]:
    """p50 and p95, in seconds, of the events received since ``since``: ``processing`` from
    received to processed (the product's own latency), and apart ``producer_delay`` from
    occurred (the producer's clock) to received (a backfill reads months here)."""
    if connection.vendor == "postgresql":
        table = InboxEvent._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY processing),
                       percentile_cont(0.95) WITHIN GROUP (ORDER BY processing),
                       percentile_cont(0.5) WITHIN GROUP (ORDER BY delay),
                       percentile_cont(0.95) WITHIN GROUP (ORDER BY delay)
                FROM (
                    SELECT EXTRACT(EPOCH FROM (processed_at - received_at)) AS processing,
                           EXTRACT(EPOCH FROM (received_at - occurred_at)) AS delay
                    FROM {table}
                    WHERE received_at >= %s
                ) AS latencies
                """,  # noqa: S608 - the table name is the model's, not input
                [since],
            )
            row = cursor.fetchone()
        p50, p95, d50, d95 = (None if v is None else float(v) for v in row)
    else:
        # Read as the stored text and parsed here, each instant alone: one that Python cannot
        # hold (a producer's year 0, stored as given) leaves its delay out instead of failing
        # the page.
        table = InboxEvent._meta.db_table
        with connection.cursor() as cursor:
            columns = ", ".join(
                f"CAST({name} AS TEXT)"
                for name in ("received_at", "processed_at", "occurred_at")
            )
            cursor.execute(
                f"SELECT {columns} FROM {table} WHERE received_at >= %s",  # noqa: S608 - the model's names, values are parameters
                [connection.ops.adapt_datetimefield_value(since)],
            )
            rows = cursor.fetchall()
        processing, delay = [], []
        for received, processed, occurred in (map(_instant, row) for row in rows):
            if received is None:
                continue
            if processed is not None:
                processing.append((processed - received).total_seconds())
            if occurred is not None:
                delay.append((received - occurred).total_seconds())
        (p50, p95), (d50, d95) = _percentiles(processing), _percentiles(delay)
    return {
        "processing_p50": p50,
        "processing_p95": p95,
        "producer_delay_p50": d50,
        "producer_delay_p95": d95,
    }


def stuck_idempotency_keys(*, now: datetime) -> int:
    """Idempotency records still ``processing`` past the horizon (capped count)."""
    return capped_count(idempotency_records_stuck(now=now))


def paused_sources(*, now: datetime) -> list[dict]:
    """The paused sources, longest paused first: since when, by whom, why, and how many of
    their events wait (a capped count, one per paused source)."""
    rows = []
    for hold in webhook_sources_paused():
        waiting = webhook_source_held_count(source_id=hold.source_id, cap=COUNT_CAP)
        rows.append(
            {
                "slug": hold.source.slug,
                "pk": hold.source_id,
                "since": hold.paused_at,
                "seconds": max((now - (hold.paused_at or now)).total_seconds(), 0.0),
                "by": hold.paused_by_name,
                "reason": hold.pause_reason,
                "waiting": min(waiting, COUNT_CAP),
                "waiting_capped": waiting > COUNT_CAP,
            }
        )
    return rows


RECENT_ACTIONS = 8


def recent_operator_actions(*, limit: int = RECENT_ACTIONS) -> list[dict]:
    """The latest operator actions (what the console shows instead of the admin's "Recent
    actions", which nothing here writes): when, who, what, on how many events."""
    return [
        {
            "pk": action.pk,
            "at": action.created_at,
            "actor": action.actor_name,
            "action": action.action_words,
            "events": action.events_words,
        }
        for action in OperatorAction.objects.order_by("-created_at", "-id").only(
            "created_at", "actor_name", "action", "event_count", "details"
        )[:limit]
    ]


def dashboard_figures(*, now: datetime | None = None) -> dict:
    now = now or timezone.now()
    since = now - timedelta(hours=24)
    recent = InboxEvent.objects.filter(received_at__gte=since)
    by_status = dict(
        recent.order_by()
        .values_list("processing_status")
        .annotate(n=Count("id"))
        .values_list("processing_status", "n")
    )
    totals = recent.order_by().aggregate(
        events=Count("id"),
        deliveries=Sum("delivery_count"),
        duplicates=Sum(F("delivery_count") - 1),
    )
    events = totals["events"] or 0
    deliveries = totals["deliveries"] or 0
    duplicates = totals["duplicates"] or 0
    signature_failures = (
        SignatureFailure.objects.filter(window_start__gte=since).aggregate(
            n=Sum("count")
        )["n"]
        or 0
    )
    attempts = deliveries + signature_failures
    per_hour = dict(
        recent.order_by()
        .annotate(hour=TruncHour("received_at"))
        .values_list("hour")
        .annotate(n=Count("id"))
        .values_list("hour", "n")
    )
    start = since.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    hours = [start + timedelta(hours=i) for i in range(24)]
    series = [(hour, per_hour.get(hour, 0)) for hour in hours]
    latencies = _latency_percentiles(since)
    dead_letters = capped_count(
        InboxEvent.objects.filter(processing_status=ProcessingStatus.DEAD_LETTERED)
    )
    status_rows = [
        {
            "status": status.value,
            "count": by_status.get(status.value, 0),
            "percent": round(100 * by_status.get(status.value, 0) / events, 1)
            if events
            else 0,
        }
        for status in ProcessingStatus
    ]
    return {
        "since": since,
        "now": now,
        "events": events,
        "deliveries": deliveries,
        "by_status": status_rows,
        "duplicate_ratio": duplicates / deliveries if deliveries else 0.0,
        "invalid_signature_ratio": signature_failures / attempts if attempts else 0.0,
        "signature_failures": signature_failures,
        **latencies,
        "dead_letters_24h": by_status.get(ProcessingStatus.DEAD_LETTERED.value, 0),
        "dead_letters": min(dead_letters, COUNT_CAP),
        "dead_letters_capped": dead_letters > COUNT_CAP,
        "stuck_keys": stuck_idempotency_keys(now=now),
        "paused_sources": paused_sources(now=now),
        "recent_actions": recent_operator_actions(),
        "per_hour": [{"hour": hour, "count": n} for hour, n in series],
    }
