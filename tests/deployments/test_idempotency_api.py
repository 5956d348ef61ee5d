"""The Idempotency-Key contract of POST /api/deployments/ and /api/builds/ (docs/http-api.md)."""

from datetime import timedelta

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from deployments.models import Build, Deployment
from idempotency.metrics import IDEMPOTENCY_REQUESTS
from idempotency.models import IdempotencyRecord
from tests.core.factories import bearer_http
from tests.deployments.factories import build_body, deployment_body
from tests.deployments.factories import idempotent_post as post
from tests.idempotency.factories import idempotency_records_aged

pytestmark = pytest.mark.django_db


def metric(operation, outcome) -> float:
    return IDEMPOTENCY_REQUESTS.labels(operation, outcome)._value.get()


def test_first_request_is_accepted_with_location_and_queued_deployment(api):
    before = metric("deployment.create", "new")
    response = post(api, "/api/deployments/", deployment_body())

    assert response.status_code == 202
    body = response.json()
    deployment = Deployment.objects.get()
    assert body["deployment_id"] == deployment.public_id
    assert body["deployment_id"].startswith("dep_")
    assert body["status"] == "queued"
    assert body["idempotency_key"] == "key-1"
    assert body["repository"] == "acme/payment-service"
    assert body["environment"] == "staging"
    assert response["Location"] == f"/api/deployments/{deployment.public_id}/"
    assert "Idempotent-Replayed" not in response
    record = IdempotencyRecord.objects.get()
    assert record.operation_type == "deployment.create"
    assert record.resource_id == deployment.public_id
    assert record.status == "processing"
    assert bytes(record.response_body) == response.content
    assert metric("deployment.create", "new") == before + 1


def test_retry_replays_the_first_response_byte_for_byte(api):
    first = post(api, "/api/deployments/", deployment_body())
    before = metric("deployment.create", "replayed")
    # triggered_by is not part of the fingerprint: still the same operation
    retry = post(api, "/api/deployments/", deployment_body(triggered_by="a-human"))

    assert retry.status_code == 200
    assert retry.content == first.content
    assert retry["Location"] == first["Location"]
    assert retry["Idempotent-Replayed"] == "true"
    assert Deployment.objects.count() == 1
    assert IdempotencyRecord.objects.count() == 1
    assert metric("deployment.create", "replayed") == before + 1


def test_repository_and_sha_case_do_not_change_the_fingerprint(api):
    first = post(api, "/api/deployments/", deployment_body())
    retry = post(
        api,
        "/api/deployments/",
        deployment_body(repository="ACME/Payment-Service", commit_sha="ABC123DEF456"),
    )
    assert retry.status_code == 200
    assert retry.content == first.content


def test_same_key_other_fingerprint_is_409_naming_the_fields(api):
    post(api, "/api/deployments/", deployment_body())
    before = metric("deployment.create", "conflict")
    response = post(
        api,
        "/api/deployments/",
        deployment_body(commit_sha="0123456789abcdef", environment="production"),
    )

    assert response.status_code == 409
    assert response.json() == {
        "error": "idempotency_key_reused",
        "differing_fields": ["commit_sha", "environment"],
    }
    assert Deployment.objects.count() == 1
    assert metric("deployment.create", "conflict") == before + 1


@pytest.mark.parametrize(
    ("key", "error"),
    [
        (None, "idempotency_key_required"),
        ("", "idempotency_key_required"),
        ("x" * 256, "invalid_idempotency_key"),
        ("caf\u00e9", "invalid_idempotency_key"),
        ("tab\there", "invalid_idempotency_key"),
    ],
)
def test_missing_or_invalid_key_is_400_and_nothing_is_recorded(api, key, error):
    response = post(api, "/api/deployments/", deployment_body(), key=key)
    assert response.status_code == 400
    assert response.json() == {"error": error}
    assert not Deployment.objects.exists()
    assert not IdempotencyRecord.objects.exists()


def test_longest_valid_key_and_punctuation_are_accepted(api):
    key = "~!/ ?#%" + "k" * 248
    response = post(api, "/api/deployments/", deployment_body(), key=key)
    assert response.status_code == 202
    assert response.json()["idempotency_key"] == key


def test_without_token_is_401(db):
    response = post(APIClient(), "/api/deployments/", deployment_body())
    assert response.status_code == 401
    assert response.json() == {"error": "unauthorized"}
    response = post(bearer_http("not-a-token"), "/api/deployments/", deployment_body())
    assert response.status_code == 401
    assert response.json() == {"error": "unauthorized"}
    assert not IdempotencyRecord.objects.exists()


@pytest.mark.parametrize("raw", [b"{not json", b'{"repository": ', b"\xff\xfe"])
def test_bad_json_is_400_and_nothing_is_recorded(api, raw):
    response = api.post(
        "/api/deployments/",
        data=raw,
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="key-1",
    )
    assert response.status_code == 400
    assert response.json() == {"error": "invalid_json"}
    assert not IdempotencyRecord.objects.exists()
    assert not Deployment.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"repository": "no-slash"}, "repository"),
        ({"commit_sha": "abc12"}, "commit_sha"),
        ({"commit_sha": "z" * 40}, "commit_sha"),
        ({"commit_sha": "a" * 41}, "commit_sha"),
        ({"environment": "not a slug"}, "environment"),
        ({"environment": None}, "environment"),
    ],
)
def test_invalid_payload_is_422_with_details_and_nothing_is_recorded(
    api, overrides, field
):
    response = post(api, "/api/deployments/", deployment_body(**overrides))
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "invalid_payload"
    assert field in body["details"]
    assert not IdempotencyRecord.objects.exists()
    # the same key is still free for a valid request
    assert post(api, "/api/deployments/", deployment_body()).status_code == 202


def test_a_json_array_body_is_400_it_is_not_an_object(api):
    response = post(api, "/api/deployments/", ["acme/x"])
    assert response.status_code == 400
    assert response.json() == {"error": "invalid_json"}
    assert not IdempotencyRecord.objects.exists()


def test_keys_are_scoped_per_client(api, other_api):
    mine = post(api, "/api/deployments/", deployment_body())
    # the same key from another client, even with another body, is that client's own new op
    theirs = post(other_api, "/api/deployments/", deployment_body(commit_sha="f" * 40))
    assert mine.status_code == 202
    assert theirs.status_code == 202
    assert mine.json()["deployment_id"] != theirs.json()["deployment_id"]
    assert Deployment.objects.count() == 2

    my_id = mine.json()["deployment_id"]
    assert other_api.get(f"/api/deployments/{my_id}/").status_code == 404
    assert other_api.get(f"/api/deployments/{my_id}/").json() == {"error": "not_found"}
    listed = other_api.get("/api/deployments/", {"idempotency_key": "key-1"}).json()
    assert [d["deployment_id"] for d in listed["results"]] == [
        theirs.json()["deployment_id"]
    ]
    record = other_api.get("/api/idempotency-keys/deployment.create/key-1/").json()
    assert record["resource_id"] == theirs.json()["deployment_id"]


def test_keys_are_scoped_per_operation_type(api):
    deployment = post(api, "/api/deployments/", deployment_body())
    build = post(api, "/api/builds/", build_body())
    assert deployment.status_code == 202
    assert build.status_code == 202


@override_settings(IDEMPOTENCY_KEY_TTL_SECONDS=1)
def test_expired_key_starts_a_new_operation_and_keeps_the_old_record(api):
    first = post(api, "/api/deployments/", deployment_body())
    record = IdempotencyRecord.objects.get()
    assert record.expires_at - record.created_at == timedelta(seconds=1)  # the TTL
    idempotency_records_aged(1.1)
    before = metric("deployment.create", "expired")
    second = post(api, "/api/deployments/", deployment_body(commit_sha="f" * 40))

    assert second.status_code == 202
    assert second.json()["deployment_id"] != first.json()["deployment_id"]
    assert Deployment.objects.count() == 2
    old, new = IdempotencyRecord.objects.order_by("id")
    assert old.expired_at is not None
    assert old.resource_id == first.json()["deployment_id"]
    assert new.expired_at is None
    assert new.resource_id == second.json()["deployment_id"]
    assert metric("deployment.create", "expired") == before + 1
    # the list by key leads to the new operation; the old one is still readable by id
    listed = api.get("/api/deployments/", {"idempotency_key": "key-1"}).json()
    assert [d["deployment_id"] for d in listed["results"]] == [
        second.json()["deployment_id"]
    ]
    assert api.get(first["Location"]).status_code == 200


def test_get_deployment_and_list_by_key(api):
    created = post(api, "/api/deployments/", deployment_body()).json()
    detail = api.get(f"/api/deployments/{created['deployment_id']}/")
    assert detail.status_code == 200
    assert set(detail.json()) == {
        "deployment_id",
        "status",
        "detail",
        "idempotency_key",
        "repository",
        "commit_sha",
        "environment",
        "workflow",
        "triggered_by",
        "created_at",
        "updated_at",
        "downstream",
    }
    assert detail.json()["deployment_id"] == created["deployment_id"]

    page = api.get("/api/deployments/", {"idempotency_key": "key-1"}).json()
    assert set(page) == {"next", "previous", "results"}
    assert [d["deployment_id"] for d in page["results"]] == [created["deployment_id"]]
    empty = api.get("/api/deployments/", {"idempotency_key": "unknown"}).json()
    assert empty["results"] == []
    assert api.get("/api/deployments/dep_unknown/").status_code == 404


def test_builds_follow_the_same_contract(api):
    first = post(api, "/api/builds/", build_body())
    assert first.status_code == 202
    body = first.json()
    assert body["build_id"].startswith("bld_")
    assert body["ref"] == "refs/heads/main"
    assert first["Location"] == f"/api/builds/{body['build_id']}/"

    replay = post(api, "/api/builds/", build_body())
    assert replay.status_code == 200
    assert replay.content == first.content
    assert replay["Idempotent-Replayed"] == "true"

    conflict = post(api, "/api/builds/", build_body(ref="refs/heads/other"))
    assert conflict.status_code == 409
    assert conflict.json()["differing_fields"] == ["ref"]

    detail = api.get(first["Location"]).json()
    assert set(detail) == {
        "build_id",
        "status",
        "detail",
        "idempotency_key",
        "repository",
        "commit_sha",
        "ref",
        "workflow",
        "triggered_by",
        "created_at",
        "updated_at",
        "downstream",
    }
    page = api.get("/api/builds/", {"idempotency_key": "key-1"}).json()
    assert [b["build_id"] for b in page["results"]] == [body["build_id"]]
    assert Build.objects.count() == 1


@pytest.mark.parametrize("path", ["/api/deployments/", "/api/builds/"])
def test_a_key_no_operation_can_have_lists_nothing_instead_of_failing(api, path):
    # A NUL byte cannot even be compared by PostgreSQL; such a key simply has no operation.
    for key in ("bad\x00key", "é", "k" * 256):
        response = api.get(path, {"idempotency_key": key})
        assert response.status_code == 200
        assert response.json()["results"] == []
