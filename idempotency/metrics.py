from core.metrics import Counter, GaugeMetricFamily

IDEMPOTENCY_REQUESTS = Counter(
    "idempotency_requests_total",
    "Idempotent API requests by operation type and outcome.",
    ["operation", "outcome"],  # outcome: new | replayed | conflict | expired
)


class StuckKeysCollector:
    """``idempotency_stuck_processing``, read from the database at scrape time: right
    whatever process answers."""

    def collect(self):
        from .selectors import idempotency_records_stuck

        stuck = GaugeMetricFamily(
            "idempotency_stuck_processing",
            "Idempotency records still 'processing' past their operation's deadline.",
        )
        stuck.add_metric([], idempotency_records_stuck().count())
        yield stuck
