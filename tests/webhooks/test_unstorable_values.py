"""Values the database cannot hold or give back (docs/security.md, "Values the database
refuses"): refused at ingest with a 422 naming the field; every page that lists a row an older
deployment stored with one still renders."""

import json

import pytest
from django.db import connection
from django.urls import reverse

from research.models import ResearchDocument
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import InboxEventFactory, signed_post
from webhooks.models import FingerprintMismatch, InboxAttempt, InboxEvent
from webhooks.processing import inbox_event_process

pytestmark = pytest.mark.django_db

# Valid RFC 3339, but in UTC a year Python cannot hold (10000, or 0), or so close to either
# end that some time zone could not read it back.
OUT_OF_RANGE = [
    "9999-12-31T23:59:59-01:00",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T12:00:00Z",
    "0001-01-01T12:00:00Z",
]
AT_THE_EDGES = ["9999-12-30T23:59:59Z", "0001-01-02T00:00:00Z"]


# --- ingest -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", OUT_OF_RANGE)
@pytest.mark.parametrize("field", ["occurred_at", "delivered_at", "published_at"])
def test_a_date_outside_the_storable_range_is_422_naming_the_field(
    http, source, field, value
):
    body = research_event()
    if field == "published_at":
        body["source"]["published_at"] = value
    else:
        body[field] = value

    response = signed_post(http, source.slug, body)

    assert response.status_code == 422, response.content
    assert response.json()["error"] == "invalid_payload"
    details = response.json()["details"]
    if field == "published_at":
        assert "published_at" in details["source"], details
        assert "between" in details["source"]["published_at"][0]
    else:
        assert field in details, details
        assert "between" in details[field][0]
    assert not InboxEvent.objects.exists()


@pytest.mark.parametrize("value", AT_THE_EDGES)
def test_dates_at_the_edges_of_the_range_are_stored_processed_and_read_back(
    http, source, api, value
):
    body = research_event(occurred_at=value)
    body["source"]["published_at"] = value
    assert signed_post(http, source.slug, body).status_code == 202

    event = InboxEvent.objects.get()
    assert inbox_event_process(inbox_event_id=event.pk).status == "processed"
    document = api.get(f"/api/research/documents/{body['entity']['entity_id']}/")
    assert document.status_code == 200
    assert document.json()["published_at"].startswith(value[:10])


# --- rows an older deployment stored ------------------------------------------------------------

# What an older deployment wrote for a body whose date it did not refuse, as each database
# stores it. SQLite reads year 10000 back as NULL; year 0 does not read back at all.
STORED = {
    "postgresql": {
        "after_9999": ("9999-12-31T23:59:59-01:00", "10000-01-01 00:59:59+00"),
        "before_1": ("0001-01-01T00:00:00+01:00", "0001-12-31 23:00:00+00 BC"),
    },
    "sqlite": {
        "after_9999": ("9999-12-31T23:59:59-01:00", "10000-01-01 00:59:59"),
        "before_1": ("0001-01-01T00:00:00+01:00", "0000-12-31 23:00:00"),
    },
}


def stored_by_an_older_deployment(which: str, **state) -> InboxEvent:
    """An inbox row whose ``occurred_at`` column holds what the body named, written with raw
    SQL as no current code path can write it."""
    body_value, column_value = STORED[connection.vendor][which]
    body = research_event(occurred_at=body_value)
    event = InboxEventFactory(body=body, occurred_at=None, **state)
    table = connection.ops.quote_name(InboxEvent._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET occurred_at = %s WHERE id = %s",  # noqa: S608
            [column_value, event.pk],
        )
    return event


@pytest.mark.parametrize("which", ["after_9999", "before_1"])
def test_every_page_that_shows_such_a_row_renders(admin_client, api, which):
    # Dead-lettered by the release that met it (docs/architecture.md, "Compatibility paths
    # and upgrades").
    event = stored_by_an_older_deployment(which, processing_status="dead_lettered")
    mismatch = FingerprintMismatch.objects.create(
        event_id=event.pk,
        raw_body=b"{}",
        original_fingerprint="a" * 64,
        conflicting_fingerprint="b" * 64,
        conflicting_payload_hash="c" * 64,
    )
    pages = [
        reverse("admin:webhooks_inboxevent_changelist"),
        reverse("admin:webhooks_inboxevent_change", args=[event.pk]),
        reverse("admin:webhooks_deadletteredevent_changelist"),
        reverse("admin:webhooks_deadletteredevent_change", args=[event.pk]),
        reverse("admin:webhooks_fingerprintmismatch_changelist"),
        reverse("admin:webhooks_fingerprintmismatch_change", args=[mismatch.pk]),
        reverse("admin:index"),
    ]
    for page in pages:
        response = admin_client.get(page)
        assert response.status_code == 200, page
        assert event.event_id.encode() in response.content or page.endswith(
            "/admin/"
        ), page
    if connection.vendor == "postgresql":  # the database's own text of the date
        detail = admin_client.get(pages[1]).content.decode()
        assert STORED["postgresql"][which][1] in detail
    status = api.get(f"/api/webhooks/research-sync/events/{event.event_id}/")
    assert status.status_code == 200
    assert status.json()["processing_status"] == "dead_lettered"


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="only PostgreSQL could store such a date: SQLite ingest refused it with a 500",
)
def test_a_document_stored_with_an_unreadable_date_is_healed_by_its_next_event():
    """The handler reads of a document only what the ordering rule compares and overwrites
    the rest: a newer event replaces the unreadable published_at and the document reads
    back again."""
    first = InboxEventFactory(
        body=research_event(entity_id="doc-poisoned", source_version=1)
    )
    assert inbox_event_process(inbox_event_id=first.pk).status == "processed"
    table = connection.ops.quote_name(ResearchDocument._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET published_at = %s WHERE entity_id = %s",  # noqa: S608
            ["10000-01-01 00:59:59+00", "doc-poisoned"],
        )
    later_body = research_event(entity_id="doc-poisoned", source_version=2)
    later = InboxEventFactory(body=later_body)

    outcome = inbox_event_process(inbox_event_id=later.pk)

    assert outcome.status == "processed"
    document = ResearchDocument.objects.get(entity_id="doc-poisoned")
    published = later_body["source"]["published_at"].replace("Z", "+00:00")
    assert document.published_at.isoformat() == published


def test_a_body_whose_published_at_an_older_deployment_accepted_is_dead_lettered():
    body = research_event()
    body["source"]["published_at"] = "9999-12-31T23:59:59-01:00"
    event = InboxEventFactory(body=body)

    outcome = inbox_event_process(inbox_event_id=event.pk)

    assert outcome.status == "dead_lettered"
    event.refresh_from_db()
    assert event.attempts == 1
    assert "published_at" in event.error_message
    assert not ResearchDocument.objects.exists()


def test_the_body_of_such_a_row_is_left_as_stored():
    event = stored_by_an_older_deployment("after_9999")
    inbox_event_process(inbox_event_id=event.pk)
    body = InboxEvent.objects.values_list("raw_body", flat=True).get(pk=event.pk)
    assert json.loads(bytes(body))["occurred_at"] == "9999-12-31T23:59:59-01:00"


# --- strings the database refuses -------------------------------------------------------------


@pytest.mark.parametrize(
    ("member", "value", "message"),
    [
        ("title", "A title\x00with a NUL", "NUL"),
        ("url", "https://example.org/\x00", "NUL"),
        ("content_hash", "sha256:\x00", "NUL"),
        ("content_hash", "h" * 256, "At most 255 characters."),
    ],
)
def test_a_source_member_the_database_cannot_store_is_422(
    http, source, member, value, message
):
    body = research_event()
    body["source"][member] = value

    response = signed_post(http, source.slug, body)

    assert response.status_code == 422, response.content
    details = response.json()["details"]
    assert message in details["source"][member][0]
    assert not InboxEvent.objects.exists()


def test_a_content_hash_of_the_full_column_length_is_stored_and_applied(http, source):
    body = research_event()
    body["source"]["content_hash"] = "h" * 255
    assert signed_post(http, source.slug, body).status_code == 202
    event = InboxEvent.objects.get()
    assert inbox_event_process(inbox_event_id=event.pk).status == "processed"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"summary": "a summary\x00"}, "data.summary must not contain NUL characters"),
        ({"authors": ["Ada", "B\x00b"]}, "data.authors[1] must not contain NUL"),
        (
            {"citations": [{"text": "q\x00", "reference_url": "https://x.org/"}]},
            "data.citations[0].text must not contain NUL",
        ),
        (
            {"citations": [{"text": "q", "reference_url": "https://x.org/\x00"}]},
            "data.citations[0].reference_url must not contain NUL",
        ),
    ],
)
def test_data_the_database_cannot_store_is_dead_lettered_on_the_first_attempt(
    data, reason
):
    # ``data`` is the domain's to validate, at processing: ingest stores it as sent.
    event = InboxEventFactory(body=research_event(data=data))

    outcome = inbox_event_process(inbox_event_id=event.pk)

    assert outcome.status == "dead_lettered"
    event.refresh_from_db()
    assert event.attempts == 1
    assert event.error_message.startswith(reason), event.error_message
    (attempt,) = InboxAttempt.objects.filter(event=event)
    assert attempt.outcome == "dead_lettered"
    assert attempt.error == event.error_message
    assert not ResearchDocument.objects.exists()
