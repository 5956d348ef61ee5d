"""The ``github`` executor against a local fake of GitHub's deployments API over real HTTP
(tests/deployments/fake_github.py), the worker's job runs called in this process: one GitHub
deployment per job, also when a create's answer is lost; a signed ``deployment_status`` for
it then moves that job. Real workers: tests/deployments/test_trigger_workers.py."""

from __future__ import annotations

import time

import pytest
from django.db import transaction

from deployments.models import Deployment, TriggerAttempt
from deployments.outbox import JOBS_OUTBOX
from deployments.services.attempts import job_run
from tests.deployments.factories import (
    build_body,
    deployment_body,
    idempotent_post,
    retry_come_due,
)
from tests.deployments.fake_github import GITHUB_TOKEN, FakeGitHub
from tests.deployments.receiver import Receiver
from tests.integrations.github.factories import github_headers, github_source_create
from tests.webhooks.factories import webhook_post
from webhooks.models import InboxEvent
from webhooks.processing import inbox_event_process

pytestmark = pytest.mark.django_db

SHA = "5f1c2e3d4b5a69788796a5b4c3d2e1f0a9b8c7d6"


@pytest.fixture
def github(settings):
    with FakeGitHub() as fake:
        settings.DEPLOY_EXECUTOR = "github"
        settings.GITHUB_API_URL = fake.url
        settings.GITHUB_TOKEN = GITHUB_TOKEN
        settings.DEPLOY_HTTP_TIMEOUT_SECONDS = 1
        settings.DEPLOY_TRIGGER_RETRY_BASE_SECONDS = 0.01
        settings.DEPLOY_TRIGGER_RETRY_MAX_SECONDS = 3
        yield fake


def create(http, key: str = "k1", **overrides) -> Deployment:
    body = deployment_body(
        repository="acme/shop", environment="production", **overrides
    )
    response = idempotent_post(http, "/api/deployments/", body, key)
    assert response.status_code == 202
    return Deployment.objects.get(public_id=response.json()["deployment_id"])


def run(job) -> str:
    return job_run(kind="deployment", public_id=job.public_id, worker="w1")


def run_when_due(job, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with transaction.atomic():
            _, publications = JOBS_OUTBOX.claim(500)
        if job.public_id in [p.args[1] for p in publications]:
            return run(job)
        time.sleep(0.02)
    raise AssertionError("never due")


def outcomes(job) -> list[tuple[str, int | None, str]]:
    return list(
        TriggerAttempt.objects.filter(job=job)
        .order_by("number")
        .values_list("outcome", "status_code", "error_class")
    )


def test_a_deployment_becomes_one_github_deployment(api, github):
    job = create(api, commit_sha=SHA)
    assert run(job) == "triggered"

    [made] = github.deployments_of(job.public_id)
    assert (made["ref"], made["environment"]) == (SHA, "production")
    assert made["payload"] == {"deployment_id": job.public_id}
    assert (made["auto_merge"], made["required_contexts"]) == (False, [])
    job.refresh_from_db()
    assert job.status == "running"
    assert job.github_deployment_id == made["id"]
    assert job.github_commit_sha == made["sha"]
    assert job.detail == "triggered: HTTP 201"
    assert outcomes(job) == [("delivered", 201, "")]
    [attempt] = TriggerAttempt.objects.filter(job=job)
    assert attempt.url == f"{github.url}/repos/acme/shop/deployments"
    assert github.calls == [("POST", "/repos/acme/shop/deployments")]
    # What it started, as the API answers it and the attempt records it.
    downstream = {"system": "github", "id": made["id"], "url": made["url"]}
    assert api.get(f"/api/deployments/{job.public_id}/").json()["downstream"] == (
        downstream
    )
    assert attempt.downstream == downstream


def test_a_create_whose_answer_is_lost_is_found_and_not_made_again(api, github):
    job = create(api)  # a short commit: looked up by the ref it was created with
    github.plan(job.public_id, "lose")
    assert run(job) == "retry_scheduled"
    assert len(github.deployments_of(job.public_id)) == 1  # GitHub made it all the same
    assert run_when_due(job) == "triggered"

    [made] = github.deployments_of(job.public_id)
    job.refresh_from_db()
    assert (job.status, job.github_deployment_id) == ("running", made["id"])
    assert job.downstream == {"system": "github", "id": made["id"], "url": made["url"]}
    assert outcomes(job) == [
        ("ambiguous", None, "RemoteProtocolError"),
        ("delivered", 200, ""),
    ]
    assert github.calls == [
        ("POST", "/repos/acme/shop/deployments"),
        ("GET", "/repos/acme/shop/deployments"),
    ]


def test_the_lookup_reads_every_page_before_it_creates_again(api, github):
    job = create(api, commit_sha=SHA)
    github.plan(job.public_id, "lose")
    assert run(job) == "retry_scheduled"
    # Someone else's deployments of the same commit since: ours is on a later page.
    for _ in range(150):
        github.add_deployment("acme/shop", ref=SHA, environment="production")
    assert run_when_due(job) == "triggered"
    assert len(github.deployments_of(job.public_id)) == 1
    assert github.calls.count(("GET", "/repos/acme/shop/deployments")) == 2


@pytest.mark.slow
def test_the_lookup_and_the_create_share_the_attempts_deadline(api, github):
    """Each page answers within the 1 s timeout, five of them do not: the attempt as a
    whole ends at ``DEPLOY_HTTP_TIMEOUT_SECONDS``, before it creates anything."""
    job = create(api, commit_sha=SHA)
    github.plan(job.public_id, "lose")
    assert run(job) == "retry_scheduled"
    for _ in range(450):  # ours is on the fifth page, newest first
        github.add_deployment("acme/shop", ref=SHA, environment="production")
    github.lookup_delay = 0.6
    assert run_when_due(job) == "retry_scheduled"
    [_, lookup] = TriggerAttempt.objects.filter(job=job).order_by("number")
    assert (lookup.outcome, lookup.error_class) == ("ambiguous", "ReadTimeout")
    assert lookup.duration_seconds < 1.8, lookup.duration_seconds
    assert github.calls.count(("GET", "/repos/acme/shop/deployments")) < 5
    assert len(github.deployments_of(job.public_id)) == 1  # none created again


def test_the_token_never_follows_a_next_page_to_another_host(api, github):
    job = create(api, commit_sha=SHA)
    github.plan(job.public_id, "lose")
    assert run(job) == "retry_scheduled"
    for _ in range(150):
        github.add_deployment("acme/shop", ref=SHA, environment="production")
    with Receiver() as elsewhere:
        github.link_base = elsewhere.url.removesuffix("/hooks/deploy")
        assert run_when_due(job) == "retry_scheduled"
        assert elsewhere.received == []
    [_, lookup] = TriggerAttempt.objects.filter(job=job).order_by("number")
    assert (lookup.outcome, lookup.error) == (
        "ambiguous",
        "the next page of the lookup is on another host",
    )
    assert len(github.deployments_of(job.public_id)) == 1  # and none created again


def test_a_refused_create_is_looked_up_then_made_once(api, github):
    job = create(api)
    github.plan(job.public_id, "502")
    assert run(job) == "retry_scheduled"
    assert github.deployments_of(job.public_id) == []
    assert run_when_due(job) == "triggered"
    assert len(github.deployments_of(job.public_id)) == 1
    assert [method for method, _ in github.calls] == ["POST", "GET", "POST"]
    assert [outcome for outcome, _, _ in outcomes(job)] == ["ambiguous", "delivered"]


def test_a_rate_limit_waits_for_its_reset(api, github):
    job = create(api)
    github.plan(job.public_id, "rate_limit")
    assert run(job) == "retry_scheduled"
    [attempt] = TriggerAttempt.objects.filter(job=job)
    assert (attempt.outcome, attempt.status_code) == ("transient", 403)
    assert (attempt.retry_at - attempt.finished_at).total_seconds() >= 1
    job.refresh_from_db()
    assert job.next_attempt_at == attempt.retry_at
    with transaction.atomic():
        assert JOBS_OUTBOX.claim(500) == (0, [])  # not before the reset
    retry_come_due(job)  # the reset reached, without waiting one to two seconds for it
    assert run_when_due(job) == "triggered"


def test_bad_credentials_fail_the_job_with_githubs_reason(api, github, settings):
    settings.GITHUB_TOKEN = "ghp_not_the_token"
    job = create(api)
    assert run(job) == "failed"
    job.refresh_from_db()
    assert job.detail == "trigger_rejected: HTTP 401: Bad credentials"
    assert github.deployments == []


def test_a_build_is_not_a_github_deployment(api, github):
    response = idempotent_post(api, "/api/builds/", build_body(), "b1")
    public_id = response.json()["build_id"]
    assert job_run(kind="build", public_id=public_id, worker="w1") == "failed"
    assert github.calls == []


def test_a_signed_status_of_its_github_deployment_moves_the_job(
    api, other_api, github, client
):
    """Two clients deploy the same commit; GitHub's status for the first one's GitHub
    deployment moves that one, though the other is more recent."""
    job = create(api, commit_sha=SHA)
    assert run(job) == "triggered"
    other = create(other_api, "k2", commit_sha=SHA)
    assert run(other) == "triggered"
    job.refresh_from_db()

    github_source_create()
    delivery = github.status_create(job.github_deployment_id, "success")
    headers = github_headers(delivery, event="deployment_status", delivery="d-success")
    assert webhook_post(client, "github", delivery, headers).status_code == 202
    event = InboxEvent.objects.get(event_id="d-success")
    outcome = inbox_event_process(inbox_event_id=event.pk)
    assert outcome.status == "processed"

    job.refresh_from_db()
    other.refresh_from_db()
    assert (job.status, other.status) == ("succeeded", "running")
    assert job.detail == "success from the fake"


@pytest.mark.parametrize("repository", ["acme/..", "../..", "acme/.", "acme/a/b"])
def test_a_repository_outside_githubs_naming_is_rejected_with_no_request(
    api, github, repository
):
    """A row stored before the API held repositories to GitHub's naming: ``acme/..`` made
    the token's POST go to ``/repos/deployments``. The job fails, and nothing is sent."""
    job = create(api)
    Deployment.objects.filter(pk=job.pk).update(repository=repository)
    assert run(job) == "failed"
    assert github.calls == []
    job.refresh_from_db()
    assert job.status == "failed"
    assert job.detail.startswith("trigger_rejected")
    assert [outcome for outcome, _, _ in outcomes(job)] == ["rejected"]
