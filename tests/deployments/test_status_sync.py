"""POST /api/status-sync/: the same Idempotency-Key contract, and the ordering rule."""

from datetime import timedelta

import pytest
from django.utils import timezone

from deployments.models import Deployment, JobTransition, StatusSync
from idempotency.models import IdempotencyRecord
from tests.deployments.factories import build_body, deployment_body
from tests.deployments.factories import idempotent_post as post

pytestmark = pytest.mark.django_db


@pytest.fixture
def deployment(api):
    body = post(api, "/api/deployments/", deployment_body(), "create-1").json()
    return Deployment.objects.get(public_id=body["deployment_id"])


def sync(api, deployment, status, at, key):
    return post(
        api,
        "/api/status-sync/",
        {
            "deployment_id": deployment.public_id,
            "status": status,
            "reported_at": at.isoformat(),
            "detail": "from the pipeline",
        },
        key,
    )


def test_applies_a_newer_report_and_answers_201(api, deployment):
    at = timezone.now() + timedelta(seconds=5)
    response = sync(api, deployment, "running", at, "s1")
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"status_sync_id", "applied", "current_status"}
    assert body["applied"] is True
    assert body["current_status"] == "running"
    deployment.refresh_from_db()
    assert deployment.status == "running"
    transition = JobTransition.objects.get(job=deployment)
    assert (transition.from_status, transition.to_status) == ("queued", "running")
    assert transition.actor == "status-sync:ci"
    assert StatusSync.objects.get().applied is True


def test_replay_and_conflict_come_from_the_shared_mechanism(api, deployment):
    at = timezone.now() + timedelta(seconds=5)
    first = sync(api, deployment, "running", at, "s1")
    replay = sync(api, deployment, "running", at, "s1")
    assert replay.status_code == 200
    assert replay.content == first.content
    assert replay["Idempotent-Replayed"] == "true"
    assert StatusSync.objects.count() == 1

    conflict = sync(api, deployment, "failed", at, "s1")
    assert conflict.status_code == 409
    assert conflict.json() == {
        "error": "idempotency_key_reused",
        "differing_fields": ["status"],
    }
    assert IdempotencyRecord.objects.filter(operation_type="status.sync").count() == 1


def test_an_older_report_is_not_applied(api, deployment):
    now = timezone.now()
    assert sync(api, deployment, "running", now + timedelta(seconds=10), "a").json()[
        "applied"
    ]
    older = sync(api, deployment, "queued", now + timedelta(seconds=5), "b").json()
    assert older == {
        "status_sync_id": older["status_sync_id"],
        "applied": False,
        "current_status": "running",
    }
    deployment.refresh_from_db()
    assert deployment.status == "running"


def test_a_report_older_than_the_creation_is_not_applied(api, deployment):
    body = sync(api, deployment, "running", timezone.now() - timedelta(hours=1), "a")
    assert body.status_code == 201
    assert body.json()["applied"] is False
    assert body.json()["current_status"] == "queued"


def test_a_non_terminal_never_replaces_a_terminal(api, deployment):
    now = timezone.now()
    assert sync(api, deployment, "succeeded", now + timedelta(seconds=1), "a").json()[
        "applied"
    ]
    later = sync(api, deployment, "running", now + timedelta(seconds=60), "b").json()
    assert later["applied"] is False
    assert later["current_status"] == "succeeded"


def test_a_newer_terminal_replaces_an_older_terminal(api, deployment):
    now = timezone.now()
    sync(api, deployment, "failed", now + timedelta(seconds=1), "a")
    later = sync(api, deployment, "succeeded", now + timedelta(seconds=2), "b").json()
    assert later["applied"] is True
    assert later["current_status"] == "succeeded"
    assert list(
        JobTransition.objects.filter(job=deployment)
        .order_by("id")
        .values_list("from_status", "to_status")
    ) == [("queued", "failed"), ("failed", "succeeded")]
    record = IdempotencyRecord.objects.get(resource_id=deployment.public_id)
    assert record.status == "succeeded"


def test_builds_can_be_synced(api):
    build = post(api, "/api/builds/", build_body(), "b-1").json()
    response = post(
        api,
        "/api/status-sync/",
        {
            "build_id": build["build_id"],
            "status": "failed",
            "reported_at": (timezone.now() + timedelta(seconds=1)).isoformat(),
        },
        "s-b",
    )
    assert response.status_code == 201
    assert response.json()["current_status"] == "failed"


def test_another_clients_target_is_404_and_nothing_recorded(other_api, deployment):
    response = sync(other_api, deployment, "failed", timezone.now(), "s1")
    assert response.status_code == 404
    assert response.json() == {"error": "not_found"}
    assert not IdempotencyRecord.objects.filter(operation_type="status.sync").exists()
    deployment.refresh_from_db()
    assert deployment.status == "queued"


@pytest.mark.parametrize(
    "body",
    [
        {"status": "running", "reported_at": "2026-01-01T00:00:00Z"},
        {
            "deployment_id": "dep_x",
            "build_id": "bld_x",
            "status": "running",
            "reported_at": "2026-01-01T00:00:00Z",
        },
        {
            "deployment_id": "dep_x",
            "status": "done",
            "reported_at": "2026-01-01T00:00Z",
        },
        {"deployment_id": "dep_x", "status": "running", "reported_at": "yesterday"},
    ],
)
def test_invalid_reports_are_422(api, body):
    response = post(api, "/api/status-sync/", body, "s1")
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_payload"
    assert not IdempotencyRecord.objects.filter(operation_type="status.sync").exists()


def test_status_sync_needs_a_key_and_a_token(api, deployment):
    body = {"deployment_id": deployment.public_id}
    response = post(api, "/api/status-sync/", body, key=None)
    assert response.status_code == 400
    assert response.json() == {"error": "idempotency_key_required"}


def test_a_report_from_the_future_is_422(api, deployment):
    response = sync(
        api, deployment, "succeeded", timezone.now() + timedelta(hours=1), "f"
    )
    assert response.status_code == 422
    assert "reported_at" in response.json()["details"]
    deployment.refresh_from_db()
    assert deployment.status == "queued"


def report(deployment, detail) -> dict:
    return {
        "deployment_id": deployment.public_id,
        "status": "running",
        "reported_at": timezone.now().isoformat(),
        "detail": detail,
    }


def test_a_detail_of_the_documented_length_is_recorded(api, deployment):
    detail = "é" * 1000  # characters, not bytes
    response = post(api, "/api/status-sync/", report(deployment, detail), "d1")
    assert response.status_code == 201
    assert StatusSync.objects.get().detail == detail
    assert JobTransition.objects.get(job=deployment).detail == detail


@pytest.mark.parametrize("length", [1001, 2_000_000])
def test_a_detail_over_the_limit_is_422_and_nothing_is_recorded(
    api, deployment, length
):
    response = post(api, "/api/status-sync/", report(deployment, "x" * length), "d1")
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "invalid_payload"
    assert list(body["details"]) == ["detail"]
    assert not StatusSync.objects.exists()
    assert not JobTransition.objects.filter(job=deployment).exists()
    assert not IdempotencyRecord.objects.filter(operation_type="status.sync").exists()
    deployment.refresh_from_db()
    assert (deployment.status, deployment.detail) == ("queued", "")


def detail_of(api, deployment) -> str:
    return api.get(f"/api/deployments/{deployment.public_id}/").json()["detail"]


def test_the_job_answers_the_reason_of_its_latest_transition(api, deployment):
    """``detail``: "" while nothing has happened, then the reason the latest transition
    gave, "" again when the latest one gave none."""
    assert detail_of(api, deployment) == ""
    now = timezone.now()
    failed = {
        "deployment_id": deployment.public_id,
        "status": "failed",
        "reported_at": (now + timedelta(seconds=1)).isoformat(),
        "detail": "smoke tests failed",
    }
    assert post(api, "/api/status-sync/", failed, "d1").status_code == 201
    assert detail_of(api, deployment) == "smoke tests failed"
    succeeded = {
        "deployment_id": deployment.public_id,
        "status": "succeeded",
        "reported_at": (now + timedelta(seconds=2)).isoformat(),
    }
    assert post(api, "/api/status-sync/", succeeded, "d2").status_code == 201
    assert detail_of(api, deployment) == ""
