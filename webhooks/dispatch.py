"""The names of the inbox's tasks, and the publish of a bulk replay job's next task: messages
are published by task name, so that the services that decide what to publish never import the
tasks that run it.

Processing messages are published by the outbox relay only (``webhooks.outbox``,
``core.relay``): the inbox row is the outbox, and nothing on the request path talks to the
broker."""

from __future__ import annotations

import logging
from datetime import datetime

from celery import current_app

logger = logging.getLogger(__name__)

# One message carries up to INBOX_BATCH_SIZE inbox row ids.
PROCESS_TASK = "webhooks.process_inbox_events"
BULK_REPLAY_TASK = "webhooks.bulk_replay_job_run"


def bulk_replay_job_publish(
    *, job_id: int, run: int, step: int, eta: datetime | None = None
) -> bool:
    """Publishes task ``step`` of a bulk replay job's run, to run at ``eta`` (the next slice
    of a job at a rate) or at once; ``False`` if it was not published. Never raises: a job
    whose next task was never published stops renewing its lease and becomes resumable
    (``webhooks.bulk_replay.bulk_replay_job_resume``)."""
    try:
        current_app.send_task(BULK_REPLAY_TASK, args=[job_id, run, step], eta=eta)
    except Exception as exc:  # the broker is down: the job is resumed by an operator
        logger.warning(
            "bulk_replay.publish_failed",
            extra={"bulk_job_id": job_id, "run": run, "error": type(exc).__name__},
        )
        return False
    return True
