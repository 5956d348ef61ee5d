"""A real browser (Debian's chromium, driven by Playwright) against the live server: an operator
replays a dead-lettered event from the dead-letter queue; the dashboard reads well."""

import pytest
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from audit.roles import AUDITORS, OPERATORS
from core.relay.loop import Relay
from tests.broker import broker_messages, queued_inbox_event_ids
from tests.console import PASSWORD, make_user
from tests.webhooks.factories import (
    DeadLetteredEventFactory,
    InboxEventFactory,
    WebhookSourceFactory,
    paused_at_of,
)
from trail.models import OperatorAction
from webhooks.models import ProcessingStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def test_operator_replays_a_dead_letter_in_a_real_browser(
    live_server, roles, empty_broker, monkeypatch
):
    # Playwright's sync API keeps an event loop in this thread; the ORM calls below are plain
    # synchronous calls between browser steps.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    make_user("operator", OPERATORS)
    dead_letter_queue = reverse("admin:webhooks_deadletteredevent_changelist")
    dead = DeadLetteredEventFactory()
    other = DeadLetteredEventFactory()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            page.goto(f"{live_server.url}/admin/login/?next={dead_letter_queue}")
            page.fill("#id_username", "operator")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url(f"**{dead_letter_queue}")
            expect(page.locator("#result_list")).to_contain_text(dead.event_id)

            page.check(f"input[name=_selected_action][value='{dead.pk}']")
            page.select_option("select[name=action]", "replay_selected")
            page.click("button[name=index]")
            page.fill("textarea[name=reason]", "replayed from the browser")
            page.click("input[name=confirm]")

            expect(page.locator("ul.messagelist li.success")).to_contain_text(
                "Replayed 1 event(s)"
            )
            expect(page.locator("#result_list")).not_to_contain_text(dead.event_id)
            expect(page.locator("#result_list")).to_contain_text(other.event_id)

            page.goto(
                live_server.url
                + reverse("admin:webhooks_inboxevent_change", args=[dead.pk])
            )
            expect(page.locator(".field-status .readonly")).to_have_text("Received")
        finally:
            browser.close()

    dead.refresh_from_db()
    other.refresh_from_db()
    assert dead.processing_status == ProcessingStatus.RECEIVED
    assert other.processing_status == ProcessingStatus.DEAD_LETTERED
    action = OperatorAction.objects.get()
    assert (action.actor_name, action.reason) == (
        "operator",
        "replayed from the browser",
    )
    # The replay publishes nothing; a relay round publishes the row.
    assert broker_messages() == []
    Relay().run_once(sweep=False)
    assert queued_inbox_event_ids() == [dead.pk]


def test_the_dashboard_uses_the_page_width_and_its_headers_read_on_one_line(
    live_server, roles, monkeypatch
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    make_user("auditor", AUDITORS)
    DeadLetteredEventFactory()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(15_000)
            page.goto(f"{live_server.url}/admin/login/?next=/admin/")
            page.fill("#id_username", "auditor")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/")
            dashboard = page.locator("#audit-dashboard").bounding_box()
            header = page.locator("#audit-dashboard th", has_text="events")
            status = page.locator("#audit-dashboard th", has_text="status").first
            header_box, status_box = header.bounding_box(), status.bounding_box()
        finally:
            browser.close()

    # The page's content is 1280 px less the admin's 40 px margins on each side.
    assert dashboard["width"] >= 1100, dashboard
    # One line of text, as tall as the "status" header next to it (not one letter per line).
    assert header_box["height"] <= status_box["height"] + 1, (header_box, status_box)
    assert header_box["width"] > header_box["height"], header_box


def test_operator_pauses_a_source_in_a_real_browser(live_server, roles, monkeypatch):
    """Select the source, choose "Pause selected sources", give a reason, confirm: the list
    shows it paused, by whom and why, and so does the dashboard."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    make_user("operator", OPERATORS)
    sources = reverse("admin:webhooks_webhooksource_changelist")
    papers = WebhookSourceFactory(slug="papers")
    other = WebhookSourceFactory(slug="other")
    InboxEventFactory.create_batch(2, source=papers)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(15_000)
            page.goto(f"{live_server.url}/admin/login/?next={sources}")
            page.fill("#id_username", "operator")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url(f"**{sources}")

            page.check(f"input[name=_selected_action][value='{papers.pk}']")
            page.select_option("select[name=action]", "pause_selected")
            page.click("button[name=index]")
            page.fill("textarea[name=reason]", "the indexer is being fixed")
            page.click("input[name=confirm]")

            expect(page.locator("ul.messagelist li.success")).to_contain_text(
                "Paused papers"
            )
            row = page.locator("#result_list tr", has_text="papers")
            expect(row).to_contain_text("the indexer is being fixed")
            expect(row.locator("td.field-state")).to_contain_text("by operator")
            expect(row.locator("td.field-held_events")).to_have_text("2")
            other_row = page.locator("#result_list tr", has_text="other")
            expect(other_row.locator("td.field-held_events")).to_have_text("-")

            page.goto(f"{live_server.url}/admin/")
            panel = page.locator("#dash-paused")
            expect(panel).to_contain_text("Paused sources")
            paused_row = panel.locator("tr[data-source='papers']")
            expect(paused_row).to_contain_text("operator")
            expect(paused_row).to_contain_text("the indexer is being fixed")
            expect(paused_row.locator("td.dash-count")).to_have_text("2")
            expect(panel.locator("tr[data-source='other']")).to_have_count(0)
        finally:
            browser.close()

    assert paused_at_of(papers) is not None and paused_at_of(other) is None
    action = OperatorAction.objects.get()
    assert (action.action, action.actor_name, action.reason) == (
        "pause_source",
        "operator",
        "the indexer is being fixed",
    )
