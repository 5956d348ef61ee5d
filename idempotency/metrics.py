from enum import StrEnum

from core.metrics import Counter, GaugeMetricFamily


class RequestOutcome(StrEnum):
    """What an idempotent request came to: the ``outcome`` label of
    ``idempotency_requests_total`` and of the ``idempotency.executed`` log line."""

    NEW = "new"  # the key's first request: the operation ran
    EXPIRED = "expired"  # the key's record was past its TTL: the operation ran again
    REPLAYED = "replayed"  # the stored answer, again
    CONFLICT = "conflict"  # the key with another fingerprint: 409


IDEMPOTENCY_REQUESTS = Counter(
    "idempotency_requests_total",
    "Idempotent API requests by operation type and outcome.",
    ["operation", "outcome"],  # outcome: a RequestOutcome
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
