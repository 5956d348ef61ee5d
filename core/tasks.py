import socket

from celery import shared_task

from .models import WorkerHeartbeat


@shared_task(name="core.heartbeat")
def heartbeat_task(token: str) -> None:
    WorkerHeartbeat.objects.get_or_create(
        token=token, defaults={"hostname": socket.gethostname()}
    )
