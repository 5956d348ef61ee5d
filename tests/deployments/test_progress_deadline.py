"""A job reported running holds a lease, and a key is stuck only once its operation missed its
own deadline (docs/security.md, "A job reported running holds a lease")."""

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.relay.outbox import relay_round
from deployments import executors
from deployments.executors import ExecutionResult
from deployments.models import Deployment, JobTransition
from deployments.outbox import JOBS_OUTBOX
from deployments.services.attempts import job_run
from idempotency.models import IdempotencyRecord
from idempotency.selectors import idempotency_records_stuck
from tests.deployments.factories import deployment_body, lease_ended

pytestmark = pytest.mark.django_db


def post(api, url, body, key):
    return api.post(
        url,
        data=json.dumps(body),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
    )


def deployment_create(api, key="create-1") -> Deployment:
    response = post(api, "/api/deployments/", deployment_body(), key)
    assert response.status_code == 202
    return Deployment.objects.get(public_id=response.json()["deployment_id"])


def report(api, deployment, status, key, at=None):
    response = post(
        api,
        "/api/status-sync/",
        {
            "deployment_id": deployment.public_id,
            "status": status,
            "reported_at": (at or timezone.now()).isoformat(),
        },
        key,
    )
    assert response.status_code == 201
    return response.json()


def record_of(job) -> IdempotencyRecord:
    return IdempotencyRecord.objects.get(
        operation_type="deployment.create", resource_id=job.public_id
    )


def jobs_sweep() -> int:
    """One sweep of the jobs outbox, as a worker's relay runs it."""
    return relay_round(JOBS_OUTBOX, JOBS_OUTBOX.sweep, 500)


def test_a_new_key_has_a_deadline_for_its_job_to_be_picked_up(api, settings):
    before = timezone.now()
    deployment = deployment_create(api)
    after = timezone.now()
    record = record_of(deployment)
    grace = timedelta(
        seconds=settings.DEPLOY_REDISPATCH_AFTER_SECONDS
        + settings.RELAY_SWEEP_INTERVAL_SECONDS
    )
    assert record.status == "processing"
    assert before + grace <= record.progress_deadline <= after + grace
    assert not idempotency_records_stuck().exists()
    # No worker picked the job up, not even after the relay's sweep re-dispatched it: stuck.
    late = record.progress_deadline + timedelta(seconds=1)
    assert list(idempotency_records_stuck(now=late)) == [record]


def test_a_running_report_on_a_queued_job_gives_it_a_lease_that_the_sweep_enforces(
    api, settings
):
    settings.DEPLOY_RUNNING_LEASE_SECONDS = 1
    deployment = deployment_create(api)

    before = timezone.now()
    assert report(api, deployment, "running", "r1")["applied"] is True
    after = timezone.now()
    deployment.refresh_from_db()
    assert deployment.status == "running"
    lease = deployment.lease_expires_at
    assert before + timedelta(seconds=1) <= lease <= after + timedelta(seconds=1)
    record = record_of(deployment)
    assert record.status == "processing"
    assert record.progress_deadline == lease

    # The worker leaves a job that an external system runs alone, as before.
    assert job_run(kind="deployment", public_id=deployment.public_id, worker="w") == (
        "not_queued"
    )
    assert jobs_sweep() == 0  # within its lease

    lease_ended(deployment)
    assert jobs_sweep() == 1
    deployment.refresh_from_db()
    assert deployment.status == "failed"
    assert deployment.detail.startswith("report_lost:")
    assert "no further report" in deployment.detail
    last = JobTransition.objects.filter(job=deployment).latest("id")
    assert (last.from_status, last.to_status, last.actor) == (
        "running",
        "failed",
        "sweep",
    )
    record.refresh_from_db()
    assert record.status == "failed"
    assert record.progress_deadline is None

    # A terminal report that comes later still applies, under the ordering rule.
    assert report(api, deployment, "succeeded", "r2")["current_status"] == "succeeded"
    record.refresh_from_db()
    assert record.status == "succeeded"


def test_each_further_running_report_renews_the_lease(api, settings):
    settings.DEPLOY_RUNNING_LEASE_SECONDS = 2
    deployment = deployment_create(api)
    report(api, deployment, "running", "r1")
    deployment.refresh_from_db()
    # The first report's lease has run out by the time the second comes: without the
    # renewal, the sweep below would fail the job.
    lease_ended(deployment)
    deployment.refresh_from_db()
    first_lease = deployment.lease_expires_at

    report(api, deployment, "running", "r2")
    deployment.refresh_from_db()
    assert deployment.lease_expires_at > first_lease
    assert record_of(deployment).progress_deadline == deployment.lease_expires_at

    assert jobs_sweep() == 0
    deployment.refresh_from_db()
    assert deployment.status == "running"


def test_an_older_running_report_that_does_not_apply_renews_nothing(api, settings):
    deployment = deployment_create(api)
    report(api, deployment, "running", "r1")
    deployment.refresh_from_db()
    lease = deployment.lease_expires_at
    old = report(
        api, deployment, "running", "r2", at=timezone.now() - timedelta(minutes=5)
    )
    assert old["applied"] is False
    deployment.refresh_from_db()
    assert deployment.lease_expires_at == lease


def test_a_long_running_job_is_stuck_only_past_its_lease(api, settings):
    """Reported running ten minutes ago and renewed since, or run by a worker for as long:
    within the lease neither key is stuck; past it, it is."""
    settings.DEPLOY_RUNNING_LEASE_SECONDS = 3600
    deployment = deployment_create(api)
    report(api, deployment, "running", "r1")
    deployment.refresh_from_db()
    in_ten_minutes = timezone.now() + timedelta(minutes=10)
    assert not idempotency_records_stuck(now=in_ten_minutes).exists()
    past_lease = deployment.lease_expires_at + timedelta(seconds=1)
    assert list(idempotency_records_stuck(now=past_lease)) == [record_of(deployment)]


def test_a_job_a_worker_runs_long_is_not_stuck_within_its_lease(
    api, settings, monkeypatch
):
    settings.DEPLOY_RUNNING_LEASE_SECONDS = 3600
    seen: dict[str, int] = {}

    def long_execute(job):
        # While the executor works: ten minutes in, then just past the lease.
        now = timezone.now()
        seen["ten_minutes"] = idempotency_records_stuck(
            now=now + timedelta(minutes=10)
        ).count()
        job.refresh_from_db()
        seen["past_lease"] = idempotency_records_stuck(
            now=job.lease_expires_at + timedelta(seconds=1)
        ).count()
        return ExecutionResult(succeeded=True, detail="done")

    monkeypatch.setattr(executors, "long_execute", long_execute, raising=False)
    monkeypatch.setitem(
        executors.EXECUTORS, "long", "deployments.executors.long_execute"
    )
    settings.DEPLOY_EXECUTOR = "long"
    deployment = deployment_create(api)

    assert job_run(kind="deployment", public_id=deployment.public_id, worker="w") == (
        "succeeded"
    )
    assert seen == {"ten_minutes": 0, "past_lease": 1}
    record = record_of(deployment)
    assert (record.status, record.progress_deadline) == ("succeeded", None)


@pytest.mark.django_db(transaction=True)
def test_a_new_deployment_key_carries_its_deadline_in_its_one_statement(api):
    """The deadline costs no statement of its own: the token lookup, the check for a
    byte-identical retry, then the record (deadline included) and the deployment written
    together, inserted first (tests/idempotency/test_fast_paths.py counts them too)."""
    with CaptureQueriesContext(connection) as queries:
        response = post(api, "/api/deployments/", deployment_body(), "count-1")
    assert response.status_code == 202
    sql = [q["sql"] for q in queries.captured_queries]
    expected = 3 if connection.vendor == "postgresql" else 6
    assert len(sql) == expected, [q[:80] for q in sql]
    assert IdempotencyRecord.objects.get(key="count-1").progress_deadline is not None


def test_a_job_reported_running_past_its_workers_result_is_failed_when_the_lease_ends(
    api, settings, monkeypatch
):
    """The worker finished, but a running report newer than its result had applied: the
    job is running on the reporter's word alone, and the relay's sweep fails it once that
    report's lease runs out with nothing more said."""
    settings.DEPLOY_RUNNING_LEASE_SECONDS = 1

    def execute_while_reported(job):
        later = timezone.now() + timedelta(seconds=30)
        assert report(api, job, "running", "r-late", at=later)["applied"] is True
        return ExecutionResult(succeeded=True, detail="done")

    monkeypatch.setattr(
        executors, "reported_execute", execute_while_reported, raising=False
    )
    monkeypatch.setitem(
        executors.EXECUTORS, "reported", "deployments.executors.reported_execute"
    )
    settings.DEPLOY_EXECUTOR = "reported"
    deployment = deployment_create(api)

    assert job_run(kind="deployment", public_id=deployment.public_id, worker="w") == (
        "superseded"
    )
    deployment.refresh_from_db()
    assert deployment.status == "running"
    assert deployment.executor_finished_at is not None
    assert jobs_sweep() == 0  # within the report's lease

    lease_ended(deployment)
    assert jobs_sweep() == 1
    deployment.refresh_from_db()
    assert deployment.status == "failed"
    assert deployment.detail.startswith("report_lost:")
    assert record_of(deployment).status == "failed"
    # A redelivered run message leaves it alone: the executor ran once.
    assert job_run(kind="deployment", public_id=deployment.public_id, worker="w2") == (
        "already_started"
    )
