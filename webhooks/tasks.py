import functools
import os
import socket

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from core.tracing import task_process_span, tracing_enabled

from .bulk_replay import bulk_replay_job_run
from .dispatch import BULK_REPLAY_TASK, PROCESS_TASK
from .ledger import inbox_keys_purge
from .partitions import inbox_partitions_ensure, inbox_partitions_retire
from .processing import inbox_events_process

# The database went away mid-batch: try again soon. Rows the batch had claimed but not run
# keep their lease; the relay's sweep publishes them again once it expires. A set that had
# not committed left nothing: its rows are as they were before it.
_DATABASE_RETRY = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": True,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 5,
}


def _worker_name(task) -> str:
    return task.request.hostname or f"{socket.gethostname()}:{os.getpid()}"


def _first_delivery(task) -> bool:
    """Whether this is the message's first run: not delivered again by the broker (its
    worker was lost, or it was never acknowledged) nor a retry of the task. A message run
    again takes its rows with claims committed first, so that a row whose run kills its
    worker is counted and, after INBOX_MAX_ATTEMPTS, dead-lettered
    (docs/subsystems/processing.md, "A set in one transaction")."""
    request = task.request
    delivered_again = (request.delivery_info or {}).get("redelivered")
    return not delivered_again and not request.retries


@shared_task(bind=True, name=PROCESS_TASK, **_DATABASE_RETRY)
def process_inbox_events_task(
    self, inbox_event_ids: list[int], again: bool = False
) -> list[str]:
    """Processes a batch of inbox rows: a set of an integration's rows in one transaction, the
    others each in its own (``inbox_events_process``). Idempotent: a second or concurrent
    run never applies an event twice. A transient failure leaves the row ``failed`` with its
    retry time; the relay publishes it again when that comes.

    ``again`` (a message of the relay's sweep: the rows' first message may have been lost
    with a worker that died running them) claims the rows before it runs them, as a message
    the broker delivered again does."""
    processed = functools.partial(
        inbox_events_process,
        ids=inbox_event_ids,
        worker=_worker_name(self),
        sets=not again and _first_delivery(self),
    )
    if tracing_enabled():
        with task_process_span(self, rows=len(inbox_event_ids)):
            outcomes = processed()
    else:
        outcomes = processed()
    return [outcome.skipped or outcome.status for outcome in outcomes]


@shared_task(name=BULK_REPLAY_TASK)
def bulk_replay_job_run_task(bulk_replay_job_id: int, run: int, step: int) -> int:
    """One slice of a bulk replay job's run: chunks for at most BULK_REPLAY_SLICE_SECONDS
    (with a rate: one slice of its schedule), then the next slice is published. A job of any
    size stays far from the task time limits; a message of an earlier run (the job was
    resumed since), of a cancelled job, or delivered a second time (its ``step`` ran already)
    does nothing."""
    job = bulk_replay_job_run(
        job_id=bulk_replay_job_id,
        run=run,
        step=step,
        seconds=settings.BULK_REPLAY_SLICE_SECONDS,
        publish_next=True,
    )
    return job.processed if job is not None else 0


@shared_task(name="webhooks.inbox_partitions")
def inbox_partitions_task() -> dict:
    """Beat, hourly: on PostgreSQL, the inbox's and its attempts' partitions
    INBOX_PARTITIONS_AHEAD_DAYS ahead of today, then retention: the days past
    INBOX_RETENTION_DAYS dropped, unless something holds them. Then, on any database, the
    deduplication ledger's keys past INBOX_DEDUP_DAYS whose rows have left. Idempotent; a
    run that cannot take a lock soon gives up and the next one tries again."""
    created = inbox_partitions_ensure()
    retired = inbox_partitions_retire()
    purged = inbox_keys_purge()
    return {
        "created": created,
        "dropped": retired.dropped,
        "held": retired.held,
        "keys_purged": purged.deleted,
    }
