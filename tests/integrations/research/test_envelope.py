"""The research envelope at ingest (docs/http-api.md, "The research envelope"): what a research
source refuses with 422 and its details, before anything is stored."""

import pytest

from tests.integrations.fixtures import fixture_json
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    RESEARCH_SOURCE,
    WebhookSourceFactory,
    encode,
    signed_headers,
    signed_post,
    webhook_post,
)
from webhooks.models import InboxEvent

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"event_id": ""}, "event_id"),
        ({"event_id": "x" * 129}, "event_id"),
        ({"event_id": 42}, "event_id"),
        ({"event_type": None}, "event_type"),
        ({"occurred_at": "2026-11-30"}, "occurred_at"),
        ({"occurred_at": "2026-11-30T18:00:00"}, "occurred_at"),
        ({"occurred_at": "yesterday"}, "occurred_at"),
        ({"occurred_at": "2026-13-40T18:00:00Z"}, "occurred_at"),
        ({"entity": None}, "entity"),
        ({"entity": {"entity_type": "doc"}}, "entity"),
        (
            {"entity": {"entity_id": "d", "entity_type": "doc", "source_version": -1}},
            "entity",
        ),
        (
            {"entity": {"entity_id": "d", "entity_type": "doc", "source_version": "3"}},
            "entity",
        ),
        ({"source": {"title": "no url"}}, "source"),
        ({"source": "https://x"}, "source"),
        ({"delivery_attempt": "two"}, "delivery_attempt"),
        ({"event_id": "evt\x00nul"}, "event_id"),
    ],
)
def test_envelope_that_fails_validation_is_422_with_details(
    client, source, changes, field
):
    body = research_event(**changes)
    response = signed_post(
        client, RESEARCH_SOURCE, body, event_id=str(body.get("event_id"))
    )
    assert response.status_code == 422, response.content
    assert response.json()["error"] == "invalid_payload"
    assert field in response.json()["details"]
    assert not InboxEvent.objects.exists()


def test_delete_without_version_or_source_is_valid(client, source):
    body = fixture_json("research", "research.document.deleted__no-version")
    assert signed_post(client, RESEARCH_SOURCE, body).status_code == 202
    assert InboxEvent.objects.get().source_version is None


def test_id_header_differing_from_body_event_id_is_422(client, source):
    body = research_event()
    response = signed_post(client, RESEARCH_SOURCE, body, event_id="evt-something-else")
    assert response.status_code == 422
    assert "event_id_header" in response.json()["details"]


def test_missing_id_header_is_422(client, source):
    body = research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])
    del headers["X-Webhook-Id"]
    response = webhook_post(client, RESEARCH_SOURCE, raw, headers)
    assert response.status_code == 422
    assert "event_id_header" in response.json()["details"]


def as_wsgi(headers: dict[str, str]) -> dict[str, str]:
    """Headers sent as UTF-8 bytes, as a WSGI server hands them over: each byte one
    character (PEP 3333's Latin-1)."""
    return {
        name: value.encode("utf-8").decode("latin-1") for name, value in headers.items()
    }


@pytest.mark.parametrize(
    "event_id", ["évènement-1", "事件-中", "\u3000x", "x\u00a0", "a b"]
)
@pytest.mark.parametrize("scheme", ["hmac-sha256", "standard-webhooks"])
def test_an_event_id_sent_as_utf8_in_its_header_is_the_bodys(client, scheme, event_id):
    """A producer writes its headers in UTF-8; the server reads each header byte as one
    Latin-1 character (WSGI), which no longer equalled the body's id: every id outside
    ASCII was 422 ``event_id_header``. Only spaces and tabs, which HTTP drops, are
    stripped."""
    WebhookSourceFactory(slug="res-utf8", scheme=scheme, handler="research")
    body = research_event(event_id=event_id)
    raw = encode(body)
    headers = signed_headers(scheme=scheme, raw_body=raw, event_id=event_id)
    response = webhook_post(client, "res-utf8", raw, as_wsgi(headers))
    assert response.status_code == 202, response.content
    assert InboxEvent.objects.get().event_id == event_id


@pytest.mark.parametrize(
    "event_id", [" x", "x ", "x\t", "\tx", "a\nb", "a\rb", "a\x01b", "a\x7fb", "a\tb"]
)
def test_an_event_id_no_header_can_carry_is_422_naming_it(client, source, event_id):
    """No control character, no space or tab at either end: a header cannot carry it as it
    is, so no delivery could ever name it."""
    body = research_event(event_id=event_id)
    response = signed_post(client, RESEARCH_SOURCE, body, event_id="x")
    assert response.status_code == 422
    assert "event_id" in response.json()["details"]
    assert not InboxEvent.objects.exists()
