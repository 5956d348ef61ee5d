"""Reads of the audit console. Every query here is bounded: the dashboard reads the inbox's
figures counted by the hour (``audit.figures``) and, live, only the events received since the
count stopped, through the ``received_at`` index (the jobs' through their (status,
created_at) indexes, the trigger attempts' through their primary key, the signature failures'
through their window's); counts that could grow without limit are capped."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Sum
from django.db.models.functions import Left
from django.utils import timezone

from core.models import Constant
from core.selectors import COUNT_CAP, capped_count
from deployments.models import Build, Deployment, JobStatus, TriggerAttempt
from idempotency.selectors import idempotency_records_stuck
from trail.models import OperatorAction
from webhooks.models import InboxEvent, ProcessingStatus, SignatureFailure
from webhooks.partitions import days_past_retention
from webhooks.selectors import webhook_source_held_count, webhook_sources_paused

from .figures import (
    HOUR,
    WINDOW_HOURS,
    inbox_figures_window,
    latency_percentiles,
    window_start,
)
from .models import LatencyFigure

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
    """The index page's figures over the hour now and the 23 before it (from ``since``, the
    start of an hour, to ``now``): the inbox's from its figures counted by the hour and the
    events received since read live (``audit.figures.inbox_figures_window``; ``counted_to``
    and ``counted_at`` say what was counted when), the rest read live."""
    now = now or timezone.now()
    since = window_start(now)
    inbox = inbox_figures_window(since=since, now=now)
    events, deliveries = inbox.events, inbox.deliveries
    signature_failures = (
        SignatureFailure.objects.filter(window_start__gte=since).aggregate(
            n=Sum("count")
        )["n"]
        or 0
    )
    attempts = deliveries + signature_failures
    hours = [since + i * HOUR for i in range(WINDOW_HOURS)]
    p50, p95 = latency_percentiles(inbox.latency.get(LatencyFigure.PROCESSING, {}))
    held = inbox.latency.get(LatencyFigure.HELD, {})
    h50, h95 = latency_percentiles(held)
    d50, d95 = latency_percentiles(inbox.latency.get(LatencyFigure.PRODUCER_DELAY, {}))
    # The status written into the statement: prepared on the console (``Constant``).
    dead_letters = capped_count(
        InboxEvent.objects.filter(
            processing_status=Constant(ProcessingStatus.DEAD_LETTERED)
        )
    )
    by_status = inbox.by_status
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
        "counted_to": inbox.counted_to,
        "counted_at": inbox.counted_at,
        "events": events,
        "deliveries": deliveries,
        "by_status": status_rows,
        "duplicate_ratio": (deliveries - events) / deliveries if deliveries else 0.0,
        "invalid_signature_ratio": signature_failures / attempts if attempts else 0.0,
        "signature_failures": signature_failures,
        "processing_p50": p50,
        "processing_p95": p95,
        "held_events": int(sum(row[0] for row in held.values())),
        "held_p50": h50,
        "held_p95": h95,
        "producer_delay_p50": d50,
        "producer_delay_p95": d95,
        "dead_letters_24h": by_status.get(ProcessingStatus.DEAD_LETTERED.value, 0),
        "dead_letters": min(dead_letters, COUNT_CAP),
        "dead_letters_capped": dead_letters > COUNT_CAP,
        "stuck_keys": stuck_idempotency_keys(now=now),
        # The inbox's days kept past retention, from the catalog (a link to their page).
        "days_past_retention": days_past_retention(now=now),
        "paused_sources": paused_sources(now=now),
        "recent_actions": recent_operator_actions(),
        "per_hour": [
            {"hour": hour, "count": inbox.per_hour.get(hour, 0)} for hour in hours
        ],
        "jobs": job_figures(since=since),
        "triggers": trigger_outcomes(since=since),
    }
