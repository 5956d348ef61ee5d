import os
import socket

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from .dispatch import BULK_REPLAY_TASK, PROCESS_TASK, inbox_event_publish
from .processing import inbox_event_process
from .replay import bulk_replay_job_run
from .sweep import inbox_sweep


@shared_task(
    bind=True,
    name=PROCESS_TASK,
    acks_late=True,
    reject_on_worker_lost=True,
    # The database went away mid-run: try again soon; the row's lease and the sweep cover the
    # case where these retries run out.
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=5,
)
def process_inbox_event_task(self, inbox_event_id: int) -> str:
    """Processes one inbox row. Idempotent: a second or concurrent run never applies twice.
    Owns the retry policy's delivery: a transient failure is published again for the row's
    ``next_attempt_at``."""
    worker = self.request.hostname or f"{socket.gethostname()}:{os.getpid()}"
    outcome = inbox_event_process(inbox_event_id=inbox_event_id, worker=worker)
    if outcome.retry_at is not None:
        inbox_event_publish(inbox_event_id=inbox_event_id, eta=outcome.retry_at)
    return outcome.skipped or outcome.status


@shared_task(name="webhooks.sweep")
def inbox_sweep_task() -> int:
    """Beat, every INBOX_SWEEP_INTERVAL_SECONDS: re-dispatches inbox rows whose message may
    have been lost (see ``sweep.inbox_sweep``)."""
    return inbox_sweep()


@shared_task(name=BULK_REPLAY_TASK)
def bulk_replay_job_run_task(bulk_replay_job_id: int, run: int = 0) -> int:
    """One slice of a bulk replay job's run: chunks for at most
    AUDIT_BULK_REPLAY_SLICE_SECONDS, then the next slice is published. A job of any size stays
    far from the task time limits; a message of an earlier run (the job was resumed since)
    does nothing. (``run`` 0: a message published before runs were counted.)"""
    job = bulk_replay_job_run(
        job_id=bulk_replay_job_id,
        run=run,
        seconds=settings.AUDIT_BULK_REPLAY_SLICE_SECONDS,
        publish_next=True,
    )
    return job.processed if job is not None else 0
