"""Deploy targets and the API clients they serve (docs/security.md, "Deploy targets and API
clients"): a target that names clients routes only their jobs; a job is never routed to a
target that names other clients, and goes on to the next matching target, else
``DEPLOY_EXECUTOR``, as if that target did not exist; an unnamed target serves every client
(a single tenant). Naming clients is a setting like the others: in the admin, in the
operator action's settings before and after (by name and id)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from core.actors import Actor
from core.models import ApiClient
from deployments.models import Deployment, DeployTarget, TriggerAttempt
from deployments.services.attempts import job_run
from deployments.targets import deploy_target_save
from tests.core.factories import api_client_make, bearer_http
from tests.deployments.factories import (
    deployment_body,
    idempotent_post,
    retry_come_due,
)
from tests.deployments.receiver import RECEIVER_SECRET, Fault, Receiver
from tests.deployments.test_trigger_workers import FAST, wait_for
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

ADD = reverse("admin:deployments_deploytarget_add")
CHANGELIST = reverse("admin:deployments_deploytarget_changelist")


def target(name: str, *, clients=(), **fields) -> DeployTarget:
    made = DeployTarget(name=name, **fields)
    deploy_target_save(
        target=made,
        secret=RECEIVER_SECRET if made.executor == "http" else "",
        clients=list(clients),
        actor=Actor.system(),
    )
    return made


def create(http, key: str, **overrides) -> Deployment:
    body = deployment_body(**{"environment": "production", **overrides})
    response = idempotent_post(http, "/api/deployments/", body, key)
    assert response.status_code == 202, response.content
    return Deployment.objects.get(public_id=response.json()["deployment_id"])


def run(job: Deployment) -> str:
    return job_run(kind="deployment", public_id=job.public_id, worker="w1")


def routed(job: Deployment) -> tuple[str, str | None]:
    job.refresh_from_db()
    return job.executor, job.target.name if job.target_id else None


@pytest.fixture
def tenants(settings, api, other_api):
    settings.DEPLOY_EXECUTOR = "simulated"
    settings.DEPLOY_SIMULATED_SECONDS = 0
    settings.DEPLOY_HTTP_TIMEOUT_SECONDS = 1
    return {
        "ci": (ApiClient.objects.get(name="ci"), api),
        "other": (ApiClient.objects.get(name="other"), other_api),
    }


def test_a_target_that_names_clients_routes_only_their_jobs(tenants):
    (ci, ci_http), (other, other_http) = tenants["ci"], tenants["other"]
    with Receiver() as ci_receiver, Receiver() as other_receiver:
        # The other tenant's target comes first by priority, and matches ci's jobs too.
        target(
            "other-prod",
            repository_pattern="acme/*",
            environment_pattern="prod*",
            executor="http",
            url=other_receiver.url,
            priority=10,
            clients=[other],
        )
        target(
            "ci-prod",
            repository_pattern="acme/*",
            environment_pattern="prod*",
            executor="http",
            url=ci_receiver.url,
            priority=20,
            clients=[ci],
        )
        ci_job = create(ci_http, "a1", repository="acme/shop")
        other_job = create(other_http, "b1", repository="acme/shop")
        assert run(ci_job) == "triggered"
        assert run(other_job) == "triggered"

    assert routed(ci_job) == ("http", "ci-prod")
    assert routed(other_job) == ("http", "other-prod")
    assert ci_receiver.ids() == {ci_job.public_id}
    assert other_receiver.ids() == {other_job.public_id}
    assert TriggerAttempt.objects.get(job=ci_job).target_name == "ci-prod"


def test_a_job_goes_past_the_targets_of_other_clients(tenants):
    """Those targets are not the job's: it goes on to the next matching target, else
    DEPLOY_EXECUTOR, as if they did not exist (nothing about them reaches the client)."""
    (ci, ci_http), (other, other_http) = tenants["ci"], tenants["other"]
    with Receiver() as other_receiver, Receiver() as shared:
        target(
            "other-prod",
            repository_pattern="acme/*",
            executor="http",
            url=other_receiver.url,
            priority=10,
            clients=[other],
        )
        alone = create(ci_http, "a1", repository="acme/shop")
        assert run(alone) == "succeeded"  # DEPLOY_EXECUTOR: simulated
        assert routed(alone) == ("simulated", None)
        assert alone.detail == "simulated"

        target(
            "everyone",
            repository_pattern="*",
            executor="http",
            url=shared.url,
            priority=50,
        )
        target(
            "both-staging",
            repository_pattern="acme/*",
            environment_pattern="staging",
            executor="external",
            priority=5,
            clients=[ci, other],
        )
        unnamed = create(ci_http, "a2", repository="acme/shop")
        assert run(unnamed) == "triggered"
        assert routed(unnamed) == ("http", "everyone")
        staged = create(ci_http, "a3", repository="acme/shop", environment="staging")
        assert run(staged) == "external"
        assert routed(staged) == ("external", "both-staging")
        theirs = create(other_http, "b1", repository="acme/shop")
        assert run(theirs) == "triggered"
        assert routed(theirs) == ("http", "other-prod")

    assert other_receiver.ids() == {theirs.public_id}
    assert shared.ids() == {unnamed.public_id}


def test_an_operator_names_the_clients_of_a_target_and_the_trail_says_so(
    operator_client, auditor_client, tenants
):
    ci, other = tenants["ci"][0], tenants["other"][0]
    data = {
        "name": "shop-prod",
        "executor": "external",
        "repository_pattern": "acme/*",
        "environment_pattern": "prod*",
        "applies_to": "",
        "priority": "100",
        "url": "",
        "secret": "",
        "is_enabled": "on",
        "clients": [str(ci.pk)],
    }
    response = operator_client.post(ADD, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    made = DeployTarget.objects.get(name="shop-prod")
    assert list(made.clients.all()) == [ci]
    created = OperatorAction.objects.get(action="create_deploy_target")
    assert created.details["after"]["clients"] == [{"id": ci.pk, "name": "ci"}]

    change = reverse("admin:deployments_deploytarget_change", args=[made.pk])
    operator_client.post(change, data)  # unchanged: nothing recorded
    assert not OperatorAction.objects.filter(action="change_deploy_target").exists()
    response = operator_client.post(
        change, {**data, "clients": [str(ci.pk), str(other.pk)]}
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert set(made.clients.all()) == {ci, other}
    changed = OperatorAction.objects.get(action="change_deploy_target")
    assert changed.details["before"]["clients"] == [{"id": ci.pk, "name": "ci"}]
    assert changed.details["after"]["clients"] == [
        {"id": ci.pk, "name": "ci"},
        {"id": other.pk, "name": "other"},
    ]
    operator_client.post(change, {**data, "clients": []})
    assert not made.clients.exists()
    last = OperatorAction.objects.filter(action="change_deploy_target").latest("id")
    assert last.details["after"]["clients"] == []

    # The list says whom each target serves, and filters by client.
    target("ci-only", executor="external", clients=[ci])
    page = auditor_client.get(CHANGELIST).content.decode()
    assert "every client" in page
    filtered = auditor_client.get(CHANGELIST, {"clients__id__exact": ci.pk})
    assert [t.name for t in filtered.context["cl"].result_list] == ["ci-only"]
    unnamed = auditor_client.get(CHANGELIST, {"clients__isnull": "True"})
    assert [t.name for t in unnamed.context["cl"].result_list] == ["shop-prod"]
    shown = auditor_client.get(
        reverse("admin:deployments_deploytarget_change", args=[made.pk])
    )
    assert shown.status_code == 200
    assert (
        auditor_client.post(change, {**data, "clients": [str(ci.pk)]}).status_code
        == 403
    )
    assert not made.clients.exists()


def test_a_job_s_page_shows_its_route(tenants, admin_client):
    ci, ci_http = tenants["ci"]
    target("ci-external", executor="external", clients=[ci])
    routed_job = create(ci_http, "a1")
    default_job = create(tenants["other"][1], "b1")
    page = reverse("admin:deployments_deployment_change", args=[routed_job.pk])
    assert "not routed yet" in admin_client.get(page).content.decode()
    run(routed_job)
    run(default_job)
    text = admin_client.get(page).content.decode()
    assert "ci-external" in text
    assert "serves ci" in text
    other_page = reverse("admin:deployments_deployment_change", args=[default_job.pk])
    assert (
        "DEPLOY_EXECUTOR (simulated)" in admin_client.get(other_page).content.decode()
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_on_a_real_worker_a_client_s_job_never_reaches_another_client_s_receiver(
    workers,
):
    a, a_token = api_client_make(name="tenant-a")
    b, b_token = api_client_make(name="tenant-b")
    a_http, b_http = bearer_http(a_token), bearer_http(b_token)
    with Receiver() as a_receiver, Receiver() as b_receiver:
        # B's target comes first and matches every acme repository; A's matches one.
        target(
            "tenant-b-prod",
            repository_pattern="acme/*",
            environment_pattern="prod*",
            executor="http",
            url=b_receiver.url,
            priority=10,
            clients=[b],
        )
        target(
            "tenant-a-shop",
            repository_pattern="acme/shop",
            environment_pattern="prod*",
            executor="http",
            url=a_receiver.url,
            priority=20,
            clients=[a],
        )
        a_jobs = [create(a_http, f"a-{n}", repository="acme/shop") for n in range(3)]
        a_elsewhere = create(a_http, "a-api", repository="acme/api")
        b_jobs = [create(b_http, f"b-{n}", repository="acme/shop") for n in range(3)]
        workers.start(
            concurrency=2,
            env={
                **FAST,
                "DEPLOY_EXECUTOR": "simulated",
                "DEPLOY_SIMULATED_SECONDS": "0",
            },
        )
        wait_for(
            workers,
            [*a_jobs, *b_jobs, a_elsewhere],
            lambda job: job.status in {"running", "succeeded", "failed"},
            timeout=90,
            what="every job routed and carried out",
        )

    assert a_receiver.ids() == {job.public_id for job in a_jobs}
    assert b_receiver.ids() == {job.public_id for job in b_jobs}
    assert all(r.verified for r in [*a_receiver.received, *b_receiver.received])
    for job in a_jobs:
        assert (job.status, job.target.name) == ("running", "tenant-a-shop")
    for job in b_jobs:
        assert (job.status, job.target.name) == ("running", "tenant-b-prod")
    # Only B's target matches acme/api: A's job goes past it, to DEPLOY_EXECUTOR.
    assert (a_elsewhere.status, a_elsewhere.executor, a_elsewhere.target) == (
        "succeeded",
        "simulated",
        None,
    )


def test_a_retry_never_goes_to_a_target_that_no_longer_serves_the_job_s_client(
    tenants,
):
    """An operator who names the clients of a target while one of another client's jobs
    waits for its retry there: that retry is not sent, and the job fails (its client may
    request it again, and it is routed afresh)."""
    ci_http, other = tenants["ci"][1], tenants["other"][0]
    with Receiver() as receiver:
        shared = target("shared", executor="http", url=receiver.url)
        job = create(ci_http, "a1")
        receiver.plan(job.public_id, Fault.status(503))
        assert run(job) == "retry_scheduled"
        deploy_target_save(
            target=DeployTarget.objects.get(pk=shared.pk),
            secret=None,
            clients=[other],
            actor=Actor.system(),
        )
        retry_come_due(job)
        assert run(job) == "failed"
    job.refresh_from_db()
    assert job.status == "failed"
    assert job.detail == (
        "trigger_rejected: its deploy target no longer serves this API client"
    )
    assert len(receiver.requests_for(job.public_id)) == 1
    assert TriggerAttempt.objects.filter(job=job).count() == 1
