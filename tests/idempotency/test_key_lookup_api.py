"""GET /api/idempotency-keys/<operation>/<key>/ (docs/http-api.md): what a client learns about
one of its keys, whatever the key's characters, and nothing about another client's."""

from datetime import timedelta
from urllib.parse import quote

import pytest
from django.test import override_settings

from idempotency.models import IdempotencyRecord
from tests.deployments.factories import deployment_body
from tests.deployments.factories import idempotent_post as post
from tests.idempotency.factories import idempotency_records_aged

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "key", ["plain", "with/slash", "q?and#hash", "100%", " sp ace"]
)
def test_idempotency_key_lookup_with_awkward_keys(api, other_api, key):
    created = post(api, "/api/deployments/", deployment_body(), key=key).json()
    url = f"/api/idempotency-keys/deployment.create/{quote(key, safe='')}/"
    response = api.get(url)
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "processing"
    assert body["resource_id"] == created["deployment_id"]
    assert len(body["fingerprint"]) == 64
    assert body["created_at"] and body["expires_at"]
    assert other_api.get(url).status_code == 404
    assert api.get("/api/idempotency-keys/build.create/plain/").status_code == 404


@override_settings(IDEMPOTENCY_KEY_TTL_SECONDS=1)
def test_idempotency_key_lookup_says_expired(api):
    post(api, "/api/deployments/", deployment_body())
    record = IdempotencyRecord.objects.get()
    assert record.expires_at - record.created_at == timedelta(seconds=1)  # the TTL
    idempotency_records_aged(1.1)
    body = api.get("/api/idempotency-keys/deployment.create/key-1/").json()
    assert body["status"] == "expired"
