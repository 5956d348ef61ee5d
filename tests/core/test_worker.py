"""A real Celery worker process, the real Redis broker and the real PostgreSQL."""

import uuid

import pytest

from core.models import WorkerHeartbeat
from core.tasks import heartbeat_task
from tests import processes

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_task_round_trip_through_a_real_worker_writes_to_postgresql(tmp_path):
    processes.purge_broker()
    worker = processes.celery_worker(tmp_path).start()
    try:
        token = uuid.uuid4().hex
        heartbeat_task.delay(token)
        beat = processes.wait_until(
            lambda: WorkerHeartbeat.objects.filter(token=token).first(),
            timeout=60,
            what="the worker to write the heartbeat",
        )
    finally:
        worker.stop()
    assert beat.hostname
    assert WorkerHeartbeat.objects.filter(token=token).count() == 1
    assert "ready." in worker.log()
