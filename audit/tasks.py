from celery import shared_task

from .checkpoints import checkpoint_round
from .services import inbox_rows_seal


@shared_task(name="audit.seal_inbox")
def seal_inbox_task() -> int:
    """Beat (every AUDIT_SEAL_INTERVAL_SECONDS): seals inbox rows into the hash chain, then
    signs a checkpoint of the verifiable log if it grew and keeps its copies outside the
    database (``audit.checkpoints.checkpoint_round``)."""
    sealed = len(inbox_rows_seal())
    checkpoint_round()
    return sealed
