"""What ``GET /api/webhooks/<slug>/events/<event_id>/`` tells a client about a failure: one
stable message per outcome, never the internal error text, which stays in the admin
(docs/security.md, "Error text")."""

import pytest
from django.urls import reverse

from tests.integrations.research.factories import research_event
from tests.webhooks.factories import InboxEventFactory
from webhooks.models import InboxEvent, WebhookSource
from webhooks.processing import inbox_event_process

from .test_unstorable_values import stored_by_an_older_deployment

pytestmark = pytest.mark.django_db

SQL_FRAGMENTS = (
    "SELECT",
    "webhooks_webhooksecret",
    "no_such_column",
    "LINE 1",
    "Error",
)


@pytest.fixture
def failing_source(settings):
    settings.WEBHOOK_INTEGRATIONS = {
        **settings.WEBHOOK_INTEGRATIONS,
        "failing-sql": "tests.webhooks.failing_integration.integration",
    }
    return WebhookSource.objects.create(slug="failing", handler="failing-sql")


def status_of(api, slug: str, event_id: str) -> dict:
    response = api.get(f"/api/webhooks/{slug}/events/{event_id}/")
    assert response.status_code == 200
    return response.json()


def assert_no_internal_text(message: str) -> None:
    for fragment in SQL_FRAGMENTS:
        assert fragment not in message, message


def test_a_failure_quoting_sql_reaches_the_client_as_a_generic_message(
    api, failing_source, admin_client, settings
):
    event = InboxEventFactory(source=failing_source)

    assert inbox_event_process(inbox_event_id=event.pk).status == "failed"
    stored = InboxEvent.objects.get(pk=event.pk).error_message
    assert "no_such_column" in stored  # the full text is kept

    status = status_of(api, "failing", event.event_id)
    assert status["processing_status"] == "failed"
    assert status["error_message"] == "processing failed; will retry"
    assert_no_internal_text(status["error_message"])

    # Every retry fails the same way, until the retries run out.
    for _ in range(settings.INBOX_MAX_ATTEMPTS - 1):
        InboxEvent.objects.filter(pk=event.pk).update(next_attempt_at=None)
        inbox_event_process(inbox_event_id=event.pk)
    status = status_of(api, "failing", event.event_id)
    assert status["processing_status"] == "dead_lettered"
    assert (
        status["error_message"] == "dead-lettered: processing failed on every attempt"
    )

    # Operators and auditors read the full text in the admin.
    page = admin_client.get(
        reverse("admin:webhooks_inboxevent_change", args=[event.pk])
    )
    assert b"no_such_column" in page.content


def test_data_the_domain_rejects_is_named_as_rejected_without_its_details(api):
    event = InboxEventFactory(body=research_event(data={"summary": "nul\x00"}))
    inbox_event_process(inbox_event_id=event.pk)
    assert "NUL" in InboxEvent.objects.get(pk=event.pk).error_message

    status = status_of(api, "research-sync", event.event_id)
    assert status["processing_status"] == "dead_lettered"
    assert status["error_message"] == "dead-lettered: the event's data was rejected"


def test_a_row_the_database_cannot_give_back_is_named_as_rejected_without_its_error(
    api,
):
    event = stored_by_an_older_deployment("before_1")
    inbox_event_process(inbox_event_id=event.pk)
    stored = InboxEvent.objects.values_list("error_message", flat=True).get(pk=event.pk)
    assert "occurred_at" in stored  # the full text, naming the value, is kept

    status = status_of(api, "research-sync", event.event_id)
    assert status["processing_status"] == "dead_lettered"
    assert status["error_message"] == "dead-lettered: the event's data was rejected"
    assert_no_internal_text(status["error_message"])


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("received", ""),
        ("processing", ""),
        ("processed", ""),
        ("ignored_out_of_order", "ignored: a newer event was already applied"),
        ("ignored_duplicate_version", "ignored: this version was already applied"),
        ("ignored_unsupported", "ignored: the event type is not supported"),
        (
            "dead_lettered",
            "dead-lettered: the cause was not recorded",
        ),  # migration 0014
    ],
)
def test_each_other_status_has_its_one_message_whatever_the_stored_note(
    api, status, message
):
    event = InboxEventFactory(
        processing_status=status,
        error_message="OperationalError: could not connect to server at 10.0.0.5",
        dead_letter_cause="unrecorded" if status == "dead_lettered" else "",
    )
    assert status_of(api, "research-sync", event.event_id)["error_message"] == message
