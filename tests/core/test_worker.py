"""A real Celery worker process, the real Redis broker and the real PostgreSQL."""

import time
import uuid

import pytest

from config.celery_app import app
from core.models import WorkerHeartbeat
from core.tasks import heartbeat_task
from tests import processes

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_task_round_trip_through_a_real_worker_writes_to_postgresql(
    tmp_path, broker_url
):
    """On each broker the product runs on: Redis and RabbitMQ."""
    worker = processes.celery_worker(
        tmp_path, env={"CELERY_BROKER_URL": broker_url}
    ).start()
    try:
        token = uuid.uuid4().hex
        with app.connection_for_write(broker_url) as connection:
            heartbeat_task.apply_async((token,), connection=connection)
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


def test_a_worker_recovers_when_its_database_connection_is_cut(tmp_path):
    """PostgreSQL restarted, a failover, a proxy dropping idle connections: the worker's kept
    connection dies. One task may fail on it; the next ones must get a new connection."""
    from django.db import connection

    processes.purge_broker()
    worker = processes.celery_worker(tmp_path).start()
    try:
        first = uuid.uuid4().hex
        heartbeat_task.delay(first)
        processes.wait_until(
            lambda: WorkerHeartbeat.objects.filter(token=first).exists(), timeout=60
        )
        with (
            connection.cursor() as cursor
        ):  # cut every other session to the test database
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        tokens = [uuid.uuid4().hex for _ in range(3)]
        for token in tokens:
            heartbeat_task.delay(token)
            time.sleep(1)
        processes.wait_until(
            lambda: WorkerHeartbeat.objects.filter(token__in=tokens[1:]).count() == 2,
            timeout=60,
            what="the tasks after the first to succeed on a new connection",
        )
    finally:
        worker.stop()
