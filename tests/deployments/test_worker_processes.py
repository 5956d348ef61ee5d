"""Real Celery worker processes, the Redis broker and PostgreSQL. No beat: the relay in each
worker publishes new jobs and, from its sweep, re-publishes lost ones and fails jobs whose
lease ran out."""

from datetime import timedelta

import pytest
from django.utils import timezone

from core.relay.loop import Relay
from deployments.models import Deployment, JobTransition
from idempotency.models import IdempotencyRecord
from tests import processes
from tests.broker import broker_reset
from tests.core.factories import api_client_make, bearer_http
from tests.deployments.factories import deployment_body, idempotent_post
from tests.webhooks.factories import InboxEventFactory
from webhooks.models import TERMINAL_STATUSES, InboxEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def api_http():
    _, token = api_client_make(name="ci-proc")
    broker_reset()
    yield bearer_http(token)
    # A killed worker's unacknowledged message waits in Redis for its visibility timeout;
    # drop it so that it cannot reach a later test's worker.
    broker_reset()


def create(http, key: str) -> Deployment:
    response = idempotent_post(http, "/api/deployments/", deployment_body(), key)
    assert response.status_code == 202
    return Deployment.objects.get(public_id=response.json()["deployment_id"])


def wait_status(deployment: Deployment, status: str, *, timeout: float, what: str):
    def reached() -> bool:
        deployment.refresh_from_db()
        return deployment.status == status

    processes.wait_until(reached, timeout=timeout, what=what)


def worker_runs(deployment: Deployment) -> int:
    """Executor starts: each is preceded by its committed queued -> running claim."""
    return JobTransition.objects.filter(
        job=deployment, to_status="running", actor__startswith="worker:"
    ).count()


def a_sweep_has_run(worker: processes.Process) -> None:
    """Waits for the worker's relay to sweep once more: an inbox row whose message was lost
    long ago is published by a sweep only, and the relay sweeps every outbox in the same
    round."""
    long_ago = timezone.now() - timedelta(minutes=5)
    probe = InboxEventFactory(
        received_at=long_ago - timedelta(minutes=5), dispatched_at=long_ago
    )
    try:
        processes.wait_until(
            lambda: InboxEvent.objects.filter(
                pk=probe.pk, processing_status__in=TERMINAL_STATUSES
            ).exists(),
            timeout=30,
            what="a sweep of the worker's relay",
        )
    except AssertionError:
        raise AssertionError(worker.log()[-3000:]) from None


def test_a_real_worker_takes_a_deployment_to_succeeded(tmp_path, api_http):
    worker = processes.celery_worker(
        tmp_path, env={"DEPLOY_SIMULATED_SECONDS": "0.2"}
    ).start()
    try:
        deployment = create(api_http, "real-1")
        wait_status(
            deployment, "succeeded", timeout=60, what="the deployment to succeed"
        )
    finally:
        worker.stop()
    assert list(
        JobTransition.objects.filter(job=deployment)
        .order_by("id")
        .values_list("from_status", "to_status")
    ) == [("queued", "running"), ("running", "succeeded")]
    assert worker_runs(deployment) == 1
    assert IdempotencyRecord.objects.get(resource_id=deployment.public_id).status == (
        "succeeded"
    )
    lookup = api_http.get("/api/idempotency-keys/deployment.create/real-1/").json()
    assert lookup["status"] == "succeeded"


def test_a_worker_killed_mid_run_never_runs_the_executor_twice(tmp_path, api_http):
    """kill -9 while the executor runs; after a restart (a worker alone: its relay sweeps) the
    job is failed as ``worker_lost`` once its lease expires (the documented outcome), and the
    executor is not started a second time."""
    first = processes.celery_worker(
        tmp_path,
        name="doomed",
        env={"DEPLOY_SIMULATED_SECONDS": "60", "DEPLOY_RUNNING_LEASE_SECONDS": "3"},
    ).start()
    try:
        deployment = create(api_http, "kill-1")
        wait_status(deployment, "running", timeout=60, what="the job to be claimed")
    finally:
        first.kill()
    assert worker_runs(deployment) == 1

    restart_env = {
        "DEPLOY_SIMULATED_SECONDS": "0.2",
        "CELERY_BROKER_VISIBILITY_TIMEOUT": "2",
        "RELAY_SWEEP_INTERVAL_SECONDS": "1",
    }
    worker = processes.celery_worker(tmp_path, name="again", env=restart_env).start()
    try:
        wait_status(deployment, "failed", timeout=90, what="the lost job to be failed")
        # A few more sweeps (and any redelivery of the killed worker's message) find the
        # job already decided: nothing starts the executor again.
        a_sweep_has_run(worker)
        a_sweep_has_run(worker)
    finally:
        worker.stop()

    deployment.refresh_from_db()
    assert deployment.status == "failed"
    assert deployment.detail.startswith("worker_lost")
    assert worker_runs(deployment) == 1
    assert list(
        JobTransition.objects.filter(job=deployment)
        .order_by("id")
        .values_list("from_status", "to_status")
    ) == [("queued", "running"), ("running", "failed")]
    assert IdempotencyRecord.objects.get(resource_id=deployment.public_id).status == (
        "failed"
    )


def test_a_job_whose_message_was_lost_is_redispatched_by_the_sweep(tmp_path, api_http):
    # The message is published with no worker running (a relay round, as a worker's relay
    # runs it), then dropped: only the sweep can help.
    deployment = create(api_http, "lost-1")
    assert Relay().run_once(sweep=False) == (1, False)
    processes.purge_broker()
    deployment.refresh_from_db()
    published_at = deployment.last_dispatched_at
    assert published_at is not None  # not the claim's any more
    env = {
        "DEPLOY_SIMULATED_SECONDS": "0.1",
        "DEPLOY_REDISPATCH_AFTER_SECONDS": "1",
        "RELAY_SWEEP_INTERVAL_SECONDS": "1",
    }
    worker = processes.celery_worker(tmp_path, env=env).start()
    try:
        wait_status(
            deployment, "succeeded", timeout=90, what="the swept job to succeed"
        )
    finally:
        worker.stop()
    assert worker_runs(deployment) == 1
    deployment.refresh_from_db()
    assert deployment.last_dispatched_at > published_at  # published again by the sweep
