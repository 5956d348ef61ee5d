"""What an idempotent POST costs the database: a retry of the very same bytes is one
statement that finds the key's record and counts the replay, before the body is read; a new key
is that statement finding nothing (it stands in for the connection's health check) and one
statement that inserts first (the record and the deployment written together); a retry with
other bytes is the insert meeting the key's record; and the answers are those of the whole way,
byte for byte. The statement counts are taken outside a test transaction, as a request runs
(in autocommit)."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import REGISTRY

from core.models import ApiClient
from deployments.models import Deployment
from idempotency.models import IdempotencyRecord
from tests.core.factories import api_client_make, bearer_http
from tests.deployments.factories import deployment_body
from tests.outages import database_unreachable

pytestmark = pytest.mark.django_db

URL = "/api/deployments/"


def post(http, body: bytes, key: str):
    return http.post(
        URL, data=body, content_type="application/json", HTTP_IDEMPOTENCY_KEY=key
    )


@pytest.fixture
def client_http():
    _, token = api_client_make(token="fast-paths-token-0123456789abcdef")
    return bearer_http(token)


def conflicts() -> float:
    labels = {"operation": "deployment.create", "outcome": "conflict"}
    return REGISTRY.get_sample_value("idempotency_requests_total", labels) or 0.0


def statements(queries) -> list[str]:
    return [q["sql"] for q in queries]


postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="these statements are PostgreSQL's"
)


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_new_key_is_one_statement_that_inserts_first(client_http):
    body = json.dumps(deployment_body()).encode()
    with CaptureQueriesContext(connection) as queries:
        response = post(client_http, body, "fast-new")
    assert response.status_code == 202, response.content
    sql = statements(queries)
    # The token's client, the check for a byte-identical retry (which finds nothing and
    # writes nothing), then the record and the deployment.
    assert len(sql) == 3, sql
    assert sql[1].startswith("WITH commit_mode AS"), sql[1]
    assert sql[2].startswith("WITH record AS (INSERT INTO"), sql[2]
    assert Deployment._meta.db_table in sql[2]
    assert IdempotencyRecord._meta.db_table in sql[2]
    record = IdempotencyRecord.objects.get(key="fast-new")
    assert (record.replay_count, record.last_replayed_at) == (0, None)
    deployment = Deployment.objects.get(public_id=record.resource_id)
    answered = response.json()
    assert answered["deployment_id"] == deployment.public_id
    # What the answer says is what was stored.
    assert answered["created_at"] == deployment.created_at.isoformat().replace(
        "+00:00", "Z"
    )


def replays() -> float:
    labels = {"operation": "deployment.create", "outcome": "replayed"}
    return REGISTRY.get_sample_value("idempotency_requests_total", labels) or 0.0


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_byte_identical_retry_is_one_statement_that_counts_the_replay(client_http):
    body = json.dumps(deployment_body()).encode()
    first = post(client_http, body, "fast-retry")
    assert first.status_code == 202
    records = IdempotencyRecord.objects.values_list(
        "pk", "updated_at", "response_body", "status"
    )
    before = list(records)
    counted = replays()
    with CaptureQueriesContext(connection) as queries:
        retry = post(client_http, body, "fast-retry")
    assert retry.status_code == 200
    assert retry.content == first.content
    assert retry["Location"] == first["Location"]
    assert retry["Idempotent-Replayed"] == "true"
    sql = statements(queries)
    # The token's client, and the one statement that found the record and counted.
    assert len(sql) == 2, sql
    assert sql[1].startswith("WITH commit_mode AS"), sql[1]
    assert Deployment.objects.count() == 1
    assert list(records) == before
    record = IdempotencyRecord.objects.get(key="fast-retry")
    assert record.replay_count == 1
    assert record.last_replayed_at is not None
    assert replays() == counted + 1
    # The same answer, headers included, as the whole way gives it (a charset other than
    # UTF-8 is left to the whole way: DRF's parser reads it).
    whole = client_http.post(
        URL,
        data=body,
        content_type="application/json; charset=iso-8859-1",
        HTTP_IDEMPOTENCY_KEY="fast-retry",
    )
    assert whole.status_code == 200, whole.content
    assert whole.content == retry.content
    assert sorted(whole.headers.items()) == sorted(retry.headers.items())
    assert IdempotencyRecord.objects.get(key="fast-retry").replay_count == 2


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_byte_identical_retry_past_the_ttl_is_a_new_operation(client_http):
    body = json.dumps(deployment_body()).encode()
    first = post(client_http, body, "fast-expired")
    assert first.status_code == 202
    IdempotencyRecord.objects.filter(key="fast-expired").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    again = post(client_http, body, "fast-expired")
    assert again.status_code == 202, again.content
    assert again.json()["deployment_id"] != first.json()["deployment_id"]
    assert Deployment.objects.count() == 2
    old, new = IdempotencyRecord.objects.filter(key="fast-expired").order_by("pk")
    assert old.expired_at is not None and old.replay_count == 0
    assert new.expired_at is None


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_the_same_bytes_under_another_clients_key_are_not_its_replay(client_http):
    body = json.dumps(deployment_body()).encode()
    assert post(client_http, body, "fast-shared").status_code == 202
    _, token = api_client_make(token="fast-paths-other-0123456789abcdef")
    other = post(bearer_http(token), body, "fast-shared")
    assert other.status_code == 202, other.content
    assert Deployment.objects.count() == 2


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_retry_with_other_bytes_but_the_same_operation_is_the_same_replay(
    client_http,
):
    """Whitespace and member order change the bytes, not the fingerprint: the answer is the
    same replay."""
    body = deployment_body()
    first = post(client_http, json.dumps(body).encode(), "fast-spaces")
    reordered = json.dumps(dict(reversed(list(body.items()))), indent=2).encode()
    with CaptureQueriesContext(connection) as queries:
        retry = post(client_http, reordered, "fast-spaces")
    assert retry.status_code == 200
    assert retry.content == first.content
    assert retry["Idempotent-Replayed"] == "true"
    # No second read of the key: its client, the check for the same bytes (other bytes:
    # nothing found), the insert that met the key, the replay counted.
    assert len(statements(queries)) == 4, [q[:70] for q in statements(queries)]
    assert IdempotencyRecord.objects.get(key="fast-spaces").replay_count == 1


def test_a_changed_operation_under_the_key_is_still_409(client_http):
    post(client_http, json.dumps(deployment_body()).encode(), "fast-409")
    other = json.dumps(deployment_body(commit_sha="fedcba9876")).encode()
    response = post(client_http, other, "fast-409")
    assert response.status_code == 409
    assert response.json()["differing_fields"] == ["commit_sha"]


def test_a_reused_key_is_counted_and_answered_once(client_http):
    """The fast lane leaves a reused key's 409 to the whole way, which raises what the lane
    met instead of running the key's statement again."""
    post(client_http, json.dumps(deployment_body()).encode(), "fast-409-once")
    before = conflicts()
    other = json.dumps(deployment_body(environment="production")).encode()
    with CaptureQueriesContext(connection) as queries:
        response = post(client_http, other, "fast-409-once")
    assert response.status_code == 409
    assert response.json() == {
        "error": "idempotency_key_reused",
        "differing_fields": ["environment"],
    }
    assert conflicts() == before + 1
    assert len(statements(queries)) <= 4, statements(queries)


def test_a_body_the_fast_lane_refuses_is_the_serializers_422(client_http):
    body = deployment_body(repository="not a repository")
    response = post(client_http, json.dumps(body).encode(), "fast-422")
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_payload"
    assert list(response.json()["details"]) == ["repository"]
    assert not IdempotencyRecord.objects.filter(key="fast-422").exists()


def test_without_a_valid_token_an_identical_retry_is_still_401(client_http):
    body = json.dumps(deployment_body()).encode()
    post(client_http, body, "fast-401")
    stranger = bearer_http("no-such-token-0123456789abcdef0123")
    response = post(stranger, body, "fast-401")
    assert response.status_code == 401
    assert response.json() == {"error": "unauthorized"}


def test_a_client_is_read_once_per_period(settings, client_http):
    settings.API_CLIENT_CACHE_SECONDS = 60
    body = json.dumps(deployment_body()).encode()
    post(client_http, body, "fast-cache")
    with CaptureQueriesContext(connection) as queries:
        assert post(client_http, body, "fast-cache").status_code == 200
    clients = [q for q in statements(queries) if ApiClient._meta.db_table in q]
    assert clients == []


def test_a_client_deactivated_elsewhere_is_refused_within_the_period(settings):
    settings.API_CLIENT_CACHE_SECONDS = 0.1
    client, token = api_client_make(token="fast-deactivated-0123456789abcdef")
    http = bearer_http(token)
    assert http.get("/api/whoami/").status_code == 200
    ApiClient.objects.filter(pk=client.pk).update(is_active=False)
    time.sleep(0.15)
    assert http.get("/api/whoami/").status_code == 401


@pytest.mark.django_db(transaction=True)
def test_the_database_down_is_503_on_every_path_and_the_retry_goes_through(client_http):
    """Every request of an idempotent POST meets the database before DRF takes over (the token,
    the key's statement, on the fast lane): a database that refuses connections is a 503 to
    retry, never a 500, whether the key is new or a retry; and nothing is lost."""
    body = json.dumps(deployment_body()).encode()
    assert post(client_http, body, "down-retry").status_code == 202
    for key in ("down-retry", "down-new"):
        with database_unreachable():
            response = post(client_http, body, key)
        assert response.status_code == 503, (key, response.content)
        assert response.json()["error"] == "temporarily_unavailable"
        assert int(response["Retry-After"]) > 0
    assert post(client_http, body, "down-retry").status_code == 200
    assert post(client_http, body, "down-new").status_code == 202
    assert Deployment.objects.count() == 2


def test_an_identical_retry_in_another_media_type_is_refused_as_the_whole_way_refuses_it(
    client_http,
):
    """The fast lane answers only what the whole way would accept: the same bytes sent as
    text/plain are a 400, not the first response."""
    body = json.dumps(deployment_body()).encode()
    assert post(client_http, body, "media-type").status_code == 202
    response = client_http.post(
        URL, data=body, content_type="text/plain", HTTP_IDEMPOTENCY_KEY="media-type"
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "invalid_json"
    assert Deployment.objects.count() == 1


def test_an_accept_header_the_api_cannot_answer_is_refused_as_the_whole_way_refuses_it(
    client_http,
):
    body = json.dumps(deployment_body()).encode()
    response = client_http.post(
        URL,
        data=body,
        content_type="application/json",
        HTTP_ACCEPT="text/html",
        HTTP_IDEMPOTENCY_KEY="accept-html",
    )
    assert response.status_code == 406, response.content
    assert not IdempotencyRecord.objects.filter(key="accept-html").exists()
    accepted = client_http.post(
        URL,
        data=body,
        content_type="application/json",
        HTTP_ACCEPT="application/json",
        HTTP_IDEMPOTENCY_KEY="accept-html",
    )
    assert accepted.status_code == 202, accepted.content
