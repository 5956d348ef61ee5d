"""A document's whole story in a real browser (Debian's chromium, driven by Playwright) at
1400 px: an auditor walks from ``doc42`` to its dead-lettered event and to the operator who
replayed it by clicking links only, through the event's page, and again straight from the
document's table of events; nothing on the way scrolls sideways.

With ``CONSOLE_SCREENSHOTS=<directory>`` set, the document's page is saved there
(docs/console/research-document-events.png)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from audit.roles import OPERATORS
from tests.audit.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.console import PASSWORD, make_user
from tests.research.document_story import document_with_every_kind_of_event

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WIDTH = 1400


def _fits(page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= WIDTH, (page.url, width)


def test_an_auditor_walks_from_a_document_to_its_dead_letter_and_who_replayed_it(
    live_server, roles, operator, auditor, monkeypatch
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    story = document_with_every_kind_of_event(
        replayer=operator, bulk_replayer=make_user("night-operator", OPERATORS)
    )
    documents = reverse("admin:research_researchdocument_changelist")
    replay_page = reverse("admin:trail_operatoraction_change", args=[story.replay.pk])

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})
            page.set_default_timeout(15_000)
            page.goto(f"{live_server.url}/admin/login/?next={documents}")
            page.fill("#id_username", "auditor")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url(f"**{documents}")

            page.click("#result_list a:text-is('doc42')")
            table = page.locator("#document-events")
            expect(table).to_be_visible()
            expect(table.locator("tr.document-event")).to_have_count(7)
            dead = table.locator("tr.document-event[data-event-id='evt_doc42_3']")
            expect(dead).to_contain_text("Dead-lettered")
            expect(dead).to_contain_text("3 attempts in 3 rounds")
            _fits(page)
            shots = os.environ.get("CONSOLE_SCREENSHOTS")
            if shots:
                page.screenshot(
                    path=str(Path(shots) / "research-document-events.png"),
                    full_page=True,
                )

            # Through the event's page: its story names the replay that began round 2.
            dead.locator("td.document-event-id a").click()
            expect(page.locator("#event-story")).to_be_visible()
            expect(page.locator("body")).to_contain_text("evt_doc42_3")
            _fits(page)
            page.locator("#event-story tr.story-attempt", has_text="round 2").locator(
                "a", has_text="replay by operator"
            ).click()
            expect(page.locator(".field-actor_name .readonly")).to_have_text("operator")
            expect(page.locator(".field-reason .readonly")).to_have_text(
                "the validation was relaxed"
            )
            through_event = page.url

            # Straight from the document's table of events.
            page.go_back()
            page.go_back()
            page.locator(
                "#document-events tr[data-event-id='evt_doc42_3'] "
                "a.document-event-operator:text-is('night-operator')"
            ).click()
            expect(page.locator(".field-actor_name .readonly")).to_have_text(
                "night-operator"
            )
            _fits(page)
            straight = page.url
        finally:
            browser.close()

    assert through_event.endswith(replay_page)
    assert straight.endswith(
        reverse("admin:trail_operatoraction_change", args=[story.bulk_replay.pk])
    )
