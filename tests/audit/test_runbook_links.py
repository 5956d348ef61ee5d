"""The admin pages docs/runbook.md sends an operator to exist, with the filters it names."""

import re
from pathlib import Path

import pytest

from tests.webhooks.factories import WebhookSourceFactory

pytestmark = pytest.mark.django_db

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"


def runbook_admin_urls() -> list[str]:
    return sorted(set(re.findall(r"`(/admin/[^`\s]*)`", RUNBOOK.read_text())))


def test_the_runbook_names_the_admin_pages_of_each_alert():
    urls = runbook_admin_urls()
    for page in (
        "/admin/webhooks/deadletteredevent/",
        "/admin/webhooks/fingerprintmismatch/",
        "/admin/trail/operatoraction/",
        "/admin/webhooks/bulkreplayjob/",
        "/admin/webhooks/inboxevent/partitions/",
    ):
        assert any(url.startswith(page) for url in urls), page
    assert any("processing_status__exact=" in url for url in urls)


def test_every_admin_page_of_the_runbook_opens_for_an_operator(operator_client):
    source = WebhookSourceFactory(slug="papers")
    for url in runbook_admin_urls():
        url = url.replace("<source_pk>", str(source.pk))
        response = operator_client.get(url)
        # An unknown filter sends the admin back to the list with ?e=1: a 302.
        assert response.status_code == 200, (url, response.status_code)
