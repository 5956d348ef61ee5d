"""Trigger executors on real Celery workers (each with its relay), PostgreSQL, Redis and
RabbitMQ, against a real receiver in this process (tests/deployments/receiver.py) and a local
fake of GitHub's API (tests/deployments/fake_github.py): every fault of a CI system's
endpoint, a worker killed with ``kill -9`` while the receiver holds its request, 50 identical
requests at once while the receiver is slow, and a GitHub create whose answer is lost. In
every case: one deployment downstream per job."""

from __future__ import annotations

import functools
import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import requests
from django.utils import timezone

from core.actors import Actor
from deployments.models import Deployment, DeployTarget, JobTransition, TriggerAttempt
from tests import processes
from tests.core.factories import api_client_make, bearer_http
from tests.deployments.factories import deployment_body, idempotent_post
from tests.deployments.fake_github import GITHUB_TOKEN, FakeGitHub
from tests.deployments.fake_github_actions import FakeGitHubActions
from tests.deployments.leaks import STRAY, deployment_records, holding
from tests.deployments.receiver import Fault, Receiver
from tests.integrations.github.factories import github_headers, github_source_create
from tests.threads import run_together
from tests.webhooks.factories import webhook_post
from trail.api_clients import api_client_create
from webhooks.models import InboxEvent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
]

# Fast retries, sweeps and leases, so that recovery is seen within a test; metrics served on
# a port of the worker's own (several workers run at once on one machine).
FAST = {
    "DEPLOY_HTTP_TIMEOUT_SECONDS": "1",
    "DEPLOY_TRIGGER_RETRY_BASE_SECONDS": "0.2",
    "DEPLOY_TRIGGER_RETRY_MAX_SECONDS": "1",
    "DEPLOY_REDISPATCH_AFTER_SECONDS": "1",
    "RELAY_SWEEP_INTERVAL_SECONDS": "1",
    "CELERY_METRICS_PORT": "0",
}


@pytest.fixture
def api_http():
    _, token = api_client_make(name="ci-triggers")
    return bearer_http(token)


def http_env(receiver: Receiver, **more: str) -> dict[str, str]:
    return {
        **FAST,
        "DEPLOY_EXECUTOR": "http",
        "DEPLOY_HTTP_URL": receiver.url,
        "DEPLOY_HTTP_SECRET": receiver.secret,
        **more,
    }


def create(http, key: str, **overrides: str) -> Deployment:
    response = idempotent_post(
        http, "/api/deployments/", deployment_body(**overrides), key
    )
    assert response.status_code == 202
    return Deployment.objects.get(public_id=response.json()["deployment_id"])


def wait_for(workers, jobs, done, *, timeout: float, what: str):
    """Until ``done`` holds for every job; a failure shows each job and the workers' logs."""
    jobs = list(jobs)

    def reached() -> bool:
        for job in jobs:
            job.refresh_from_db()
        return all(done(job) for job in jobs)

    try:
        workers.wait_until(reached, timeout=timeout, what=what)
    except AssertionError as exc:
        states = [(j.public_id, j.status, j.trigger_phase, j.detail) for j in jobs]
        raise AssertionError(f"{states}\n{exc}") from None


def sync(http, job: Deployment, status: str, key: str) -> dict:
    report = {
        "deployment_id": job.public_id,
        "status": status,
        "reported_at": (timezone.now() + timedelta(seconds=1)).isoformat(),
        "detail": "deployed",
    }
    return idempotent_post(http, "/api/status-sync/", report, key).json()


def attempts_match_the_receiver(job: Deployment, receiver: Receiver) -> None:
    """One attempt row per request the receiver saw, in order, each with the status the
    receiver answered (none where the connection dropped or timed out first)."""
    made = list(TriggerAttempt.objects.filter(job=job).order_by("number"))
    seen = receiver.requests_for(job.public_id)
    assert len(made) == len(seen), (made, seen)
    for attempt, request in zip(made, seen, strict=True):
        assert request.verified, request.error
        if attempt.status_code is not None:
            assert attempt.status_code == request.answered
        else:
            assert attempt.outcome == "ambiguous"
            assert request.fault is not None and request.fault.kind in {"drop", "slow"}


def test_every_fault_of_the_receiver_ends_in_one_deployment_per_job(workers, api_http):
    plans = {
        "errors": [Fault.status(500), Fault.status(500)],
        "unavailable": [Fault.status(503)],
        "limited": [Fault.status(429, retry_after=1)],
        "dropped": [Fault.drop()],
        "slow": [Fault.slow(2.5)],
        "refused": [Fault.status(422)],
        "clean": [],
    }
    with Receiver() as receiver:
        # Committed with no worker running; each id's plan is known before any trigger.
        jobs = {name: create(api_http, f"faults-{name}") for name in plans}
        for name, faults in plans.items():
            receiver.plan(jobs[name].public_id, *faults)
        port = processes.free_port()
        workers.start(
            concurrency=2, env=http_env(receiver, CELERY_METRICS_PORT=str(port))
        )
        wait_for(
            workers,
            jobs.values(),
            lambda j: j.status in {"running", "failed"},
            timeout=90,
            what="every job triggered or refused",
        )
        metrics = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text

    assert receiver.ids() == {job.public_id for job in jobs.values()}
    for name, job in jobs.items():
        attempts_match_the_receiver(job, receiver)
        if name == "refused":
            assert job.status == "failed"
            assert job.detail == "trigger_rejected: HTTP 422"
            assert receiver.acted_count(job.public_id) == 0
            continue
        assert job.status == "running", (name, job.detail)
        assert receiver.acted_count(job.public_id) == 1, name
        assert len(receiver.requests_for(job.public_id)) == len(plans[name]) + 1
        # The downstream then reports: the job ends as it says.
        assert sync(api_http, job, "succeeded", f"sync-{name}")["applied"] is True
        job.refresh_from_db()
        assert job.status == "succeeded"
    # The worker counted every attempt by its outcome, and timed them.
    counted = {
        line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("deploy_trigger_attempts_total{")
    }
    by_outcome = Counter(TriggerAttempt.objects.values_list("outcome", flat=True))
    for outcome, count in by_outcome.items():
        assert counted[f'executor="http",outcome="{outcome}"'] == count, counted
    assert 'deploy_trigger_duration_seconds_count{executor="http"}' in metrics


def test_a_worker_killed_while_the_receiver_holds_its_request_is_triggered_again(
    workers, api_http, broker_url
):
    """kill -9 after the request left: once the lease runs out the relay's sweep publishes
    the job again, the attempt is closed as lost, and it is triggered again under the same
    id; the receiver deduplicates. Never failed as worker_lost."""
    with Receiver() as receiver:
        job = create(api_http, "kill-1")
        receiver.plan(job.public_id, Fault.hold())
        env = http_env(
            receiver,
            CELERY_BROKER_URL=broker_url,
            DEPLOY_HTTP_TIMEOUT_SECONDS="30",
            DEPLOY_RUNNING_LEASE_SECONDS="3",
        )
        doomed = workers.start(name="doomed", env=env)
        assert receiver.holding.wait(60), doomed.log()[-3000:]
        doomed.kill()
        receiver.release()  # the answer goes nowhere: its worker is gone
        job.refresh_from_db()
        assert (job.status, job.trigger_phase) == ("queued", "trigger_sent")

        workers.start(
            name="again", env={**env, "CELERY_BROKER_VISIBILITY_TIMEOUT": "2"}
        )
        wait_for(
            workers,
            [job],
            lambda j: j.status == "running",
            timeout=90,
            what="the job triggered again",
        )

    assert [(a.number, a.outcome) for a in job.trigger_attempts.order_by("number")] == [
        (1, "lost"),
        (2, "delivered"),
    ]
    seen = receiver.requests_for(job.public_id)
    assert [r.webhook_id for r in seen] == [job.public_id] * 2
    assert all(r.verified for r in seen)
    assert receiver.acted_count(job.public_id) == 1
    assert not job.detail.startswith("worker_lost")
    assert list(
        JobTransition.objects.filter(job=job).values_list("from_status", "to_status")
    ) == [("queued", "running")]


TOKEN = "test-token-race-trigger-0123456789"


@pytest.fixture
def server(tmp_path):
    api_client_create(actor=Actor.system(), name="race", token=TOKEN)
    port = processes.free_port()
    proc = processes.gunicorn(tmp_path, port=port, workers=2, threads=16)
    proc.start()
    try:
        processes.wait_http_ok(f"http://127.0.0.1:{port}/healthz", timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def test_fifty_identical_requests_while_the_receiver_is_slow_make_one_trigger(
    workers, server
):
    with Receiver(delay=1.5) as receiver:
        workers.start(env=http_env(receiver, DEPLOY_HTTP_TIMEOUT_SECONDS="10"))
        headers = {
            "Authorization": f"Bearer {TOKEN}",
            "Content-Type": "application/json",
            "Idempotency-Key": "race-trigger",
        }

        def one() -> int:
            with requests.Session() as session:
                return session.post(
                    f"{server}/api/deployments/",
                    data=json.dumps(deployment_body()),
                    headers=headers,
                    timeout=60,
                ).status_code

        statuses, errors = run_together([functools.partial(one) for _ in range(50)])
        assert not errors, errors
        assert sorted(statuses) == [200] * 49 + [202]
        job = Deployment.objects.get()
        wait_for(
            workers,
            [job],
            lambda j: j.status == "running",
            timeout=90,
            what="the one job triggered",
        )
    assert receiver.ids() == {job.public_id}
    assert len(receiver.received) == 1
    assert receiver.acted_count(job.public_id) == 1
    assert TriggerAttempt.objects.count() == 1


def test_a_github_deployment_whose_create_answer_is_lost_is_made_once(
    workers, api_http, client
):
    """A real worker creates the GitHub deployment (the first answer is lost: it finds it
    instead of creating another); GitHub's signed status for it, delivered to the inbox
    and processed by the worker, moves the job."""
    with FakeGitHub() as github:
        job = create(api_http, "gh-1")
        github.plan(job.public_id, "lose")
        env = {
            **FAST,
            "DEPLOY_EXECUTOR": "github",
            "GITHUB_API_URL": github.url,
            "GITHUB_TOKEN": GITHUB_TOKEN,
        }
        workers.start(env=env)
        wait_for(
            workers,
            [job],
            lambda j: j.status == "running",
            timeout=90,
            what="the GitHub deployment made",
        )
        [made] = github.deployments_of(job.public_id)
        assert job.github_deployment_id == made["id"]

        github_source_create()
        delivery = github.status_create(made["id"], "success")
        headers = github_headers(delivery, event="deployment_status", delivery="gh-d1")
        assert webhook_post(client, "github", delivery, headers).status_code == 202
        wait_for(
            workers,
            [job],
            lambda j: j.status == "succeeded",
            timeout=60,
            what="the status applied by the worker",
        )
    assert InboxEvent.objects.get(event_id="gh-d1").processing_status == "processed"
    outcomes = job.trigger_attempts.order_by("number").values_list("outcome", flat=True)
    assert list(outcomes) == ["ambiguous", "delivered"]
    assert len(github.deployments_of(job.public_id)) == 1


def test_a_workflow_run_whose_dispatch_answer_is_lost_is_made_once(
    workers, api_http, client
):
    """A real worker dispatches the job's workflow (the first answer is lost after GitHub
    made the run: the next attempt finds the run by the job's id in its name instead of
    dispatching again); GitHub's signed workflow_run delivery, processed by the worker,
    moves the job to its conclusion."""
    with FakeGitHubActions() as actions:
        job = create(api_http, "gha-1")
        actions.plan(job.public_id, "lose")
        env = {
            **FAST,
            "DEPLOY_EXECUTOR": "github-actions",
            "GITHUB_API_URL": actions.url,
            "GITHUB_TOKEN": GITHUB_TOKEN,
        }
        workers.start(env=env)
        wait_for(
            workers,
            [job],
            lambda j: j.status == "running",
            timeout=90,
            what="the workflow run dispatched",
        )
        [made] = actions.runs_of(job.public_id)
        assert job.downstream == {
            "system": "github-actions",
            "id": made["id"],
            "url": made["html_url"],
        }

        github_source_create()
        delivery = actions.delivery(
            made,
            "completed",
            conclusion="success",
            updated_at=datetime.now(UTC) + timedelta(seconds=5),
        )
        headers = github_headers(delivery, event="workflow_run", delivery="gha-d1")
        assert webhook_post(client, "github", delivery, headers).status_code == 202
        wait_for(
            workers,
            [job],
            lambda j: j.status == "succeeded",
            timeout=60,
            what="the run's conclusion applied by the worker",
        )
    outcomes = job.trigger_attempts.order_by("number").values_list("outcome", flat=True)
    assert list(outcomes) == ["ambiguous", "delivered"]
    assert len(actions.runs_of(job.public_id)) == 1
    assert len(actions.dispatches) == 1


def test_a_token_saved_with_a_stray_character_reaches_no_record_through_a_real_worker(
    workers, api_http
):
    """Deploy targets whose tokens were saved before stray characters were refused (rows
    written straight to the database, as such rows were): each job fails at once, and its
    token is in none of its records (its detail and the API's answer, its attempts and
    transitions, the log's leaves, its evidence bundle) nor in the worker's output.
    PostgreSQL holds no NUL: tests/deployments/test_secret_scrubbing.py has that one."""
    stray = {name: char for name, char in STRAY.items() if name != "nul"}
    tokens = {name: f"ghp_stray_{name}_0123456789abcdefABCDEF" for name in stray}
    with FakeGitHub() as github:
        jobs = {}
        for name, char in stray.items():
            DeployTarget.objects.create(
                name=f"github-{name}",
                executor="github",
                environment_pattern=f"leak-{name}",
                applies_to=DeployTarget.AppliesTo.DEPLOYMENTS,
                url=github.url,
                secret=tokens[name] + char,
            )
            jobs[name] = create(api_http, f"leak-{name}", environment=f"leak-{name}")
        worker = workers.start(env=FAST)
        wait_for(
            workers,
            jobs.values(),
            lambda j: j.status == "failed",
            timeout=90,
            what="every job refused",
        )
        worker.stop()
    assert github.deployments == []
    output = worker.log()
    assert "job.trigger_attempt" in output  # the worker logged its attempts
    for name, job in jobs.items():
        records = deployment_records(job, api=api_http)
        assert records["detail"] == "trigger_rejected: LocalProtocolError", name
        [attempt] = TriggerAttempt.objects.filter(job=job)
        assert attempt.error_class == "LocalProtocolError"
        for token in tokens.values():
            assert holding(records, token) == [], (name, token)
            assert token not in output
