"""The one place that hands inbox work to the workers: messages are published by task name,
so that the services that decide what to publish never import the tasks that run it.

Every publish is best effort. The inbox row is the outbox: a message that could not be
published (the broker is down) is published again by the sweep, which reads the rows."""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime

from celery import current_app
from django.conf import settings
from django.utils import timezone

from core.logging import correlation_id_bound

logger = logging.getLogger(__name__)

PROCESS_TASK = "webhooks.process_inbox_event"
BULK_REPLAY_TASK = "webhooks.bulk_replay_job_run"


def inbox_event_publish(
    *, inbox_event_id: int, event_id: str = "", eta: datetime | None = None
) -> bool:
    """Publishes one processing message for the row; ``False`` if it was not published. Never
    raises. The event id travels as the message's correlation id.

    A retry due later than half the broker's visibility timeout is not published with an
    ``eta`` (the broker would redeliver it while it waits): the sweep publishes it when due."""
    options = {}
    if eta is not None:
        delay = (eta - timezone.now()).total_seconds()
        if delay > settings.CELERY_BROKER_VISIBILITY_TIMEOUT / 2:
            return False
        options["eta"] = eta
    try:
        bound = correlation_id_bound(event_id) if event_id else contextlib.nullcontext()
        with bound:
            current_app.send_task(PROCESS_TASK, args=[inbox_event_id], **options)
    except Exception as exc:  # the broker is down: the sweep publishes it later
        logger.warning(
            "inbox.publish_failed",
            extra={
                "inbox_event_id": inbox_event_id,
                "event_id": event_id,
                "error": type(exc).__name__,
            },
        )
        return False
    return True


def bulk_replay_job_publish(*, job_id: int, run: int) -> bool:
    """Publishes the next task of a bulk replay job's run; ``False`` if it was not published.
    Never raises: a job whose next task was never published stops renewing its lease and
    becomes resumable (``webhooks.replay.bulk_replay_job_resume``)."""
    try:
        current_app.send_task(BULK_REPLAY_TASK, args=[job_id, run])
    except Exception as exc:  # the broker is down: the job is resumed by an operator
        logger.warning(
            "bulk_replay.publish_failed",
            extra={"bulk_job_id": job_id, "run": run, "error": type(exc).__name__},
        )
        return False
    return True
