"""Reads of the audit console. Every query here is bounded: the dashboard reads only the last
24 h through the ``received_at`` index (the jobs' through their (status, created_at) indexes,
the trigger attempts' through their primary key), and counts that could grow without limit
are capped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, F, Sum
from django.db.models.functions import Left, TruncHour
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.selectors import COUNT_CAP, capped_count
from deployments.models import Build, Deployment, JobStatus, TriggerAttempt
from idempotency.selectors import idempotency_records_stuck
from trail.models import OperatorAction
from webhooks.models import InboxEvent, ProcessingStatus, SignatureFailure
from webhooks.partitions import days_past_retention
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


def _latency_percentiles(since: datetime, now: datetime) -> dict[str, Any]:
    """p50 and p95, in seconds, of the events received since ``since``: ``processing`` from
    received to processed, the time a pause of the event's source held it left out (the
    product's own latency: an operator asked for that wait), the held time apart
    (``held_p50``, ``held_p95``, over the ``held_events`` a pause held), and apart
    ``producer_delay`` from occurred (the producer's clock) to received (a backfill reads
    months here)."""
    windows = pause_windows(since=since, now=now)
    table = InboxEvent._meta.db_table
    if connection.vendor == "postgresql":
        sources, starts, ends = (
            (list(column) for column in zip(*windows, strict=True))
            if windows
            else ([], [], [])
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                WITH pauses AS (
                    SELECT * FROM unnest(%s::bigint[], %s::timestamptz[],
                                         %s::timestamptz[]) AS p(source_id, paused, resumed)
                ), latencies AS (
                    SELECT EXTRACT(EPOCH FROM (e.processed_at - e.received_at)) AS total,
                           CASE WHEN e.processed_at IS NULL THEN NULL
                                WHEN NOT e.source_id = ANY(%s::bigint[])
                                     OR e.processed_at <= %s OR e.received_at >= %s
                                THEN 0
                                ELSE COALESCE((
                               SELECT sum(GREATEST(EXTRACT(EPOCH FROM (
                                   LEAST(e.processed_at, p.resumed)
                                   - GREATEST(e.received_at, p.paused))), 0))
                               FROM pauses p WHERE p.source_id = e.source_id), 0)
                           END AS held,
                           EXTRACT(EPOCH FROM (e.received_at - e.occurred_at)) AS delay
                    FROM {table} e
                    WHERE e.received_at >= %s
                )
                SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY total - held),
                       percentile_cont(0.95) WITHIN GROUP (ORDER BY total - held),
                       percentile_cont(0.5) WITHIN GROUP (ORDER BY delay),
                       percentile_cont(0.95) WITHIN GROUP (ORDER BY delay),
                       count(*) FILTER (WHERE held > 0),
                       percentile_cont(0.5) WITHIN GROUP (ORDER BY held)
                           FILTER (WHERE held > 0),
                       percentile_cont(0.95) WITHIN GROUP (ORDER BY held)
                           FILTER (WHERE held > 0)
                FROM latencies
                """,  # noqa: S608 - the table name is the model's, not input
                # The pauses are read for the events of a source that had one, within
                # the pauses' span, only.
                [
                    sources,
                    starts,
                    ends,
                    sorted(set(sources)),
                    min(starts, default=since),
                    max(ends, default=since),
                    since,
                ],
            )
            row = cursor.fetchone()
        held_events = int(row[4] or 0)
        p50, p95, d50, d95, _, h50, h95 = (None if v is None else float(v) for v in row)
    else:
        # Read as the stored text and parsed here, each instant alone: one that Python cannot
        # hold (a producer's year 0, stored as given) leaves its delay out instead of failing
        # the page.
        with connection.cursor() as cursor:
            columns = ", ".join(
                f"CAST({name} AS TEXT)"
                for name in ("received_at", "processed_at", "occurred_at")
            )
            cursor.execute(
                f"SELECT source_id, {columns} FROM {table} WHERE received_at >= %s",  # noqa: S608 - the model's names, values are parameters
                [connection.ops.adapt_datetimefield_value(since)],
            )
            rows = cursor.fetchall()
        processing, delay, held_times = [], [], []
        for source_id, *instants in rows:
            received, processed, occurred = map(_instant, instants)
            if received is None:
                continue
            if processed is not None:
                held = _held_seconds(
                    windows, source_id=source_id, start=received, end=processed
                )
                processing.append((processed - received).total_seconds() - held)
                if held > 0:
                    held_times.append(held)
            if occurred is not None:
                delay.append((received - occurred).total_seconds())
        (p50, p95), (d50, d95) = _percentiles(processing), _percentiles(delay)
        (h50, h95), held_events = _percentiles(held_times), len(held_times)
    return {
        "processing_p50": p50,
        "processing_p95": p95,
        "held_events": held_events,
        "held_p50": h50,
        "held_p95": h95,
        "producer_delay_p50": d50,
        "producer_delay_p95": d95,
    }


# The jobs' statuses, in the order the dashboard lists them.
JOB_STATUSES = (
    JobStatus.FAILED,
    JobStatus.RUNNING,
    JobStatus.QUEUED,
    JobStatus.SUCCEEDED,
)
RECENT_FAILURES = 5


def job_figures(*, since: datetime) -> dict[str, Any]:
    """The deployments and builds created since ``since``, by status (each a capped count,
    read through the (status, created_at) index of its kind), and the latest that failed,
    with the first words of why."""
    kinds = {"deployment": Deployment, "build": Build}
    rows = []
    for status in JOB_STATUSES:
        row: dict[str, Any] = {"status": status.value}
        for kind, model in kinds.items():
            n = capped_count(model.objects.filter(status=status, created_at__gte=since))
            row[kind] = min(n, COUNT_CAP)
            row[f"{kind}_capped"] = n > COUNT_CAP
        rows.append(row)
    failures = []
    for kind, model in kinds.items():
        for job in (
            model.objects.filter(status=JobStatus.FAILED, created_at__gte=since)
            .order_by("-created_at")
            .annotate(detail_head=Left("detail", 120))
            .only("pk", "public_id", "repository", "created_at", "status_changed_at")[
                :RECENT_FAILURES
            ]
        ):
            failures.append(
                {
                    "kind": kind,
                    "pk": job.pk,
                    "public_id": job.public_id,
                    "repository": job.repository,
                    "at": job.status_changed_at,
                    "why": job.detail_head,
                }
            )
    failures.sort(key=lambda failure: failure["at"], reverse=True)
    return {"by_status": rows, "failures": failures[:RECENT_FAILURES]}


TRIGGER_FAILURES = (
    TriggerAttempt.Outcome.TRANSIENT,
    TriggerAttempt.Outcome.AMBIGUOUS,
    TriggerAttempt.Outcome.REJECTED,
    TriggerAttempt.Outcome.LOST,
)
_ATTEMPTS_READ = 500


def trigger_outcomes(*, since: datetime, cap: int = COUNT_CAP) -> dict[str, Any]:
    """The trigger attempts started since ``since``, counted by outcome (up to ``cap``).
    Attempts are appended as they start, so their ids follow their start: read newest
    first through the primary key, a page at a time, up to the first that started before
    ``since`` (no index on ``started_at`` needed, and never more than the window's rows and
    one page)."""
    counts: dict[str, int] = {}
    seen, before = 0, None
    capped = False
    while True:
        page = TriggerAttempt.objects.order_by("-id")
        if before is not None:
            page = page.filter(id__lt=before)
        rows = list(page.values_list("id", "outcome", "started_at")[:_ATTEMPTS_READ])
        done = len(rows) < _ATTEMPTS_READ
        for _pk, outcome, started in rows:
            if started < since:
                done = True
                break
            counts[outcome] = counts.get(outcome, 0) + 1
            seen += 1
            if seen > cap:
                capped = done = True
                break
        if done or not rows:
            break
        before = rows[-1][0]
    failed = sum(counts.get(outcome, 0) for outcome in TRIGGER_FAILURES)
    return {
        "attempts": seen,
        "capped": capped,
        "failed": failed,
        "by_outcome": [
            {"outcome": outcome.value, "count": counts.get(outcome.value, 0)}
            for outcome in TriggerAttempt.Outcome
            if counts.get(outcome.value)
        ],
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
    latencies = _latency_percentiles(since, now)
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
        # The inbox's days kept past retention, from the catalog (a link to their page).
        "days_past_retention": days_past_retention(now=now),
        "paused_sources": paused_sources(now=now),
        "recent_actions": recent_operator_actions(),
        "per_hour": [{"hour": hour, "count": n} for hour, n in series],
        "jobs": job_figures(since=since),
        "triggers": trigger_outcomes(since=since),
    }
