"""A key's replays and conflicts, counted on its record and shown in the console, with the
links between the record and the job it created."""

import json

import pytest
from django.urls import reverse

from deployments.models import Deployment
from idempotency.models import IdempotencyRecord
from tests.deployments.factories import deployment_body
from tests.deployments.factories import idempotent_post as post

pytestmark = pytest.mark.django_db


def test_replays_and_conflicts_are_counted_on_the_record(api):
    first = post(api, "/api/deployments/", deployment_body())
    assert first.status_code == 202
    record = IdempotencyRecord.objects.get()
    assert (record.replay_count, record.conflict_count) == (0, 0)
    assert record.last_replayed_at is None

    # Byte for byte the first body (the fast path), then the same fields written otherwise.
    assert post(api, "/api/deployments/", deployment_body()).status_code == 200
    spaced = api.post(
        "/api/deployments/",
        data=json.dumps(deployment_body(), indent=4),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="key-1",
    )
    assert spaced.status_code == 200
    other = post(api, "/api/deployments/", deployment_body(environment="production"))
    assert other.status_code == 409

    record.refresh_from_db()
    assert (record.replay_count, record.conflict_count) == (2, 1)
    assert record.last_replayed_at is not None and record.last_conflict_at is not None
    assert record.last_conflict_at >= record.last_replayed_at
    assert Deployment.objects.count() == 1


def test_the_record_and_its_deployment_link_to_each_other(api, auditor_client):
    post(api, "/api/deployments/", deployment_body())
    post(api, "/api/deployments/", deployment_body())
    post(api, "/api/deployments/", deployment_body(environment="production"))
    record, deployment = IdempotencyRecord.objects.get(), Deployment.objects.get()
    record_url = reverse("admin:idempotency_idempotencyrecord_change", args=[record.pk])
    deployment_url = reverse(
        "admin:deployments_deployment_change", args=[deployment.pk]
    )

    page = auditor_client.get(record_url).content.decode()
    assert f'<a href="{deployment_url}">{deployment.public_id}</a>' in page
    assert "1, last at " in page and " UTC" in page  # one replay, one conflict
    listing = auditor_client.get(
        reverse("admin:idempotency_idempotencyrecord_changelist")
    ).content.decode()
    assert '<td class="field-seen">1 / 1</td>' in listing

    page = auditor_client.get(deployment_url).content.decode()
    assert f'<a href="{record_url}">key-1</a> (1 replays, 1 conflicts)' in page
