"""What the job and status sync bodies accept, member by member (docs/http-api.md,
"Deployments and builds"): ``repository`` as GitHub names repositories."""

import pytest

from deployments.models import Build, Deployment, StatusSync
from idempotency.models import IdempotencyRecord
from tests.deployments.factories import build_body, deployment_body
from tests.deployments.factories import idempotent_post as post

pytestmark = pytest.mark.django_db


def assert_refused(response, member: str) -> None:
    assert response.status_code == 422, response.content
    body = response.json()
    assert body["error"] == "invalid_payload"
    assert member in body["details"], body


def assert_nothing_recorded() -> None:
    assert not IdempotencyRecord.objects.exists()
    assert not Deployment.objects.exists()
    assert not Build.objects.exists()
    assert not StatusSync.objects.exists()


@pytest.mark.parametrize(
    "repository",
    [
        "acme/shop",
        "a/b",
        "Acme-Corp/Shop_Service.v2",
        "acme/.github",
        "acme/...",
        "acme/..x",
        "acme/.x",
        "_/-",
        "o" * 99 + "/" + "n" * 100,  # 200 characters: the most a repository holds
    ],
)
def test_a_repository_github_allows_is_accepted(api, repository):
    response = post(api, "/api/deployments/", deployment_body(repository=repository))
    assert response.status_code == 202, response.content
    assert response.json()["repository"] == repository.lower()


@pytest.mark.parametrize(
    "repository",
    [
        "acme/..",
        "acme/.",
        "../shop",
        "./shop",
        "..",
        "../..",
        "acme/shop/deployments",
        "acme/",
        "/shop",
        "acme",
        "acme/sh op",
        "acme/shop?x=1",
        "acme/shop#x",
        "acme/%2e%2e",
        "acme\\shop",
        "acme/" + "n" * 101,
        "o" * 101 + "/shop",
        "acme/\u212a",  # KELVIN SIGN: lower-cases to ASCII "k", but is not ASCII
    ],
)
def test_a_repository_github_does_not_allow_is_422(api, repository):
    response = post(api, "/api/deployments/", deployment_body(repository=repository))
    assert_refused(response, "repository")
    response = post(api, "/api/builds/", build_body(repository=repository))
    assert_refused(response, "repository")
    assert_nothing_recorded()
