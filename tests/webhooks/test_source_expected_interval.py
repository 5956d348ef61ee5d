"""The expected delivery interval of a source (what the "no delivery" alert compares with,
docs/runbook.md): the one field of a source an operator edits in the admin."""

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from tests.webhooks.factories import WebhookSourceFactory
from trail.models import OperatorAction
from webhooks.models import WebhookSource

pytestmark = pytest.mark.django_db


def test_an_operator_sets_and_clears_the_expected_interval_in_the_admin(
    operator_client,
):
    source = WebhookSourceFactory(slug="papers", timestamp_tolerance_seconds=120)
    url = reverse("admin:webhooks_webhooksource_change", args=[source.pk])
    page = operator_client.get(url)
    assert page.status_code == 200
    assert list(page.context["adminform"].form.fields) == [
        "expected_delivery_interval_seconds",
        "client",
    ]

    response = operator_client.post(
        url,
        {
            "expected_delivery_interval_seconds": "3600",
            # Read-only fields posted anyway are ignored.
            "slug": "renamed",
            "is_enabled": "",
            "timestamp_tolerance_seconds": "1",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    source.refresh_from_db()
    assert source.expected_delivery_interval_seconds == 3600
    assert (source.slug, source.is_enabled, source.timestamp_tolerance_seconds) == (
        "papers",
        True,
        120,
    )
    # Who changed it, and when, from what to what: an operator action.
    action = OperatorAction.objects.get(action="set_expected_interval")
    assert action.actor_name == "operator"
    assert (action.details["before"], action.details["after"]) == (None, 3600)

    operator_client.post(url, {"expected_delivery_interval_seconds": ""})
    source.refresh_from_db()
    assert source.expected_delivery_interval_seconds is None


def test_an_interval_under_a_minute_is_refused(operator_client):
    source = WebhookSourceFactory(slug="papers")
    url = reverse("admin:webhooks_webhooksource_change", args=[source.pk])
    response = operator_client.post(url, {"expected_delivery_interval_seconds": "30"})
    assert response.status_code == 200  # the form again, with its error
    assert response.context["adminform"].form.errors
    source.refresh_from_db()
    assert source.expected_delivery_interval_seconds is None
    # And the database refuses it too, whoever writes.
    with pytest.raises(IntegrityError), transaction.atomic():
        WebhookSource.objects.filter(pk=source.pk).update(
            expected_delivery_interval_seconds=0
        )


def test_auditors_see_the_interval_and_cannot_change_it(auditor_client):
    source = WebhookSourceFactory(slug="papers", expected_delivery_interval_seconds=900)
    url = reverse("admin:webhooks_webhooksource_change", args=[source.pk])
    page = auditor_client.get(url)
    assert page.status_code == 200
    assert "900" in page.content.decode()
    response = auditor_client.post(url, {"expected_delivery_interval_seconds": "60"})
    assert response.status_code == 403
    source.refresh_from_db()
    assert source.expected_delivery_interval_seconds == 900
