import pytest

from tests.integrations.research.factories import research_event
from tests.webhooks.factories import RESEARCH_SOURCE, signed_post
from webhooks.models import InboxEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def recorded(client, source):
    body = research_event()
    for _ in range(2):
        signed_post(client, RESEARCH_SOURCE, body)
    return body["event_id"]


def test_event_status_for_an_api_client(api, recorded):
    response = api.get(f"/api/webhooks/research-sync/events/{recorded}/")
    assert response.status_code == 200
    data = response.json()
    row = InboxEvent.objects.get()
    assert data["event_id"] == recorded
    assert data["processing_status"] == "received"
    assert data["attempts"] == 0
    assert data["delivery_count"] == 2
    assert data["processed_at"] is None
    assert data["error_message"] == ""
    assert data["received_at"].startswith(row.received_at.strftime("%Y-%m-%dT%H:%M"))
    assert "raw_body" not in data and "headers" not in data


def test_event_status_needs_the_bearer_token(client, recorded):
    response = client.get(f"/api/webhooks/research-sync/events/{recorded}/")
    assert response.status_code == 401
    assert response.json() == {"error": "unauthorized"}


@pytest.mark.parametrize(
    "path",
    [
        "/api/webhooks/research-sync/events/evt-unknown/",
        "/api/webhooks/other-source/events/{event_id}/",
    ],
)
def test_unknown_event_or_source_is_404(api, recorded, path):
    response = api.get(path.format(event_id=recorded))
    assert response.status_code == 404
    assert response.json() == {"error": "not_found"}
