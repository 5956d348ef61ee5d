import os
import socket

from celery import shared_task

from core.tracing import task_process_span, tracing_enabled

from .services.attempts import job_run
from .services.jobs import RUN_JOB_TASK
from .targets import TEST_TASK, deploy_target_test_run


@shared_task(name=RUN_JOB_TASK, bind=True)
def job_run_task(self, kind: str, public_id: str) -> str:
    """Runs a deployment's or build's executor at most once, however often it is delivered."""
    worker = f"worker:{socket.gethostname()}/{os.getpid()}/{self.request.id}"
    if tracing_enabled():
        with task_process_span(self, rows=1) as processed:
            processed.set_attribute("deployments.job_id", public_id)
            outcome = job_run(kind=kind, public_id=public_id, worker=worker)
            processed.set_attribute("deployments.outcome", outcome)
            return outcome
    return job_run(kind=kind, public_id=public_id, worker=worker)


@shared_task(name=TEST_TASK, bind=True)
def deploy_target_test_task(self, test_id: int) -> str:
    """Sends a deploy target's test once ("Send test trigger", published after the admin's
    request committed)."""
    worker = f"worker:{socket.gethostname()}/{os.getpid()}/{self.request.id}"
    return deploy_target_test_run(test_id=test_id, worker=worker)
