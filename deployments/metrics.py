"""The job worker's metrics (docs/architecture.md, "Metrics"), incremented in the worker
process that makes the attempt."""

from core.metrics import Counter, Histogram

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
