"""The read-only admin of the deployments app (and of the idempotency records it shows)."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from deployments.models import JobTransition, StatusSync
from tests.deployments.factories import DeploymentFactory
from tests.idempotency.factories import IdempotencyRecordFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_http(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    client.force_login(user)
    return client


@pytest.fixture
def rows():
    deployment = DeploymentFactory()
    client = deployment.client
    JobTransition.objects.create(
        job=deployment, from_status="queued", to_status="running", actor="w"
    )
    IdempotencyRecordFactory(
        client=client,
        key="stuck",
        resource_id=deployment.public_id,
        created_at=timezone.now() - timedelta(hours=2),
        progress_deadline=timezone.now() - timedelta(minutes=5),
    )
    # Older still, but within its operation's deadline: not stuck.
    IdempotencyRecordFactory(
        client=client,
        key="long-running",
        created_at=timezone.now() - timedelta(hours=3),
        progress_deadline=timezone.now() + timedelta(minutes=5),
    )
    StatusSync.objects.create(
        client=client,
        job=deployment,
        status="running",
        reported_at=timezone.now(),
        applied=True,
        resulting_status="running",
    )
    return deployment


@pytest.mark.parametrize(
    "model",
    [
        "deployments/deployment",
        "deployments/build",
        "idempotency/idempotencyrecord",
        "deployments/statussync",
    ],
)
def test_changelists_render_and_search(admin_http, rows, model):
    url = f"/admin/{model}/"
    assert admin_http.get(url).status_code == 200
    assert admin_http.get(url, {"q": "k"}).status_code == 200
    assert admin_http.get(f"{url}add/").status_code == 403


def test_deployment_detail_shows_transitions_read_only(admin_http, rows):
    response = admin_http.get(f"/admin/deployments/deployment/{rows.pk}/change/")
    assert response.status_code == 200
    assert b"running" in response.content
    assert b'name="_save"' not in response.content


def test_stuck_processing_records_are_highlighted(admin_http, rows):
    response = admin_http.get("/admin/idempotency/idempotencyrecord/")
    assert response.content.count(b"Processing (stuck)") == 1


def test_filters_render(admin_http, rows):
    assert (
        admin_http.get(
            "/admin/deployments/deployment/", {"status": "queued"}
        ).status_code
        == 200
    )
    assert (
        admin_http.get(
            "/admin/idempotency/idempotencyrecord/", {"status": "processing"}
        ).status_code
        == 200
    )


def transitions_make(deployment, count: int, *, detail: str = "") -> None:
    start = timezone.now() - timedelta(hours=1)
    JobTransition.objects.bulk_create(
        JobTransition(
            job=deployment,
            from_status="running",
            to_status="running",
            at=start + timedelta(seconds=n),
            actor=f"actor-{n:04d}",
            detail=detail,
        )
        for n in range(count)
    )


def actors_shown(response) -> list[int]:
    return [int(found) for found in re.findall(rb"actor-(\d{4})", response.content)]


def test_a_jobs_transitions_are_paged_on_its_admin_page(admin_http):
    deployment = DeploymentFactory()
    transitions_make(deployment, 120)
    url = f"/admin/deployments/deployment/{deployment.pk}/change/"

    first = admin_http.get(url)
    assert first.status_code == 200
    assert actors_shown(first) == list(range(50))  # oldest first
    assert b"120 job transitions" in first.content
    assert b"?transitions_page=2" in first.content

    last = admin_http.get(url, {"transitions_page": 3})
    assert actors_shown(last) == list(range(100, 120))
    assert b"?transitions_page=2" in last.content

    # A page out of range or not a number is the nearest page, never an error.
    assert actors_shown(admin_http.get(url, {"transitions_page": 99})) == list(
        range(100, 120)
    )
    assert actors_shown(admin_http.get(url, {"transitions_page": "x"})) == list(
        range(50)
    )


def test_long_details_stored_before_the_limit_do_not_swell_the_page(admin_http):
    # Ten reports of 2 MB each made one deployment's page 22 MB.
    deployment = DeploymentFactory(detail="d" * 2_000_000)
    transitions_make(deployment, 10, detail="t" * 2_000_000)
    response = admin_http.get(f"/admin/deployments/deployment/{deployment.pk}/change/")
    assert response.status_code == 200
    assert len(response.content) < 200_000
    assert actors_shown(response) == list(range(10))
    assert b"t" * 1000 in response.content
    assert b"t" * 1001 not in response.content
    assert b"d" * 1000 in response.content
    assert b"d" * 1001 not in response.content
    assert b"2000000 characters" in response.content
