from celery import shared_task

from .checkpoints import checkpoint_round
from .figures import inbox_figures_count
from .sealer import ledger_rows_seal


@shared_task(name="audit.seal_inbox")
def seal_inbox_task() -> int:
    """Beat (every AUDIT_SEAL_INTERVAL_SECONDS): appends every ledger row that is due to the
    verifiable log (``audit.sealer.ledger_rows_seal``), then signs a checkpoint of the log if
    it grew and keeps its copies outside the database (``audit.checkpoints.checkpoint_round``).
    Returns how many entries the round appended."""
    appended = ledger_rows_seal().leaves
    checkpoint_round()
    return appended


@shared_task(name="audit.inbox_figures")
def inbox_figures_task() -> dict:
    """Beat (every DASHBOARD_FIGURES_INTERVAL_SECONDS): counts the inbox's figures of the
    last 25 hours by the hour, for the dashboard (``audit.figures.inbox_figures_count``).
    Idempotent; two runs at once take turns."""
    counted = inbox_figures_count()
    return {
        "counted_to": counted.counted_to.isoformat() if counted.counted_to else None,
        "seconds": counted.seconds,
    }
