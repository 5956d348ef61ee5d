from celery import shared_task

from .services import bulk_replay_job_run, inbox_rows_seal


@shared_task(name="audit.seal_inbox")
def seal_inbox_task() -> int:
    """Beat (every AUDIT_SEAL_INTERVAL_SECONDS): seals inbox rows into the hash chain."""
    return len(inbox_rows_seal())


@shared_task(name="audit.bulk_replay_job_run")
def bulk_replay_job_run_task(bulk_replay_job_id: int) -> int:
    return bulk_replay_job_run(job_id=bulk_replay_job_id).processed
