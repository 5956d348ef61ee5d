"""Secret rotation from the admin: operators only, the secret typed in and never shown."""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client
from django.urls import reverse
from django.views.debug import ExceptionReporter

from tests.console import admin_action
from tests.webhooks.factories import WebhookSourceFactory, signed_post
from trail.models import OperatorAction
from webhooks.models import WebhookSecret

pytestmark = pytest.mark.django_db

NEW_SECRET = "operator-chosen-secret-0123456789"


def rotate(http: Client, source, **fields):
    answer = {
        "post": "yes",
        "secret": NEW_SECRET,
        "grace_seconds": "600",
        "reason": "quarterly rotation",
    }
    return admin_action(
        http,
        "webhooks_webhooksource",
        "rotate_secret",
        source,
        follow=True,
        **(answer | fields),
    )


def post_signed(source, secret: str) -> int:
    body = b'{"event_id": "evt-rot-1"}'
    response = signed_post(
        Client(),
        source.slug,
        body,
        event_id="evt-rot-1",
        scheme=source.scheme,
        secret=secret,
    )
    return response.status_code


def test_operator_rotates_a_secret_and_it_signs_from_now_on(operator_client, operator):
    source = WebhookSourceFactory(slug="rotated")
    old = WebhookSecret.objects.get(source=source)
    # The confirmation page asks for the secret without showing any.
    page = admin_action(
        operator_client, "webhooks_webhooksource", "rotate_secret", source
    )
    assert page.status_code == 200
    assert b'type="password"' in page.content
    assert old.secret.encode() not in page.content

    response = rotate(operator_client, source)
    assert b"Rotated the secret of rotated" in response.content
    assert NEW_SECRET.encode() not in response.content
    assert old.secret.encode() not in response.content
    old.refresh_from_db()
    assert old.expires_at is not None  # the grace period
    assert (
        WebhookSecret.objects.filter(source=source, expires_at__isnull=True).count()
        == 1
    )
    action = OperatorAction.objects.get(action="rotate_secret")
    assert action.actor == operator
    assert action.reason == "quarterly rotation"
    assert action.details == {"source": "rotated", "grace_seconds": 600}
    assert NEW_SECRET not in str(action.details)
    # Both secrets verify during the grace period (the body is not a valid envelope: 422,
    # past the signature check; a wrong secret would be 401).
    assert post_signed(source, NEW_SECRET) == 422
    assert post_signed(source, old.secret) == 422
    assert post_signed(source, "some-other-secret-0123456789") == 401


def test_a_short_secret_is_refused_and_nothing_changes(operator_client):
    source = WebhookSourceFactory(slug="rotated-short")
    response = rotate(operator_client, source, secret="short")
    assert response.status_code == 200
    assert b"at least 16" in response.content
    assert WebhookSecret.objects.filter(source=source).count() == 1
    assert not OperatorAction.objects.filter(action="rotate_secret").exists()


@pytest.mark.parametrize(
    ("stray", "problem"),
    [
        ("\r", b"contains a control character"),
        (" ", b"has a trailing space"),
        ("\t", b"contains a control character"),
    ],
    ids=["cr", "space", "tab"],
)
def test_a_secret_with_a_stray_character_is_refused_and_never_shown(
    operator_client, stray, problem
):
    source = WebhookSourceFactory(slug="rotated-stray")
    response = rotate(operator_client, source, secret=NEW_SECRET + stray)
    assert response.status_code == 200
    assert problem in response.content
    assert NEW_SECRET.encode() not in response.content
    assert WebhookSecret.objects.filter(source=source).count() == 1
    assert not OperatorAction.objects.filter(action="rotate_secret").exists()


def test_auditor_cannot_rotate(auditor_client):
    source = WebhookSourceFactory(slug="rotated-audit")
    page = auditor_client.get(reverse("admin:webhooks_webhooksource_changelist"))
    choices = (
        [c[0] for c in page.context["action_form"].fields["action"].choices]
        if (page.context["action_form"])
        else []
    )
    assert "rotate_secret" not in choices
    rotate(auditor_client, source)
    assert WebhookSecret.objects.filter(source=source).count() == 1
    assert not OperatorAction.objects.filter(action="rotate_secret").exists()


@pytest.fixture
def rotation_fails(monkeypatch):
    """An unexpected error inside the rotation, after the secret reached the service."""

    def unavailable(name):
        raise RuntimeError("signature scheme registry unavailable")

    monkeypatch.setattr("webhooks.sources.scheme_get", unavailable)


def test_an_error_report_of_a_rotation_never_contains_the_secret(
    operator, rotation_fails, error_records
):
    http = Client(raise_request_exception=False)
    http.force_login(operator)
    source = WebhookSourceFactory(slug="rotated-report")
    response = http.post(
        reverse("admin:webhooks_webhooksource_changelist"),
        {
            "action": "rotate_secret",
            ACTION_CHECKBOX_NAME: [source.pk],
            "post": "yes",
            "secret": NEW_SECRET,
            "grace_seconds": "600",
            "reason": "quarterly rotation",
        },
    )
    assert response.status_code == 500
    [record] = error_records
    # Built as Django's AdminEmailHandler builds an error mail, with the request's POST data
    # and every frame's local variables.
    reporter = ExceptionReporter(record.request, *record.exc_info, is_email=True)
    text, html = reporter.get_traceback_text(), reporter.get_traceback_html()
    assert "signature scheme registry unavailable" in text
    assert "quarterly rotation" in text  # the POST data is in the report
    assert NEW_SECRET not in text
    assert NEW_SECRET not in html


def test_the_debug_page_of_a_rotation_never_shows_the_secret(
    operator, rotation_fails, settings
):
    settings.DEBUG = True
    http = Client(raise_request_exception=False)
    http.force_login(operator)
    source = WebhookSourceFactory(slug="rotated-debug")
    response = http.post(
        reverse("admin:webhooks_webhooksource_changelist"),
        {
            "action": "rotate_secret",
            ACTION_CHECKBOX_NAME: [source.pk],
            "post": "yes",
            "secret": NEW_SECRET,
            "grace_seconds": "600",
            "reason": "quarterly rotation",
        },
        HTTP_ACCEPT="text/html",
    )
    assert response.status_code == 500
    page = response.content.decode()
    assert "signature scheme registry unavailable" in page
    assert "quarterly rotation" in page
    assert NEW_SECRET not in page
