"""What the job and status sync bodies accept, member by member (docs/http-api.md,
"Deployments and builds", "Strings"): ``repository`` as GitHub names repositories, and every
member a JSON string taken as sent: a number, a boolean or null where a string is expected
is 422 ``invalid_payload`` naming the member, never coerced, and nothing is recorded."""

import pytest

from deployments.models import Build, Deployment, StatusSync
from idempotency.models import IdempotencyRecord
from tests.deployments.factories import build_body, deployment_body
from tests.deployments.factories import idempotent_post as post

pytestmark = pytest.mark.django_db

NOT_STRINGS = [0, 7, 1.5, -1, True, False, None, [], {}]


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
        " acme/shop",
        "acme/shop\n",
    ],
)
def test_a_repository_github_does_not_allow_is_422(api, repository):
    response = post(api, "/api/deployments/", deployment_body(repository=repository))
    assert_refused(response, "repository")
    response = post(api, "/api/builds/", build_body(repository=repository))
    assert_refused(response, "repository")
    assert_nothing_recorded()


DEPLOYMENT_STRINGS = ["repository", "commit_sha", "environment", "workflow"]
DEPLOYMENT_STRINGS += ["triggered_by"]
BUILD_STRINGS = ["repository", "commit_sha", "ref", "workflow", "triggered_by"]


@pytest.mark.parametrize("value", NOT_STRINGS)
@pytest.mark.parametrize("member", DEPLOYMENT_STRINGS)
def test_a_deployment_member_that_is_not_a_string_is_422(api, member, value):
    response = post(api, "/api/deployments/", deployment_body(**{member: value}))
    assert_refused(response, member)
    assert_nothing_recorded()


@pytest.mark.parametrize("value", NOT_STRINGS)
@pytest.mark.parametrize("member", BUILD_STRINGS)
def test_a_build_member_that_is_not_a_string_is_422(api, member, value):
    response = post(api, "/api/builds/", build_body(**{member: value}))
    assert_refused(response, member)
    assert_nothing_recorded()


def test_an_environment_given_as_a_number_is_not_environment_0(api):
    """The report's case: ``"environment": 0`` made a deployment in environment "0"."""
    response = post(api, "/api/deployments/", deployment_body(environment=0))
    assert_refused(response, "environment")
    assert response.json()["details"]["environment"] == ["Not a valid string."]
    assert_nothing_recorded()
    response = post(api, "/api/deployments/", deployment_body(environment="0"))
    assert response.status_code == 202
    assert response.json()["environment"] == "0"


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("commit_sha", " abc1234"),
        ("commit_sha", "abc1234\n"),
        ("environment", "staging "),
        ("environment", "staging\n"),
        ("repository", "acme/shop "),
    ],
)
def test_a_rule_holds_for_the_string_as_sent_not_trimmed(api, member, value):
    response = post(api, "/api/deployments/", deployment_body(**{member: value}))
    assert_refused(response, member)
    assert_nothing_recorded()


def test_free_text_is_kept_as_sent(api):
    body = deployment_body(workflow=" deploy.yml ", triggered_by="  ")
    response = post(api, "/api/deployments/", body)
    assert response.status_code == 202
    deployment = Deployment.objects.get()
    assert (deployment.workflow, deployment.triggered_by) == (" deploy.yml ", "  ")


@pytest.fixture
def deployment(api):
    body = post(api, "/api/deployments/", deployment_body(), "create-1").json()
    return Deployment.objects.get(public_id=body["deployment_id"])


@pytest.mark.parametrize("value", NOT_STRINGS)
@pytest.mark.parametrize("member", ["deployment_id", "status", "reported_at", "detail"])
def test_a_status_sync_member_that_is_not_a_string_is_422(
    api, deployment, member, value
):
    body = {
        "deployment_id": deployment.public_id,
        "status": "running",
        "reported_at": "2026-01-01T00:00:00Z",
        "detail": "from the pipeline",
        member: value,
    }
    response = post(api, "/api/status-sync/", body, "sync-1")
    assert_refused(response, member)
    assert not StatusSync.objects.exists()
    assert not IdempotencyRecord.objects.filter(operation_type="status.sync").exists()


@pytest.mark.parametrize("value", NOT_STRINGS)
def test_a_build_id_that_is_not_a_string_is_422(api, value):
    body = {"build_id": value, "status": "running", "reported_at": "2026-01-01T00:00Z"}
    response = post(api, "/api/status-sync/", body, "sync-1")
    assert_refused(response, "build_id")
    assert_nothing_recorded()


@pytest.mark.parametrize("target", ["deployment_id", "build_id"])
def test_an_empty_target_id_is_422_not_404(api, target):
    body = {target: "", "status": "running", "reported_at": "2026-01-01T00:00:00Z"}
    response = post(api, "/api/status-sync/", body, "sync-1")
    assert_refused(response, target)
