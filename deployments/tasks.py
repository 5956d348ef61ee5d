import os
import socket

from celery import shared_task

from .services import idempotency_records_cleanup, job_run


@shared_task(name="deployments.run_job", bind=True)
def job_run_task(self, kind: str, public_id: str) -> str:
    """Runs a deployment's or build's executor at most once, however often it is delivered."""
    worker = f"worker:{socket.gethostname()}/{os.getpid()}/{self.request.id}"
    return job_run(kind=kind, public_id=public_id, worker=worker)


@shared_task(name="deployments.idempotency_cleanup")
def idempotency_cleanup_task() -> dict:
    return idempotency_records_cleanup()
