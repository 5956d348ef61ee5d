"""The inbox's metrics (docs/operations.md, "Metrics")."""

from core.metrics import Counter, GaugeMetricFamily, Histogram

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


class QueueLagCollector:
    """``webhook_queue_lag_seconds``, read from the database at scrape time: right whatever
    process answers."""

    def collect(self):
        from django.db.models import Min
        from django.utils import timezone

        from .models import InboxEvent, ProcessingStatus

        now = timezone.now()
        oldest = InboxEvent.objects.filter(
            processing_status__in=[
                ProcessingStatus.RECEIVED,
                ProcessingStatus.PROCESSING,
                ProcessingStatus.FAILED,
            ]
        ).aggregate(oldest=Min("received_at"))["oldest"]
        lag = GaugeMetricFamily(
            "webhook_queue_lag_seconds",
            "Age of the oldest inbox event not yet in a terminal status (0 when none).",
        )
        lag.add_metric([], (now - oldest).total_seconds() if oldest else 0.0)
        yield lag


class InboxPartitionsCollector:
    """``webhook_inbox_partitions_ahead_days{table}``: how many days after now the inbox's
    and its attempts' time partitions reach (docs/scaling.md, "Time partitions of the
    inbox"), read from the catalog at scrape time. A delivery whose day has no partition is
    refused: the alert ``InboxPartitionsRunningOut`` fires below 2 days. And
    ``webhook_inbox_retention_overdue_days``: how far past its retention the oldest day is
    kept (held back, or retention not running; the alert ``InboxRetentionOverdue``), and
    ``webhook_inbox_retention_held_days{reason}``: how many days past retention each hold
    reason keeps (docs/scaling.md, "Retention by dropping a partition"; a few index probes
    per such day, and there are none unless something holds one). No series when the
    tables are not partitioned (SQLite)."""

    def collect(self):
        from .partitions import (
            INBOX,
            TABLES,
            is_partitioned,
            oldest_partition_overdue_days,
            partitions_ahead_days,
            retention_held_days,
        )

        ahead = GaugeMetricFamily(
            "webhook_inbox_partitions_ahead_days",
            "Days after now that the table's time partitions reach.",
            labels=["table"],
        )
        overdue = GaugeMetricFamily(
            "webhook_inbox_retention_overdue_days",
            "Days past INBOX_RETENTION_DAYS that the oldest inbox partition has been "
            "kept (0 when none is, or retention is unset).",
        )
        for table in TABLES:
            if is_partitioned(table):
                ahead.add_metric([table.table], partitions_ahead_days(table))
        yield ahead
        if is_partitioned(INBOX):
            overdue.add_metric([], oldest_partition_overdue_days())
            yield overdue
            held = GaugeMetricFamily(
                "webhook_inbox_retention_held_days",
                "Days of the inbox past INBOX_RETENTION_DAYS that the reason holds back "
                "(a day two reasons hold counts under both).",
                labels=["reason"],
            )
            for reason, days in retention_held_days().items():
                held.add_metric([reason], days)
            yield held


class InboxKeysCollector:
    """``webhook_inbox_keys_overdue_days``: how far past the purge's cutoff
    (INBOX_DEDUP_DAYS, or the oldest inbox row's time when that is earlier) the
    deduplication ledger's oldest key is kept, read at scrape time through the ledger's
    primary key (docs/subsystems/inbox.md, "The deduplication ledger"). A purge that does
    not run shows here (the alert ``InboxKeysPurgeOverdue``). On SQLite too: the ledger is
    there."""

    def collect(self):
        from .ledger import oldest_key_overdue_days

        overdue = GaugeMetricFamily(
            "webhook_inbox_keys_overdue_days",
            "Days past the deduplication horizon that the oldest key of the ledger has "
            "been kept (0 when none is).",
        )
        overdue.add_metric([], oldest_key_overdue_days())
        yield overdue


class PausedSourcesCollector:
    """``webhook_source_paused_seconds{source}`` and ``webhook_source_held_events{source}``,
    read from the database at scrape time, one series per enabled source and one statement
    per family (docs/subsystems/relay.md, "Pausing a source")."""

    def collect(self):
        from core.selectors import COUNT_CAP

        from .selectors import webhook_source_pause_gauges

        paused, held = webhook_source_pause_gauges()
        seconds = GaugeMetricFamily(
            "webhook_source_paused_seconds",
            "Seconds since the source was paused (0 when it is not).",
            labels=["source"],
        )
        for slug, value in paused:
            seconds.add_metric([slug], value)
        yield seconds
        events = GaugeMetricFamily(
            "webhook_source_held_events",
            "Events of a paused source waiting unprocessed (0 when it is not paused), "
            f"counted up to {COUNT_CAP + 1}.",
            labels=["source"],
        )
        for slug, count in held:
            events.add_metric([slug], count)
        yield events


class SourceDeliveryCollector:
    """``webhook_source_last_delivery_timestamp_seconds{source}`` (enabled sources with at
    least one stored delivery) and ``webhook_source_expected_delivery_interval_seconds{source}``
    (enabled sources that set one), read at scrape time: the "no delivery" alert compares
    them (docs/runbook.md, WebhookSourceSilent)."""

    def collect(self):
        from .selectors import webhook_source_delivery_states

        last = GaugeMetricFamily(
            "webhook_source_last_delivery_timestamp_seconds",
            "Unix time of the latest new event stored for the source.",
            labels=["source"],
        )
        expected = GaugeMetricFamily(
            "webhook_source_expected_delivery_interval_seconds",
            "The longest time the source normally goes without a new event.",
            labels=["source"],
        )
        for state in webhook_source_delivery_states():
            if state.last_delivery_at is not None:
                last.add_metric([state.slug], state.last_delivery_at.timestamp())
            if state.expected_delivery_interval_seconds is not None:
                expected.add_metric(
                    [state.slug], state.expected_delivery_interval_seconds
                )
        yield last
        yield expected
