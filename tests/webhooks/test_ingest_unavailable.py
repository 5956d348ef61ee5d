import pytest
from django.db import connection

from webhooks.models import InboxEvent

from .factories import (
    WebhookSourceFactory,
    as_meta,
    encode,
    research_event,
    signed_headers,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_database_unreachable_is_503_with_retry_after_and_no_row(client):
    WebhookSourceFactory(slug="research-sync")
    body = research_event()
    raw = encode(body)
    headers = as_meta(signed_headers(raw_body=raw, event_id=body["event_id"]))
    original_port = connection.settings_dict["PORT"]
    connection.close()
    # A real connection attempt to a closed port, not a mocked failure.
    connection.settings_dict["PORT"] = "1"
    try:
        response = client.post(
            "/webhooks/research-sync/",
            data=raw,
            content_type="application/json",
            **headers,
        )
    finally:
        connection.close()
        connection.settings_dict["PORT"] = original_port
    assert response.status_code == 503
    assert response.json() == {"error": "temporarily_unavailable"}
    assert int(response["Retry-After"]) > 0
    assert not InboxEvent.objects.exists()
    # Once the database is back, the producer's retry is accepted.
    retry = client.post(
        "/webhooks/research-sync/", data=raw, content_type="application/json", **headers
    )
    assert retry.status_code == 202
