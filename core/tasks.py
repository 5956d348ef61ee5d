import logging
import socket

from celery import shared_task

from .models import WorkerHeartbeat

logger = logging.getLogger(__name__)


@shared_task(name="core.heartbeat")
def heartbeat_task(token: str) -> None:
    WorkerHeartbeat.objects.get_or_create(
        token=token, defaults={"hostname": socket.gethostname()}
    )
    logger.info("worker.heartbeat", extra={"token": token})


@shared_task(name="core.periodic_sweep")
def periodic_sweep_task() -> dict:
    """The outbox sweep (beat, every INBOX_SWEEP_INTERVAL_SECONDS): re-dispatches inbox rows and
    deployment jobs whose message may have been lost. Each part claims its rows with
    ``SELECT ... FOR UPDATE SKIP LOCKED``, so overlapping sweeps never double-dispatch."""
    from deployments.sweep import deployment_jobs_sweep
    from webhooks.sweep import inbox_sweep

    counts = {"inbox": inbox_sweep(), "deployments": deployment_jobs_sweep()}
    if any(counts.values()):
        logger.info("sweep.redispatched", extra=counts)
    return counts
