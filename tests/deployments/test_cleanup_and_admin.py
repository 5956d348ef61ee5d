"""The read-only admin of the deployments app (and of the idempotency records it shows)."""

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
        deployment=deployment, from_status="queued", to_status="running", actor="w"
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
        deployment=deployment,
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
    assert response.content.count(b"processing (stuck)") == 1


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
