"""The ``github-actions`` executor against a local fake of GitHub's Actions API over real HTTP
(tests/deployments/fake_github_actions.py), the worker's job runs called in this process: one
workflow run per job in every case (run details answered or not, an answer lost after the run
was created, a server that refuses ``return_run_details``), and GitHub's signed
``workflow_run`` deliveries moving the job to its conclusion, late ones never moving it back."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from core.actors import Actor
from deployments import github_actions
from deployments.models import Build, Deployment, DeployTarget, TriggerAttempt
from deployments.outbox import JOBS_OUTBOX
from deployments.services.attempts import job_run
from deployments.targets import (
    deploy_target_save,
    deploy_target_test_request,
    deploy_target_test_run,
)
from tests.core.factories import api_client_make, bearer_http
from tests.deployments.factories import build_body, deployment_body, idempotent_post
from tests.deployments.fake_github import GITHUB_TOKEN
from tests.deployments.fake_github_actions import FakeGitHubActions
from tests.integrations.github.factories import github_headers, github_source_create
from tests.webhooks.factories import webhook_post
from webhooks.models import InboxEvent
from webhooks.processing import inbox_event_process

pytestmark = pytest.mark.django_db

DISPATCHES = "/repos/acme/shop/actions/workflows/deploy.yml/dispatches"
RUNS = "/repos/acme/shop/actions/workflows/deploy.yml/runs"


def _configure(settings, fake: FakeGitHubActions) -> None:
    settings.DEPLOY_EXECUTOR = "github-actions"
    settings.GITHUB_API_URL = fake.url
    settings.GITHUB_TOKEN = GITHUB_TOKEN
    settings.GITHUB_ACTIONS_REF = "release"
    settings.DEPLOY_HTTP_TIMEOUT_SECONDS = 1
    settings.DEPLOY_TRIGGER_RETRY_BASE_SECONDS = 0.01
    settings.DEPLOY_TRIGGER_RETRY_MAX_SECONDS = 3


@pytest.fixture(autouse=True)
def _forgets_servers():
    """What a worker process learnt of a server's answers is the process's: not a test's."""
    github_actions._NO_RUN_DETAILS.clear()
    yield
    github_actions._NO_RUN_DETAILS.clear()


@pytest.fixture
def actions(settings):
    with FakeGitHubActions() as fake:
        _configure(settings, fake)
        yield fake


@pytest.fixture
def ghes(settings):
    with FakeGitHubActions(like_ghes=True) as fake:
        _configure(settings, fake)
        yield fake


@pytest.fixture
def api():
    _, token = api_client_make(name="ci")
    return bearer_http(token)


def create(api, key: str = "k1", **overrides) -> Deployment:
    fields = {
        "repository": "acme/shop",
        "environment": "production",
        "workflow": "deploy.yml",
        **overrides,
    }
    body = deployment_body(**fields)
    response = idempotent_post(api, "/api/deployments/", body, key)
    assert response.status_code == 202, response.content
    return Deployment.objects.get(public_id=response.json()["deployment_id"])


def run(job) -> str:
    return job_run(kind=job.kind, public_id=job.public_id, worker="w1")


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


def deliver(client, body: bytes, delivery: str) -> InboxEvent:
    """``body`` as GitHub delivers it (signed), taken in and processed."""
    headers = github_headers(body, event="workflow_run", delivery=delivery)
    assert webhook_post(client, "github", body, headers).status_code == 202
    event = InboxEvent.objects.get(event_id=delivery)
    inbox_event_process(inbox_event_id=event.pk)
    event.refresh_from_db()
    return event


# --- one run per job ---------------------------------------------------------------------


def test_a_deployment_becomes_one_run_of_its_workflow(api, actions):
    job = create(api)
    assert run(job) == "triggered"

    [made] = actions.runs_of(job.public_id)
    [body] = actions.bodies()
    assert body == {
        "ref": "release",
        "inputs": {
            "deployment_id": job.public_id,
            "repository": "acme/shop",
            "commit_sha": job.commit_sha,
            "environment": "production",
            "triggered_by": job.triggered_by,
        },
        "return_run_details": True,
    }
    job.refresh_from_db()
    assert (job.status, job.detail) == ("running", "triggered: HTTP 200")
    downstream = {
        "system": "github-actions",
        "id": made["id"],
        "url": made["html_url"],
    }
    assert job.downstream == downstream
    assert api.get(f"/api/deployments/{job.public_id}/").json()["downstream"] == (
        downstream
    )
    [attempt] = TriggerAttempt.objects.filter(job=job)
    assert attempt.downstream == downstream
    assert attempt.url == f"{actions.url}{DISPATCHES}"
    assert actions.calls == [("POST", DISPATCHES)]


def test_a_build_runs_on_its_own_ref_with_its_inputs(api, actions):
    body = build_body(repository="acme/shop", workflow="build.yaml", ref="v1.2.0")
    response = idempotent_post(api, "/api/builds/", body, "b1")
    build = Build.objects.get(public_id=response.json()["build_id"])
    assert run(build) == "triggered"

    [sent] = actions.bodies()
    assert sent["ref"] == "v1.2.0"
    assert sent["inputs"]["build_id"] == build.public_id
    assert sent["inputs"]["ref"] == "v1.2.0"
    assert len(actions.runs_of(build.public_id)) == 1


def test_a_dispatch_whose_answer_is_lost_is_found_and_not_made_again(api, actions):
    job = create(api)
    actions.plan(job.public_id, "lose")
    assert run(job) == "retry_scheduled"
    assert len(actions.runs_of(job.public_id)) == 1  # GitHub made it all the same
    assert run_when_due(job) == "triggered"

    [made] = actions.runs_of(job.public_id)
    job.refresh_from_db()
    assert job.status == "running"
    assert job.downstream["id"] == made["id"]
    assert outcomes(job) == [
        ("ambiguous", None, "RemoteProtocolError"),
        ("delivered", 200, ""),
    ]
    assert actions.calls == [("POST", DISPATCHES), ("GET", RUNS)]
    lookup = actions.http.requests[-1].query
    assert lookup["event"] == "workflow_dispatch"
    assert lookup["created"].startswith(">=")


def test_a_refused_dispatch_is_looked_up_then_made_once(api, actions):
    job = create(api)
    actions.plan(job.public_id, "502")
    assert run(job) == "retry_scheduled"
    assert actions.runs_of(job.public_id) == []
    assert run_when_due(job) == "triggered"

    assert len(actions.runs_of(job.public_id)) == 1
    assert actions.calls == [("POST", DISPATCHES), ("GET", RUNS), ("POST", DISPATCHES)]


def test_the_lookup_reads_every_page_and_matches_the_job_s_id_only(api, actions):
    job = create(api)
    for number in range(120):  # runs of others, newer than the job's
        actions.add_run("acme/shop", "deploy.yml", f"Deploy by hand {number}")
    actions.plan(job.public_id, "lose")
    assert run(job) == "retry_scheduled"
    for number in range(120):
        actions.add_run("acme/shop", "deploy.yml", f"Deploy dep_{number:024x}")
    assert run_when_due(job) == "triggered"

    assert len(actions.runs_of(job.public_id)) == 1
    # Newest first, 100 a page: 120 newer runs name other jobs, so its run is on the
    # second page.
    assert actions.calls.count(("GET", RUNS)) == 2
    job.refresh_from_db()
    assert job.downstream["id"] == actions.runs_of(job.public_id)[0]["id"]


def test_a_server_that_refuses_run_details_is_asked_without_and_remembered(api, ghes):
    first = create(api, "k1")
    assert run(first) == "triggered"

    assert ghes.calls == [("POST", DISPATCHES), ("POST", DISPATCHES)]
    refused, taken = ghes.bodies()
    assert refused["return_run_details"] is True
    assert "return_run_details" not in taken
    assert len(ghes.runs_of(first.public_id)) == 1
    first.refresh_from_db()
    assert (first.status, first.detail) == ("running", "triggered: HTTP 204")
    assert first.downstream is None  # known once its first workflow_run names it
    [attempt] = TriggerAttempt.objects.filter(job=first)
    assert (attempt.outcome, attempt.status_code) == ("delivered", 204)

    second = create(api, "k2")
    assert run(second) == "triggered"
    assert ghes.calls[2:] == [("POST", DISPATCHES)]  # asked without it at once
    assert "return_run_details" not in ghes.bodies()[-1]
    assert len(ghes.runs_of(second.public_id)) == 1


def test_a_job_without_a_workflow_file_is_rejected_with_no_request(api, actions):
    job = create(api, workflow="")
    assert run(job) == "failed"
    job.refresh_from_db()
    assert job.detail.startswith("trigger_rejected: the job names no workflow file")
    assert actions.calls == []


def test_an_unexpected_input_is_github_s_own_refusal(api, actions, monkeypatch):
    """A workflow that declares other inputs refuses the dispatch: the job fails with
    GitHub's message (the docs' workflow file declares exactly these)."""
    monkeypatch.setattr(
        "tests.deployments.fake_github_actions.DEPLOY_INPUTS", frozenset({"other"})
    )
    job = create(api)
    assert run(job) == "failed"
    job.refresh_from_db()
    assert job.detail.startswith("trigger_rejected: HTTP 422: Unexpected inputs")


# --- the run moves the job ---------------------------------------------------------------


def test_workflow_runs_move_the_job_to_its_conclusion_and_late_ones_never_back(
    api, actions, client
):
    github_source_create()
    job = create(api)
    assert run(job) == "triggered"
    [made] = actions.runs_of(job.public_id)
    start = datetime.now(UTC) + timedelta(seconds=2)

    event = deliver(
        client, actions.delivery(made, "in_progress", updated_at=start), "d-1"
    )
    assert event.processing_status == "processed"
    done = start + timedelta(seconds=30)
    event = deliver(
        client,
        actions.delivery(made, "completed", conclusion="success", updated_at=done),
        "d-2",
    )
    assert event.processing_status == "processed"
    job.refresh_from_db()
    assert (job.status, job.detail) == (
        "succeeded",
        f"workflow run {made['id']}: success",
    )
    assert api.get(f"/api/deployments/{job.public_id}/").json()["status"] == (
        "succeeded"
    )

    # Delivered late: GitHub does not promise order.
    late = deliver(
        client,
        actions.delivery(made, "requested", updated_at=start - timedelta(seconds=1)),
        "d-3",
    )
    assert late.processing_status == "ignored_out_of_order"
    job.refresh_from_db()
    assert job.status == "succeeded"
    # A re-run's progress never replaces the conclusion; its newer conclusion does.
    rerun = deliver(
        client,
        actions.delivery(
            made, "in_progress", updated_at=done + timedelta(seconds=60), run_attempt=2
        ),
        "d-4",
    )
    assert rerun.processing_status == "ignored_out_of_order"
    deliver(
        client,
        actions.delivery(
            made,
            "completed",
            conclusion="failure",
            updated_at=done + timedelta(seconds=90),
            run_attempt=2,
        ),
        "d-5",
    )
    job.refresh_from_db()
    assert (job.status, job.detail) == (
        "failed",
        f"workflow run {made['id']}: failure",
    )


@pytest.mark.parametrize(
    "conclusion", ["failure", "cancelled", "timed_out", "skipped", "neutral"]
)
def test_a_run_that_did_not_succeed_fails_the_job(api, actions, client, conclusion):
    github_source_create()
    job = create(api)
    assert run(job) == "triggered"
    [made] = actions.runs_of(job.public_id)
    later = datetime.now(UTC) + timedelta(seconds=5)
    deliver(
        client,
        actions.delivery(made, "completed", conclusion=conclusion, updated_at=later),
        "d-c",
    )
    job.refresh_from_db()
    assert (job.status, job.detail) == (
        "failed",
        f"workflow run {made['id']}: {conclusion}",
    )


def test_a_run_unknown_to_the_job_is_found_by_the_id_in_its_name(api, ghes, client):
    """A server without run details answers 204: the first delivery finds the job by the
    id its run's name carries, and the job keeps the run."""
    github_source_create()
    job = create(api)
    assert run(job) == "triggered"
    [made] = ghes.runs_of(job.public_id)
    later = datetime.now(UTC) + timedelta(seconds=5)

    deliver(client, ghes.delivery(made, "in_progress", updated_at=later), "d-1")

    job.refresh_from_db()
    assert job.downstream == {
        "system": "github-actions",
        "id": made["id"],
        "url": made["html_url"],
    }
    assert job.status == "running"


def test_runs_of_nobody_s_job_move_nothing(api, actions, client):
    github_source_create()
    job = create(api)
    assert run(job) == "triggered"
    [made] = actions.runs_of(job.public_id)
    later = datetime.now(UTC) + timedelta(seconds=5)
    by_hand = actions.add_run("acme/shop", "deploy.yml", "Deploy by hand")
    # Another run naming our job (started by hand with its id): the job holds its own.
    copycat = actions.add_run("acme/shop", "deploy.yml", f"Deploy {job.public_id}")
    elsewhere = {
        **made,
        "repository": {**made["repository"], "full_name": "acme/other"},
    }

    for number, stray in enumerate((by_hand, copycat, elsewhere)):
        event = deliver(
            client,
            actions.delivery(
                stray, "completed", conclusion="failure", updated_at=later
            ),
            f"d-{number}",
        )
        assert event.error_message == "no matching job", number
    job.refresh_from_db()
    assert job.status == "running"


@pytest.mark.parametrize(
    ("token", "expected"),
    [(GITHUB_TOKEN, "delivered"), ("ghp_wrong_token", "answered")],
)
def test_a_target_s_test_trigger_checks_its_token(actions, token, expected):
    """ "Send test trigger" of a github-actions target dispatches nothing: it asks GitHub
    whether the token is good (``GET /rate_limit``)."""
    target = DeployTarget(name="gha", executor="github-actions", url=actions.url)
    deploy_target_save(target=target, secret=token, actor=Actor.system())
    test = deploy_target_test_request(target=target, actor=Actor.system())

    assert deploy_target_test_run(test_id=test.pk, worker="w1") == expected
    assert actions.calls == [("GET", "/rate_limit")]
    assert actions.runs == []
