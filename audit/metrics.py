"""The verifiable log's metrics (docs/operations.md, "Metrics")."""

from core.metrics import Counter

AUDIT_CHECKPOINTS = Counter(
    "audit_checkpoints_total",
    "Checkpoints of the verifiable log signed and stored (one per sealing round that grew it).",
)
AUDIT_CHECKPOINT_PUBLISH_FAILURES = Counter(
    "audit_checkpoint_publish_failures_total",
    "Checkpoints that could not be written to AUDIT_CHECKPOINT_DIR (target=file) or "
    "POSTed to AUDIT_WITNESS_URL (target=witness); retried by the next round.",
    ["target"],
)
