import pytest

from tests.integrations.research.factories import research_event
from tests.outages import database_unreachable
from tests.webhooks.factories import (
    RESEARCH_SOURCE,
    encode,
    signed_headers,
    webhook_post,
)
from webhooks.models import InboxEvent

pytestmark = pytest.mark.django_db(transaction=True)


def test_database_unreachable_is_503_with_retry_after_and_no_row(client, source):
    body = research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])
    with database_unreachable():
        response = webhook_post(client, RESEARCH_SOURCE, raw, headers)
    assert response.status_code == 503
    assert response.json() == {"error": "temporarily_unavailable"}
    assert int(response["Retry-After"]) > 0
    assert not InboxEvent.objects.exists()
    # Once the database is back, the producer's retry is accepted.
    retry = webhook_post(client, RESEARCH_SOURCE, raw, headers)
    assert retry.status_code == 202
