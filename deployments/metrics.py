"""The job worker's metrics (docs/operations.md, "Metrics"), incremented in the worker
process that makes the attempt."""

from core.metrics import Counter, GaugeMetricFamily, Histogram

# The outcomes of an attempt (``TriggerAttempt.Outcome`` but ``started``).
TRIGGER_OUTCOMES = ("delivered", "transient", "ambiguous", "rejected", "lost")
TRIGGER_EXECUTORS = ("http", "github", "github-actions")

TRIGGER_ATTEMPTS = Counter(
    "deploy_trigger_attempts_total",
    "Attempts to trigger a job downstream, by executor and outcome "
    "(delivered, transient, ambiguous, rejected, lost).",
    ["executor", "outcome"],
)
TRIGGER_DURATION = Histogram(
    "deploy_trigger_duration_seconds",
    "How long one trigger attempt took, from before the request to its outcome.",
    ["executor"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, float("inf")),
)

# Every series exists from the start, at zero (Prometheus' own advice for labelled metrics):
# a rate over a series that appears only with its first failure would miss that failure, and
# the alert rules' metrics are exported by every process before any attempt is made.
for _executor in TRIGGER_EXECUTORS:
    TRIGGER_DURATION.labels(_executor)
    for _outcome in TRIGGER_OUTCOMES:
        TRIGGER_ATTEMPTS.labels(_executor, _outcome)


class TargetBreakerCollector:
    """``deploy_target_breaker_open{target}`` (1 while an enabled target's breaker is open
    or half-open, else 0) and ``deploy_target_breaker_failures{target}`` (its attempts
    failed in a row), read from the database at scrape time, one statement
    (docs/subsystems/executors.md, "A target's breaker")."""

    def collect(self):
        from .selectors import deploy_target_breakers

        rows = deploy_target_breakers()
        open_ = GaugeMetricFamily(
            "deploy_target_breaker_open",
            "1 while the deploy target's circuit breaker holds its triggers (open or "
            "half-open), else 0.",
            labels=["target"],
        )
        failures = GaugeMetricFamily(
            "deploy_target_breaker_failures",
            "The deploy target's trigger attempts that failed in a row (unreachable, "
            "timed out, 5xx).",
            labels=["target"],
        )
        for name, is_open, failed in rows:
            open_.add_metric([name], 1.0 if is_open else 0.0)
            failures.add_metric([name], float(failed))
        yield open_
        yield failures
