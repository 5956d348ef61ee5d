import logging
import os
import socket
from datetime import datetime

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from .processing import inbox_event_process

logger = logging.getLogger(__name__)


def process_inbox_event_publish(
    *, inbox_event_id: int, eta: datetime | None = None
) -> bool:
    """Publishes one processing message; ``False`` if the broker refused it. Never raises: the
    inbox row is the outbox, and the sweep publishes what could not be published here."""
    options = {}
    if eta is not None:
        # A message held for longer than the broker's visibility timeout would be redelivered
        # while it waits; such retries are left to the sweep, which reads next_attempt_at.
        if (eta - timezone.now()).total_seconds() > (
            settings.CELERY_BROKER_VISIBILITY_TIMEOUT / 2
        ):
            return False
        options["eta"] = eta
    try:
        process_inbox_event_task.apply_async((inbox_event_id,), **options)
    except Exception as exc:  # the broker is down: the sweep will publish it
        logger.warning(
            "inbox.publish_failed",
            extra={"inbox_event_id": inbox_event_id, "error": type(exc).__name__},
        )
        return False
    return True


@shared_task(
    bind=True,
    name="webhooks.process_inbox_event",
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
        process_inbox_event_publish(inbox_event_id=inbox_event_id, eta=outcome.retry_at)
    return outcome.skipped or outcome.status
