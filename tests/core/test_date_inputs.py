"""Dates typed into the console and the API, at the ends of the calendar and past them
(docs/security.md, "Values the database refuses"): every one is a clear form error or an
empty list, never a 500. Python's dates end at 0001-01-01 and 9999-12-31; a day added to
the last one, or a year to 9999, overflows."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from core.admin.filters import DateRangeFilter
from deployments.models import StatusSync
from tests.deployments.factories import deployment_body, idempotent_post
from tests.research.factories import document_event_apply
from tests.webhooks.factories import DeadLetteredEventFactory, InboxEventFactory
from webhooks.models import BulkReplayJob

pytestmark = pytest.mark.django_db

INBOX = "admin:webhooks_inboxevent_changelist"
# UTC, a zone east of it and one west of it: a day at an end of the calendar is a time past
# that end in UTC in one of them.
ZONES = ["UTC", "Asia/Tokyo", "Pacific/Honolulu"]


def _changelist(model) -> str:
    return f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"


def _range_fields(model_admin) -> list[str]:
    return [
        item[0]
        for item in model_admin.list_filter
        if isinstance(item, tuple) and item[1] is DateRangeFilter
    ]


# Every list of the console with a range of days, and every one with Django's date
# hierarchy (the console's own and the third-party apps' alike), as the site has them.
RANGE_LISTS = sorted(
    (_changelist(model), field)
    for model, model_admin in admin.site._registry.items()
    for field in _range_fields(model_admin)
)
HIERARCHY_LISTS = sorted(
    (_changelist(model), model_admin.date_hierarchy)
    for model, model_admin in admin.site._registry.items()
    if model_admin.date_hierarchy
)


def test_the_lists_checked_here_are_the_console_s_time_lists():
    assert {name for name, _ in RANGE_LISTS} >= {
        INBOX,
        "admin:webhooks_deadletteredevent_changelist",
        "admin:trail_operatoraction_changelist",
        "admin:webhooks_bulkreplayjob_changelist",
        "admin:webhooks_signaturefailure_changelist",
        "admin:deployments_deployment_changelist",
        "admin:deployments_build_changelist",
        "admin:deployments_statussync_changelist",
        "admin:idempotency_idempotencyrecord_changelist",
    }
    assert {name for name, _ in HIERARCHY_LISTS} >= {
        INBOX,
        "admin:webhooks_fingerprintmismatch_changelist",
        "admin:deployments_deployment_changelist",
    }


@pytest.fixture
def superuser_client():
    """A superuser: the only one who sees the third-party apps' lists (login attempts,
    task results), which have a date hierarchy too."""
    user = get_user_model().objects.create_superuser(
        "root", "root@example.com", "correct-horse-battery"
    )
    client = Client()
    client.force_login(user)
    return client


def _page(client, name: str, params: dict):
    response = client.get(reverse(name), params, follow=True)
    assert response.status_code == 200, (name, params, response.status_code)
    return response


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.mark.parametrize(("name", "field"), RANGE_LISTS)
def test_a_range_of_days_at_the_ends_of_the_calendar_is_answered(
    operator_client, name, field
):
    # The last day of the calendar as the range's end: everything up to its end, which
    # Python cannot write as "the day after".
    _page(operator_client, name, {f"{field}__to": "9999-12-31"})
    _page(operator_client, name, {f"{field}__from": "9999-12-31"})
    _page(operator_client, name, {f"{field}__from": "0001-01-01"})
    _page(operator_client, name, {f"{field}__to": "0001-01-01"})
    _page(
        operator_client,
        name,
        {f"{field}__from": "0001-01-01", f"{field}__to": "9999-12-31"},
    )
    # Past the calendar, or not a day: said on the page, the bound left out.
    for value in ("10000-01-01", "0000-01-01", "2026-02-30", "yesterday", "9999-12-32"):
        for end in ("from", "to"):
            response = _page(operator_client, name, {f"{field}__{end}": value})
            [message] = _messages(response)
            assert f"{value!r} is not a day" in message, message
            assert "0001-01-01 to 9999-12-31" in message


@pytest.mark.parametrize("zone", ZONES)
def test_the_range_s_rows_at_the_ends_of_the_calendar(operator_client, settings, zone):
    settings.TIME_ZONE = zone
    now = timezone.now()
    rows = {InboxEventFactory(received_at=now).pk, InboxEventFactory().pk}

    def listed(**params):
        response = _page(operator_client, INBOX, params)
        return {obj.pk for obj in response.context["cl"].result_list}

    assert listed(received_at__to="9999-12-31") == rows
    assert listed(received_at__from="0001-01-01", received_at__to="9999-12-31") == rows
    assert listed(received_at__from="9999-12-31") == set()
    assert listed(received_at__to="0001-01-01") == set()
    # A bad end is named and left out; the other end still holds.
    response = _page(
        operator_client,
        INBOX,
        {"received_at__from": "10000-01-01", "received_at__to": "0001-01-01"},
    )
    assert {obj.pk for obj in response.context["cl"].result_list} == set()
    page = response.content.decode()
    assert "&#x27;10000-01-01&#x27; is not a day" in page
    # The filter's own form says it too, beside the field.
    assert 'class="errorlist"' in page


@pytest.mark.parametrize(("name", "field"), HIERARCHY_LISTS)
def test_the_date_hierarchy_at_the_end_of_the_calendar_is_answered(
    operator_client, superuser_client, name, field
):
    client = (
        superuser_client
        if name.startswith("admin:axes") or ("celery" in name)
        else operator_client
    )
    last = [
        {f"{field}__year": "9999"},
        {f"{field}__year": "9999", f"{field}__month": "12"},
        {f"{field}__year": "9999", f"{field}__month": "12", f"{field}__day": "31"},
        {f"{field}__year": "1", f"{field}__month": "1", f"{field}__day": "1"},
    ]
    for params in last:
        response = _page(client, name, params)
        assert _messages(response) == [], params
    # Not a period of the calendar: the list without its filters, and why.
    for params in (
        {f"{field}__year": "10000"},
        {f"{field}__year": "0"},
        {f"{field}__year": "2026", f"{field}__month": "13"},
        {f"{field}__year": "2026", f"{field}__month": "2", f"{field}__day": "30"},
        {f"{field}__year": "next"},
    ):
        response = _page(client, name, params)
        [message] = _messages(response)
        assert "filter of this list was not understood" in message, params


@pytest.mark.parametrize("zone", ZONES)
def test_the_hierarchy_s_periods_at_the_ends_list_their_rows(
    operator_client, settings, zone
):
    settings.TIME_ZONE = zone
    InboxEventFactory()

    def listed(**params):
        response = _page(operator_client, INBOX, params)
        return {obj.pk for obj in response.context["cl"].result_list}

    assert listed(received_at__year="9999") == set()
    assert listed(received_at__year="9999", received_at__month="12") == set()
    assert (
        listed(received_at__year="9999", received_at__month="12", received_at__day="31")
        == set()
    )
    # The first periods: before them nothing (in a zone east of UTC, their start is a
    # date before the year 1 in UTC).
    assert listed(received_at__year="1") == set()
    assert listed(received_at__year="1", received_at__month="1") == set()
    assert (
        listed(received_at__year="1", received_at__month="1", received_at__day="1")
        == set()
    )
    this_year = timezone.localtime().year
    assert len(listed(received_at__year=str(this_year))) == 1


def test_a_bad_value_of_django_s_own_date_filter_is_named(operator_client):
    InboxEventFactory()
    response = _page(operator_client, INBOX, {"received_at__gte": "10000-01-01"})
    [message] = _messages(response)
    assert "filter of this list was not understood" in message
    assert len(response.context["cl"].result_list) == 1


# --- the API --------------------------------------------------------------------------


@pytest.mark.parametrize("zone", ZONES)
def test_updated_since_at_the_ends_of_the_calendar_is_422_or_a_list(
    api, settings, zone
):
    """A date-time the schema allows bounds the list as the first or the last instant
    there is (``core.fields.InstantBoundField``); what is not one is 422."""
    settings.TIME_ZONE = zone
    documents = "/api/research/documents/"
    document_event_apply()
    for value, found in (
        ("0001-01-01", 1),
        ("0001-01-01T00:00:00", 1),
        ("0001-01-01T00:00:00+05:00", 1),
        ("0001-01-02T00:00:00Z", 1),
        ("9999-12-30T23:59:59Z", 0),
        ("9999-12-31T23:59:59", 0),
        ("9999-12-31T23:59:59-05:00", 0),
    ):
        answer = api.get(documents, {"updated_since": value})
        assert answer.status_code == 200, (value, answer.content)
        assert len(answer.json()["results"]) == found, value
    for value in ("10000-01-01T00:00:00Z", "garbage"):
        answer = api.get(documents, {"updated_since": value})
        assert answer.status_code == 422, (value, answer.content)
        assert answer.json()["error"] == "invalid_payload"
        assert "updated_since" in answer.json()["details"]


@pytest.mark.parametrize("zone", ZONES)
def test_a_status_sync_dated_past_the_readable_range_is_422(
    api, operator_client, settings, zone
):
    settings.TIME_ZONE = zone
    answer = idempotent_post(api, "/api/deployments/", deployment_body(), key="dep-1")
    deployment_id = answer.json()["deployment_id"]
    for number, value in enumerate(
        ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00", "0001-01-01T12:00:00+05:00")
    ):
        answer = api.post(
            "/api/status-sync/",
            data=json.dumps(
                {
                    "deployment_id": deployment_id,
                    "status": "running",
                    "reported_at": value,
                }
            ),
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY=f"sync-{number}",
        )
        assert answer.status_code == 422, (value, answer.content)
        assert "reported_at" in answer.json()["details"]
    assert not StatusSync.objects.exists()
    # The earliest one kept is read back in any zone.
    answer = api.post(
        "/api/status-sync/",
        data=json.dumps(
            {
                "deployment_id": deployment_id,
                "status": "running",
                "reported_at": "0001-01-02T00:00:00Z",
            }
        ),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="sync-edge",
    )
    assert answer.status_code == 201, answer.content
    _page(operator_client, "admin:deployments_statussync_changelist", {})


@pytest.mark.parametrize("zone", ZONES)
def test_a_bulk_replay_since_past_the_readable_range_is_a_form_error(
    operator_client, settings, zone
):
    settings.TIME_ZONE = zone
    dead = DeadLetteredEventFactory()
    add = reverse("admin:webhooks_bulkreplayjob_add")

    def post(day: str, time: str):
        return operator_client.post(
            add,
            {
                "source": dead.source.pk,
                "status": "dead_lettered",
                "since_0": day,
                "since_1": time,
                "event_ids_text": "",
                "reason": "provider outage",
            },
        )

    for day, time in (
        ("0001-01-01", "00:00:00"),
        ("9999-12-31", "23:59:59"),
        ("10000-01-01", "00:00:00"),
    ):
        answer = post(day, time)
        assert answer.status_code == 200, (day, answer.status_code)
        errors = answer.context["adminform"].form.errors
        assert "since" in errors, (day, errors)
    assert not BulkReplayJob.objects.exists()
    answer = post(
        (timezone.localtime() - timedelta(days=1)).date().isoformat(), "00:00:00"
    )
    assert answer.status_code == 302
    assert BulkReplayJob.objects.get().dry_run_count == 1


def test_replay_events_since_past_the_readable_range_is_refused():
    DeadLetteredEventFactory()
    for value in (
        "0001-01-01T00:00:00+05:00",
        "9999-12-31T23:59:59-05:00",
        "9999-12-31T00:00:00Z",
    ):
        with pytest.raises(CommandError, match="since: Must lie between 0001-01-02"):
            call_command("replay_events", "--since", value, "--dry-run")
    with pytest.raises(CommandError, match="ISO 8601"):
        call_command("replay_events", "--since", "2026-02-30T00:00:00Z", "--dry-run")
    assert not BulkReplayJob.objects.exists()
