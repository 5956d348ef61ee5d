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
