"""How the console shows a time, a duration and a status, and the links it does not offer."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from django.urls import reverse

from core.admin.status import STATUS_WORDS, status_badge, status_words_register
from core.times import duration_display as duration_shown
from core.times import time_display as time_shown
from tests.deployments.factories import DeploymentFactory
from tests.webhooks.factories import DeadLetteredEventFactory

MOMENT = datetime(2026, 12, 1, 15, 41, 2, 345000, tzinfo=UTC)


def test_a_time_reads_to_the_second_with_its_zone():
    assert time_shown(MOMENT) == "2026-12-01 15:41:02 UTC"
    assert time_shown(None) == "-"
    with override_settings(TIME_ZONE="Europe/Paris"):
        assert time_shown(MOMENT) == "2026-12-01 16:41:02 CET"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "-"),
        (0.3204, "0.320 s"),
        (4.24, "4.240 s"),
        (-2.5, "-2.500 s"),
        (185, "3 min 5 s"),
        (7800, "2 h 10 min"),
        (28_898_755, "334 d 11 h"),
    ],
)
def test_a_duration_carries_its_unit(seconds, shown):
    assert duration_shown(seconds) == shown


def test_a_status_has_one_wording_and_colour():
    assert status_badge("dead_lettered") == (
        '<span class="badge badge-error" data-status="dead_lettered">Dead-lettered</span>'
    )
    assert ">Ignored (out of order)<" in status_badge("ignored_out_of_order")
    assert "badge-neutral" in status_badge("something_new")
    assert ">Something new<" in status_badge("something_new")
    assert ">Paused since <b>" not in status_badge("paused", "since <b>")  # escaped


def test_an_app_registers_its_words_and_a_shared_status_keeps_one_wording(monkeypatch):
    """Each app registers the words of its statuses from its admin; a status another app
    registered already is accepted again in the same words and tone, never in others."""
    monkeypatch.setattr("core.admin.status.STATUS_WORDS", dict(STATUS_WORDS))
    status_words_register({"failed": ("Failed", "error"), "brand_new": ("New", "ok")})
    assert ">New<" in status_badge("brand_new")
    with pytest.raises(ImproperlyConfigured, match="'failed'"):
        status_words_register({"failed": ("Broken", "error")})
    assert ">Failed<" in status_badge("failed")


@pytest.mark.django_db
def test_the_admin_s_own_fields_use_the_same_format(auditor_client):
    event = DeadLetteredEventFactory(received_at=MOMENT - timedelta(days=1))
    page = auditor_client.get(
        reverse("admin:webhooks_inboxevent_change", args=[event.pk])
    ).content.decode()
    assert "2026-11-30 15:41:02 UTC" in page


@pytest.mark.django_db
def test_no_view_site_no_view_on_site_and_no_empty_history(auditor_client):
    deployment = DeploymentFactory()
    index = auditor_client.get(reverse("admin:index")).content.decode()
    assert "View site" not in index
    page = auditor_client.get(
        reverse("admin:deployments_deployment_change", args=[deployment.pk])
    ).content.decode()
    assert "View on site" not in page
    assert 'class="historylink"' not in page


@pytest.mark.django_db
def test_status_filters_use_the_badges_words(auditor_client):
    page = auditor_client.get(
        reverse("admin:webhooks_inboxevent_changelist")
    ).content.decode()
    assert "?processing_status__exact=ignored_out_of_order" in page
    assert ">Ignored (out of order)</a>" in page and "Ignored Out Of Order" not in page
    assert ">Dead-lettered</a>" in page
    jobs = auditor_client.get(
        reverse("admin:webhooks_bulkreplayjob_changelist")
    ).content.decode()
    assert ">Counted, not started</a>" in jobs


@pytest.mark.django_db
def test_history_shows_where_the_admin_recorded_some(client, django_user_model):
    from django.contrib.admin.models import CHANGE, LogEntry
    from django.contrib.contenttypes.models import ContentType

    root = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    other = django_user_model.objects.create_user("other")
    client.force_login(root)
    url = reverse("admin:auth_user_change", args=[other.pk])
    assert 'class="historylink"' not in client.get(url).content.decode()
    LogEntry.objects.create(
        user=root,
        content_type=ContentType.objects.get_for_model(other),
        object_id=str(other.pk),
        object_repr=str(other),
        action_flag=CHANGE,
    )
    assert 'class="historylink"' in client.get(url).content.decode()


@pytest.mark.django_db
def test_the_console_has_a_favicon_served_at_the_root(auditor_client, caplog):
    """Every browser asks for /favicon.ico: a 404 there was a console error and a WARNING
    log line ("Not Found: /favicon.ico") on every page."""
    from pathlib import Path

    page = auditor_client.get(reverse("admin:index")).content.decode()
    assert '<link rel="icon" href="/favicon.ico"' in page
    with caplog.at_level("WARNING"):
        response = auditor_client.get("/favicon.ico")
        body = b"".join(response.streaming_content)
    assert response.status_code == 200
    assert response["Content-Type"] in ("image/x-icon", "image/vnd.microsoft.icon")
    icon = Path(__file__).resolve().parents[2] / "core" / "public" / "favicon.ico"
    assert body == icon.read_bytes()
    assert body[:4] == b"\x00\x00\x01\x00"  # an icon file
    assert [r for r in caplog.records if r.levelname == "WARNING"] == []
