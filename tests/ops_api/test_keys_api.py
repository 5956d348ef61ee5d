"""Idempotency keys through the operator API (/api/ops/idempotency-keys/): operators and
auditors look up any client's key; operators evict a live one, which is kept for audit,
recorded with the API client as actor, and whose key then starts a new operation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from core.actors import Actor
from core.errors import NotFound
from deployments.models import Deployment
from idempotency.evictions import idempotency_record_evict
from idempotency.models import IdempotencyRecord
from tests.core.factories import api_client_make, bearer_http, role_http
from tests.deployments.factories import deployment_body
from tests.deployments.factories import idempotent_post as post
from tests.idempotency.factories import IdempotencyRecordFactory
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

KEYS = "/api/ops/idempotency-keys/"
EVICT = "/api/ops/idempotency-keys/evict/"


def operator(name: str | None = None):
    client, token = api_client_make(name=name, role="operator")
    return client, bearer_http(token)


@pytest.fixture
def ci():
    """A CI client (``shop-ci``) with one deployment made with the key ``deploy-42``."""
    client, token = api_client_make(name="shop-ci")
    http = bearer_http(token)
    created = post(http, "/api/deployments/", deployment_body(), key="deploy-42")
    assert created.status_code == 202
    return client, http, created.json()


def lookup(http, **params):
    query = {"client": "shop-ci", "operation_type": "deployment.create"}
    query.update(params)
    return http.get(KEYS, {name: v for name, v in query.items() if v is not None})


def evict_body(**overrides) -> dict:
    body = {
        "client": "shop-ci",
        "operation_type": "deployment.create",
        "key": "deploy-42",
        "reason": "the first run was lost",
    }
    body.update(overrides)
    return body


def evict(http, idem: str = "evict-1", **overrides):
    """``POST .../evict/`` with ``Idempotency-Key: idem``; ``overrides`` change the body."""
    return post(http, EVICT, evict_body(**overrides), key=idem)


def evictions():
    return OperatorAction.objects.filter(
        action=OperatorAction.Action.EVICT_IDEMPOTENCY_KEY
    )


# --- roles -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "may_read", "may_evict"),
    [
        ("operator", True, True),
        ("auditor", True, False),
        ("ci", False, False),
        ("producer", False, False),
    ],
)
def test_each_role_may_do_what_its_role_allows(ci, role, may_read, may_evict):
    http = role_http(role)
    read = lookup(http, key="deploy-42")
    evicted = evict(http)

    assert read.status_code == (200 if may_read else 403)
    assert evicted.status_code == (200 if may_evict else 403)
    for response in (read, evicted):
        if response.status_code == 403:
            assert response.json() == {"error": "forbidden"}
    if not may_evict:
        assert not evictions().exists()
        assert IdempotencyRecord.objects.get().expired_at is None


@pytest.mark.parametrize("http", [APIClient(), bearer_http("not-a-token")])
def test_without_a_token_both_are_401(ci, http):
    for response in (lookup(http, key="deploy-42"), evict(http)):
        assert response.status_code == 401
        assert response.json() == {"error": "unauthorized"}
    assert not evictions().exists()


# --- lookup ----------------------------------------------------------------------------


def test_a_key_of_any_client_is_looked_up_by_the_clients_name(ci):
    _, _, created = ci
    record = IdempotencyRecord.objects.get()

    response = lookup(role_http("auditor"), key="deploy-42")

    assert response.status_code == 200
    body = response.json()
    assert body == {
        "record_id": record.pk,
        "client": "shop-ci",
        "operation_type": "deployment.create",
        "key": "deploy-42",
        "status": "processing",
        "fingerprint": record.fingerprint,
        "resource_id": created["deployment_id"],
        "created_at": body["created_at"],
        "expires_at": body["expires_at"],
        "expired_at": None,
    }
    assert body["created_at"] < body["expires_at"]


def test_a_key_past_its_ttl_is_expired(ci):
    IdempotencyRecord.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    body = lookup(role_http("operator"), key="deploy-42").json()
    assert body["status"] == "expired"


@pytest.mark.parametrize(
    "params",
    [
        {"key": "never-used"},
        {"key": "deploy-42", "client": "nobody"},
        {"key": "deploy-42", "operation_type": "build.create"},
        {"key": "\x7f not printable"},
    ],
)
def test_an_unknown_key_or_client_is_404(ci, params):
    response = lookup(role_http("operator"), **params)
    assert response.status_code == 404
    assert response.json() == {"error": "not_found"}


@pytest.mark.parametrize(
    ("params", "missing"),
    [
        ({"client": None, "key": "deploy-42"}, {"client"}),
        ({"operation_type": None, "key": "deploy-42"}, {"operation_type"}),
        ({}, {"key"}),
        ({"client": None, "operation_type": None}, {"client", "operation_type", "key"}),
        ({"key": ""}, {"key"}),
        ({"key": "a" * 256}, {"key"}),
        ({"key": "deploy-\x00"}, {"key"}),
        ({"client": "c" * 101, "key": "k"}, {"client"}),
    ],
)
def test_a_missing_or_malformed_parameter_is_422_naming_it(ci, params, missing):
    response = lookup(role_http("operator"), **params)
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "invalid_payload"
    assert set(body["details"]) == missing


# --- evict -----------------------------------------------------------------------------


def test_an_evicted_key_starts_a_new_deployment_and_its_old_record_stays(ci):
    owner, ci_http, first = ci
    _, http = operator(name="ops-bot")
    record = IdempotencyRecord.objects.get()

    response = evict(http)

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["record_id"], body["status"]) == (record.pk, "expired")
    assert body["expired_at"] is not None
    record.refresh_from_db()
    assert record.expired_at is not None
    action = evictions().get()
    assert action.actor_name == "api:ops-bot"
    assert action.reason == "the first run was lost"
    assert action.details == {
        "client": "shop-ci",
        "client_id": owner.pk,
        "operation_type": "deployment.create",
        "key": "deploy-42",
        "record_id": record.pk,
        "resource_id": first["deployment_id"],
        "status": "processing",
    }

    # The same request with the same key: a new deployment, not the first one's replay.
    again = post(ci_http, "/api/deployments/", deployment_body(), key="deploy-42")

    assert again.status_code == 202, again.content
    assert "Idempotent-Replayed" not in again
    assert again.json()["deployment_id"] != first["deployment_id"]
    assert Deployment.objects.count() == 2
    records = IdempotencyRecord.objects.filter(client=owner, key="deploy-42").order_by(
        "pk"
    )
    assert [r.expired_at is None for r in records] == [False, True]
    # The lookup shows the new live record; the old one is kept for audit.
    looked_up = lookup(http, key="deploy-42").json()
    assert looked_up["resource_id"] == again.json()["deployment_id"]
    assert looked_up["status"] == "processing"


def test_an_eviction_retried_with_its_key_is_replayed_byte_for_byte(ci):
    _, http = operator()
    first = evict(http)
    again = evict(http)

    assert first.status_code == 200
    assert (again.status_code, again.content) == (200, first.content)
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert evictions().count() == 1


def test_an_eviction_key_reused_for_another_body_is_409(ci):
    _, http = operator()
    evict(http)
    response = evict(http, idem="evict-1", reason="another reason", client="other")

    assert response.status_code == 409
    assert response.json() == {
        "error": "idempotency_key_reused",
        "differing_fields": ["client", "reason"],
    }
    assert evictions().count() == 1


def test_a_key_evicted_already_or_never_used_is_404_and_records_nothing(ci):
    _, http = operator()
    evict(http)

    for response in (
        evict(http, idem="evict-2"),  # no live record any more
        evict(http, idem="evict-3", key="never-used"),
        evict(http, idem="evict-4", client="nobody"),
        evict(http, idem="evict-5", operation_type="build.create"),
    ):
        assert response.status_code == 404
        assert response.json() == {"error": "not_found"}
    assert evictions().count() == 1
    # A 404 keeps none of the operator's keys: each may be used again.
    assert not IdempotencyRecord.objects.filter(key__in=["evict-2", "evict-4"])


def test_a_key_past_its_ttl_is_not_evicted(ci):
    IdempotencyRecord.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    _, http = operator()
    response = evict(http)
    assert response.status_code == 404
    assert not evictions().exists()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"client": 5}, "client"),
        ({"key": ["deploy-42"]}, "key"),
        ({"operation_type": None}, "operation_type"),
        ({"reason": ""}, "reason"),
        ({"reason": "r" * 2001}, "reason"),
        ({"key": "k" * 256}, "key"),
        ({"client": "shop\x00ci"}, "client"),
    ],
)
def test_bad_input_is_422_and_evicts_nothing(ci, overrides, field):
    _, http = operator()
    response = evict(http, **overrides)
    assert response.status_code == 422
    assert field in response.json()["details"]
    assert IdempotencyRecord.objects.get(key="deploy-42").expired_at is None
    assert not evictions().exists()


def test_the_service_evicts_only_a_live_unexpired_record():
    record = IdempotencyRecordFactory(key="k")
    IdempotencyRecordFactory(
        client=record.client,
        key="old",
        expires_at=timezone.now() - timedelta(seconds=1),
    )
    actor = Actor.api_client(record.client)
    arguments = {"client": record.client, "operation_type": "deployment.create"}

    evicted = idempotency_record_evict(**arguments, key="k", actor=actor, reason="r")

    assert evicted.pk == record.pk
    assert evicted.expired_at is not None
    for key in ("k", "old", "never"):
        with pytest.raises(NotFound):
            idempotency_record_evict(**arguments, key=key, actor=actor, reason="r")
    assert evictions().count() == 1
