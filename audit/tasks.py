from celery import shared_task

from .services import inbox_rows_seal


@shared_task(name="audit.seal_inbox")
def seal_inbox_task() -> int:
    """Beat (every AUDIT_SEAL_INTERVAL_SECONDS): seals inbox rows into the hash chain."""
    return len(inbox_rows_seal())
