"""Prometheus metrics (names from the SPEC, section 6).

Counters and histograms are incremented where the thing happens (web or worker process). Gauges
that describe the database's state (queue lag, stuck idempotency keys) are computed at scrape time
from the database, so they are right however many processes run.
"""

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily

# In multiprocess mode every metric below is backed by a file in this folder: it must exist
# before they are created. Emptying it is the deployment's job, once, before processes start.
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

WEBHOOK_REQUESTS = Counter(
    "webhook_requests_total",
    "Webhook deliveries answered, by source and HTTP status.",
    ["source", "status"],
)
WEBHOOK_SIGNATURE_FAILURES = Counter(
    "webhook_signature_failures_total",
    "Webhook deliveries refused for their signature or timestamp.",
    ["source", "reason"],  # missing | malformed | mismatch | timestamp_out_of_window
)
WEBHOOK_DUPLICATES = Counter(
    "webhook_duplicates_total",
    "Deliveries of an event already in the inbox (200 duplicates).",
)
WEBHOOK_INCONSISTENT_DUPLICATES = Counter(
    "webhook_inconsistent_duplicates_total",
    "Deliveries of a known event id with different content (409s).",
)
WEBHOOK_STALE_EVENTS = Counter(
    "webhook_stale_events_total",
    "Events ignored at processing as out of order or as a duplicate version.",
)
WEBHOOK_PROCESSING_LATENCY = Histogram(
    "webhook_processing_latency_seconds",
    "From the event's occurred_at to processed. Late events are normal: buckets reach days.",
    buckets=(
        0.01,
        0.05,
        0.1,
        0.25,
        0.5,
        1,
        2.5,
        5,
        10,
        30,
        60,
        120,
        300,
        600,
        1800,
        3600,
        7200,
        21600,
        86400,
        259200,
        float("inf"),
    ),
)
DEAD_LETTERS = Counter("dead_letter_total", "Inbox events moved to dead_lettered.")
IDEMPOTENCY_REQUESTS = Counter(
    "idempotency_requests_total",
    "Idempotent API requests by operation type and outcome.",
    ["operation", "outcome"],  # outcome: new | replayed | conflict | expired
)


# --- exposition -----------------------------------------------------------------------------
# With several processes (gunicorn workers, Celery pool processes), each writes its samples to
# files in PROMETHEUS_MULTIPROC_DIR and /metrics aggregates them (prometheus_client's
# multiprocess mode). Without it, the process's own registry is served (a single process).


def _multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR")


class DatabaseStateCollector:
    """Gauges read from the database at scrape time: right whatever process answers."""

    def collect(self):
        from django.apps import apps
        from django.db.models import Min
        from django.utils import timezone

        now = timezone.now()
        inbox_event = apps.get_model("webhooks", "InboxEvent")
        oldest = inbox_event.objects.filter(
            processing_status__in=["received", "processing", "failed"]
        ).aggregate(oldest=Min("received_at"))["oldest"]
        lag = GaugeMetricFamily(
            "webhook_queue_lag_seconds",
            "Age of the oldest inbox event not yet in a terminal status (0 when none).",
        )
        lag.add_metric([], (now - oldest).total_seconds() if oldest else 0.0)
        yield lag

        stuck = GaugeMetricFamily(
            "idempotency_stuck_processing",
            "Idempotency records still 'processing' after DEPLOY_REDISPATCH_AFTER_SECONDS.",
        )
        from deployments.selectors import idempotency_records_stuck

        stuck.add_metric([], idempotency_records_stuck(now=now).count())
        yield stuck


_database_collector = DatabaseStateCollector()


def metrics_exposition() -> tuple[bytes, str]:
    registry = _exposition_registry()
    registry.register(_database_collector)
    return generate_latest(registry), CONTENT_TYPE_LATEST


def process_mark_dead(pid: int) -> None:
    """Called when a worker process exits, so that its live gauges stop counting."""
    if _multiprocess_dir():
        multiprocess.mark_process_dead(pid)


def _exposition_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    if _multiprocess_dir():
        multiprocess.MultiProcessCollector(registry)
    else:
        for collector in list(REGISTRY._collector_to_names):
            registry.register(collector)
    return registry


def celery_signals_connect() -> None:
    from celery import signals

    @signals.worker_process_shutdown.connect(weak=False)
    def _shutdown(pid=None, **kwargs):
        process_mark_dead(pid or os.getpid())

    @signals.worker_ready.connect(weak=False)
    def _serve_metrics(**kwargs):
        # Counters a worker increments (dead letters, stale events, latency) live in its own
        # processes: on a machine without a web process, the worker serves them itself.
        port = os.environ.get("CELERY_METRICS_PORT")
        if port:
            start_http_server(
                int(port),
                addr=os.environ.get("CELERY_METRICS_ADDR", "0.0.0.0"),  # noqa: S104
                registry=_exposition_registry(),
            )
