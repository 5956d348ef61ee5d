"""The idempotency cleanup task, and the read-only admin of the deployments app."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from core.services import api_client_create
from deployments.models import Deployment, JobTransition, StatusSync
from idempotency.models import IdempotencyRecord
from idempotency.tasks import idempotency_cleanup_task

pytestmark = pytest.mark.django_db


def record_make(client, key, **fields):
    defaults = {
        "client": client,
        "operation_type": "deployment.create",
        "key": key,
        "fingerprint": "f" * 64,
        "expires_at": timezone.now() + timedelta(days=1),
    }
    defaults.update(fields)
    return IdempotencyRecord.objects.create(**defaults)


@override_settings(IDEMPOTENCY_AUDIT_RETENTION_SECONDS=3600)
def test_cleanup_marks_expired_keys_and_purges_past_retention():
    client, _ = api_client_create(name="c")
    now = timezone.now()
    live = record_make(client, "live")
    due = record_make(client, "due", expires_at=now - timedelta(seconds=1))
    kept = record_make(
        client,
        "kept",
        expires_at=now - timedelta(minutes=30),
        expired_at=now - timedelta(minutes=30),
    )
    old = record_make(
        client,
        "old",
        expires_at=now - timedelta(hours=2),
        expired_at=now - timedelta(hours=2),
    )

    assert idempotency_cleanup_task.apply().get() == {"expired": 1, "purged": 1}

    live.refresh_from_db()
    due.refresh_from_db()
    assert live.expired_at is None
    assert due.expired_at is not None
    assert IdempotencyRecord.objects.filter(pk=kept.pk).exists()
    assert not IdempotencyRecord.objects.filter(pk=old.pk).exists()
    assert idempotency_cleanup_task.apply().get() == {"expired": 0, "purged": 0}


@pytest.fixture
def admin_http(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    client.force_login(user)
    return client


@pytest.fixture
def rows():
    client, _ = api_client_create(name="c")
    deployment = Deployment.objects.create(
        client=client,
        idempotency_key="k",
        repository="acme/x",
        commit_sha="abcdef1",
        environment="staging",
    )
    JobTransition.objects.create(
        deployment=deployment, from_status="queued", to_status="running", actor="w"
    )
    record_make(
        client,
        "stuck",
        resource_id=deployment.public_id,
        created_at=timezone.now() - timedelta(hours=2),
        progress_deadline=timezone.now() - timedelta(minutes=5),
    )
    # Older still, but within its operation's deadline: not stuck.
    record_make(
        client,
        "long-running",
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
