"""Routing jobs to deploy targets: the first enabled target by priority whose repository and
environment globs match; jobs no target matches go to ``DEPLOY_EXECUTOR``. Each attempt uses
its target's URL and secret as they are when it is made."""

from __future__ import annotations

import base64

import pytest

from core.actors import Actor
from deployments.models import Build, Deployment, DeployTarget, TriggerAttempt
from deployments.services.attempts import job_run
from deployments.targets import deploy_target_save
from tests.deployments.factories import build_body, deployment_body, idempotent_post
from tests.deployments.receiver import Fault, Receiver, closed_port_url
from tests.deployments.test_triggers import run_when_due

pytestmark = pytest.mark.django_db

OTHER_SECRET = "whsec_" + base64.b64encode(b"another receiver's key, 32 bytes").decode()


def target(name: str, *, secret: str = "", **fields) -> DeployTarget:
    made = DeployTarget(name=name, **fields)
    deploy_target_save(target=made, secret=secret, actor=Actor.system())
    return made


def create(api, key: str, path: str = "/api/deployments/", **overrides):
    builds = "builds" in path
    body = (build_body if builds else deployment_body)(**overrides)
    response = idempotent_post(api, path, body, key)
    assert response.status_code == 202
    if builds:
        return Build.objects.get(public_id=response.json()["build_id"])
    return Deployment.objects.get(public_id=response.json()["deployment_id"])


def run(job) -> str:
    kind = "build" if isinstance(job, Build) else "deployment"
    return job_run(kind=kind, public_id=job.public_id, worker="w1")


@pytest.fixture
def receivers(settings):
    settings.DEPLOY_EXECUTOR = "simulated"
    settings.DEPLOY_SIMULATED_SECONDS = 0
    settings.DEPLOY_HTTP_TIMEOUT_SECONDS = 1
    settings.DEPLOY_TRIGGER_RETRY_BASE_SECONDS = 0.01
    settings.DEPLOY_TRIGGER_RETRY_MAX_SECONDS = 0.05
    with Receiver(OTHER_SECRET) as deploys, Receiver() as builds, Receiver() as spare:
        target(
            "shop-external",
            repository_pattern="acme/shop",
            executor="external",
            priority=10,
        )
        target(
            "acme-prod",
            repository_pattern="acme/*",
            environment_pattern="prod*",
            executor="http",
            url=deploys.url,
            secret=OTHER_SECRET,
        )
        target(
            "everything-disabled",
            executor="http",
            url=closed_port_url(),
            secret=OTHER_SECRET,
            priority=1,
            is_enabled=False,
        )
        target(
            "acme-builds",
            repository_pattern="ACME/*",  # compared lower-cased
            executor="http",
            applies_to="builds",
            url=builds.url,
            secret=builds.secret,
        )
        yield {"deploys": deploys, "builds": builds, "spare": spare}


def test_jobs_go_to_the_first_matching_enabled_target_by_priority(api, receivers):
    shop = create(api, "1", repository="acme/shop", environment="production")
    api_prod = create(api, "2", repository="acme/api", environment="production")
    api_staging = create(api, "3", repository="acme/api", environment="staging")
    elsewhere = create(api, "4", repository="other/app", environment="production")
    build = create(api, "5", "/api/builds/", repository="acme/api")

    assert run(shop) == "external"
    assert run(api_prod) == "triggered"
    assert run(api_staging) == "succeeded"  # no target: DEPLOY_EXECUTOR (simulated)
    assert run(elsewhere) == "succeeded"
    assert run(build) == "triggered"

    routed = {
        job.public_id: (job.executor, job.target.name if job.target else None)
        for job in [*Deployment.objects.all(), *Build.objects.all()]
    }
    assert routed == {
        shop.public_id: ("external", "shop-external"),
        api_prod.public_id: ("http", "acme-prod"),
        api_staging.public_id: ("simulated", None),
        elsewhere.public_id: ("simulated", None),
        build.public_id: ("http", "acme-builds"),
    }
    # Each target's receiver got its own jobs, signed with its own secret.
    [deployed] = receivers["deploys"].received
    assert (deployed.webhook_id, deployed.verified) == (api_prod.public_id, True)
    [built] = receivers["builds"].received
    assert (built.webhook_id, built.verified) == (build.public_id, True)
    assert TriggerAttempt.objects.get(job=api_prod).target_name == "acme-prod"


def test_a_retry_goes_where_its_target_points_when_it_is_made(api, receivers):
    """An operator who fixes a target's URL while a job waits for its retry: the retry
    goes to the new URL, under the same id."""
    job = create(api, "1", repository="acme/api", environment="production")
    receivers["deploys"].plan(job.public_id, Fault.status(503))
    assert run(job) == "retry_scheduled"
    moved = DeployTarget.objects.get(name="acme-prod")
    moved.url = receivers["spare"].url
    deploy_target_save(
        target=moved, secret=receivers["spare"].secret, actor=Actor.system()
    )
    assert run_when_due(job) == "triggered"
    [retried] = receivers["spare"].received
    assert (retried.webhook_id, retried.verified) == (job.public_id, True)
    urls = list(
        TriggerAttempt.objects.filter(job=job)
        .order_by("number")
        .values_list("url", flat=True)
    )
    assert urls == [receivers["deploys"].url, receivers["spare"].url]
