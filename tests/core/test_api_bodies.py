"""Bodies of every ``/api/`` POST that are not a JSON object, whatever their shape: 400
``invalid_json`` as JSON (never Django's HTML error page), and nothing recorded
(docs/security.md, "Request bodies")."""

import json

import pytest

from deployments.models import Build, Deployment, StatusSync
from idempotency.models import IdempotencyRecord

pytestmark = pytest.mark.django_db

POSTS = ["/api/deployments/", "/api/builds/", "/api/status-sync/"]


@pytest.fixture
def api_500s(api):
    """The API client, answering a server error as the 500 a client would get instead of
    raising it into the test."""
    api.raise_request_exception = False
    return api


def post_raw(api, url: str, raw: bytes, **extra):
    return api.post(
        url,
        data=raw,
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="key-1",
        **extra,
    )


def assert_nothing_recorded():
    assert not IdempotencyRecord.objects.exists()
    assert not Deployment.objects.exists()
    assert not Build.objects.exists()
    assert not StatusSync.objects.exists()


@pytest.mark.parametrize("url", POSTS)
@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000,
        b"{" + b'"a":{' * 50_000,
        b'{"repository": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ],
    ids=["open-brackets", "open-objects", "deep-member"],
)
def test_json_nested_too_deep_to_parse_is_400(api_500s, url, raw):
    response = post_raw(api_500s, url, raw)
    assert response.status_code == 400, response.content[:200]
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"error": "invalid_json"}
    assert_nothing_recorded()


@pytest.mark.parametrize("url", POSTS)
def test_a_deep_member_that_parses_is_a_422_on_that_member(api_500s, url):
    member = "commit_sha" if url != "/api/status-sync/" else "status"
    body = {member: json.loads("[" * 200 + "]" * 200)}
    response = post_raw(api_500s, url, json.dumps(body).encode())
    assert response.status_code == 422, response.content[:200]
    assert member in response.json()["details"]
    assert_nothing_recorded()


@pytest.mark.parametrize("url", POSTS)
def test_an_empty_body_is_400_not_a_list_of_missing_fields(api_500s, url):
    response = post_raw(api_500s, url, b"")
    assert response.status_code == 400, response.content
    assert response.json() == {"error": "invalid_json"}
    assert_nothing_recorded()


@pytest.mark.parametrize("url", POSTS)
@pytest.mark.parametrize(
    "raw", [b"[]", b"[1, 2]", b"42", b"null", b'"a string"', b"true", b"  "]
)
def test_json_that_is_not_an_object_is_400(api_500s, url, raw):
    response = post_raw(api_500s, url, raw)
    assert response.status_code == 400, response.content
    assert response.json() == {"error": "invalid_json"}
    assert_nothing_recorded()


def test_the_key_is_checked_before_the_body(api_500s):
    response = api_500s.post(
        "/api/deployments/", data=b"", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json() == {"error": "idempotency_key_required"}
