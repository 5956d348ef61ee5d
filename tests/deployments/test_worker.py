"""The job worker: the executor runs at most once per job, every transition is recorded."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from deployments import executors
from deployments.executors import ExecutionResult
from deployments.models import JobTransition
from deployments.services.attempts import job_run
from idempotency.models import IdempotencyRecord
from tests.deployments.factories import DeploymentFactory
from tests.idempotency.factories import IdempotencyRecordFactory
from tests.threads import run_together


@pytest.fixture
def counting_executor(monkeypatch):
    runs: list[str] = []
    outcome = {"succeeded": True}

    def execute(job):
        runs.append(job.public_id)
        return ExecutionResult(succeeded=outcome["succeeded"], detail="counted")

    monkeypatch.setattr(executors, "counting_execute", execute, raising=False)
    monkeypatch.setitem(
        executors.EXECUTORS, "counting", "deployments.executors.counting_execute"
    )
    with override_settings(DEPLOY_EXECUTOR="counting"):
        yield runs, outcome


def transitions(job) -> list[tuple[str, str]]:
    return list(
        JobTransition.objects.filter(job=job)
        .order_by("id")
        .values_list("from_status", "to_status")
    )


@pytest.mark.django_db
def test_a_job_runs_once_and_records_its_transitions(counting_executor):
    runs, _ = counting_executor
    job = DeploymentFactory()
    IdempotencyRecordFactory(client=job.client, key="k", resource_id=job.public_id)

    assert (
        job_run(kind="deployment", public_id=job.public_id, worker="w1") == "succeeded"
    )
    assert job_run(kind="deployment", public_id=job.public_id, worker="w2") == (
        "already_started"
    )

    assert runs == [job.public_id]
    job.refresh_from_db()
    assert job.status == "succeeded"
    assert transitions(job) == [("queued", "running"), ("running", "succeeded")]
    assert set(JobTransition.objects.values_list("actor", flat=True)) == {"w1"}
    assert IdempotencyRecord.objects.get().status == "succeeded"


@pytest.mark.django_db
def test_a_failing_or_raising_executor_fails_the_job(counting_executor, monkeypatch):
    _, outcome = counting_executor
    outcome["succeeded"] = False
    job = DeploymentFactory()
    assert job_run(kind="deployment", public_id=job.public_id, worker="w") == "failed"

    def explode(job):
        raise RuntimeError("boom")

    monkeypatch.setattr(executors, "counting_execute", explode, raising=False)
    other = DeploymentFactory()
    assert job_run(kind="deployment", public_id=other.public_id, worker="w") == "failed"
    other.refresh_from_db()
    # The client reads the class; the text (anything: an address, a secret) is for the
    # operators' logs (tests/deployments/test_secret_scrubbing.py).
    assert other.detail == "executor error: RuntimeError"


@pytest.mark.django_db
def test_a_job_moved_on_by_a_report_is_not_executed(counting_executor):
    runs, _ = counting_executor
    job = DeploymentFactory(status="succeeded")
    assert job_run(kind="deployment", public_id=job.public_id, worker="w") == (
        "not_queued"
    )
    # a report moving an executed job back to queued does not make it runnable again
    started = DeploymentFactory(
        status="queued", executor_started_at=timezone.now(), claimed_by="gone"
    )
    assert job_run(kind="deployment", public_id=started.public_id, worker="w") == (
        "already_started"
    )
    assert runs == []


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_deliveries_run_the_executor_once(counting_executor):
    runs, _ = counting_executor
    job = DeploymentFactory()
    results, errors = run_together(
        [
            lambda: job_run(kind="deployment", public_id=job.public_id, worker="w0"),
            lambda: job_run(kind="deployment", public_id=job.public_id, worker="w1"),
        ]
    )
    assert errors == []
    assert sorted(results) == ["already_started", "succeeded"]
    assert runs == [job.public_id]
    assert transitions(job) == [("queued", "running"), ("running", "succeeded")]


@pytest.mark.django_db
def test_a_redelivered_message_fails_a_job_whose_worker_was_lost(counting_executor):
    runs, _ = counting_executor
    started = timezone.now() - timedelta(minutes=10)
    job = DeploymentFactory(
        status="running",
        executor_started_at=started,
        lease_expires_at=started + timedelta(minutes=5),
        claimed_by="worker:gone",
    )
    assert job_run(kind="deployment", public_id=job.public_id, worker="w") == (
        "worker_lost"
    )
    job.refresh_from_db()
    assert job.status == "failed"
    assert job.detail.startswith("worker_lost")
    # within its lease, a redelivery leaves a running job to its worker
    alive = DeploymentFactory(
        status="running",
        executor_started_at=timezone.now(),
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )
    assert job_run(kind="deployment", public_id=alive.public_id, worker="w") == (
        "already_started"
    )
    alive.refresh_from_db()
    assert alive.status == "running"
    assert runs == []
