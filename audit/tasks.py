from celery import shared_task

from .checkpoints import checkpoint_round
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
