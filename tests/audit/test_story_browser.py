"""An event's story in a real browser (Debian's chromium, driven by Playwright) at 1400 px: an
auditor follows a document back to the body that made it and the operator who replayed its
event by clicking links only; an operator replays an event from its page.

With ``CONSOLE_SCREENSHOTS=<directory>`` set, the tests also save the pages they walk through
there as PNGs (docs/console/)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from audit.roles import OPERATORS
from tests.audit.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.console import PASSWORD, make_user
from tests.webhooks.event_story import event_with_a_story
from tests.webhooks.factories import DeadLetteredEventFactory
from trail.models import OperatorAction
from webhooks.models import ProcessingStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WIDTH = 1400


def _login(page, live_server, username: str, next_url: str) -> None:
    page.goto(f"{live_server.url}/admin/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{next_url}")


def _fits(page) -> None:
    """Nothing on the page is wider than the window: no sideways scrolling."""
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= WIDTH, (page.url, width)


def _shot(page, name: str) -> None:
    shots = os.environ.get("CONSOLE_SCREENSHOTS")
    if shots:
        page.screenshot(path=str(Path(shots) / f"{name}.png"))


def test_an_auditor_follows_a_document_back_to_the_body_and_the_operator_by_links_only(
    live_server, roles, operator, auditor, monkeypatch
):
    """Document -> revision -> event -> raw body (its hash checked) -> the attempts -> the
    operator who replayed it, at 1400 px, by clicking links only."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    story = event_with_a_story(
        replayer=operator, bulk_replayer=make_user("night-operator", OPERATORS)
    )
    documents = reverse("admin:research_researchdocument_changelist")

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(
                viewport={"width": WIDTH, "height": 900}, accept_downloads=True
            )
            page.set_default_timeout(15_000)
            _login(page, live_server, "auditor", documents)

            # By the link's name: a list's long ids may wrap at their separators (<wbr>).
            page.locator("#result_list").get_by_role(
                "link", name=story.document.entity_id, exact=True
            ).click()
            expect(page.locator(".field-state .readonly")).to_have_text("Live")
            expect(page.locator("#ignored-events")).to_contain_text(
                story.ignored.event_id
            )
            _fits(page)
            _shot(page, "research-document")
            # The revision, from the document's revisions.
            page.click("a.inlineviewlink")
            expect(page.locator("h2, h1").first).to_be_visible()
            expect(page.locator("body")).to_contain_text("doc_story42 v5 (updated)")
            # The event that made it.
            page.click(f".field-event a:text-is('{story.event.event_id}')")
            expect(page.locator("#event-story")).to_be_visible()
            _fits(page)
            _shot(page, "event-story")
            expect(page.locator("#raw-body-hash")).to_contain_text(
                story.event.payload_hash
            )
            expect(page.locator("#raw-body-hash .hash-matches")).to_have_text("matches")
            if os.environ.get("CONSOLE_SCREENSHOTS"):
                page.locator(".raw-body").screenshot(
                    path=str(Path(os.environ["CONSOLE_SCREENSHOTS"]) / "raw-body.png")
                )
            with page.expect_download() as download_info:
                page.click("#raw-body-download")
            downloaded = download_info.value.path().read_bytes()
            # The attempts, each with its round; the replay that started the second.
            round_two = page.locator(
                "#event-story tr.story-attempt", has_text="round 2"
            )
            expect(round_two).to_have_count(1)
            expect(round_two).to_contain_text("Dead-lettered")
            round_two.locator("a", has_text="replay by operator").click()
            # The operator action: who replayed it, and why.
            expect(page.locator(".field-actor_name .readonly")).to_have_text("operator")
            expect(page.locator(".field-reason .readonly")).to_have_text(
                "index back up"
            )
            visited = page.url
        finally:
            browser.close()

    assert downloaded == bytes(story.event.raw_body)
    assert hashlib.sha256(downloaded).hexdigest() == story.event.payload_hash
    assert visited.endswith(
        reverse("admin:trail_operatoraction_change", args=[story.replay.pk])
    )


def test_an_operator_replays_from_the_event_page_in_a_real_browser(
    live_server, roles, operator, monkeypatch
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    dead = DeadLetteredEventFactory()
    event_page = reverse("admin:webhooks_inboxevent_change", args=[dead.pk])

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})
            page.set_default_timeout(15_000)
            _login(page, live_server, "operator", event_page)
            _fits(page)
            _shot(page, "event-replay")
            page.fill("#event-replay textarea[name=reason]", "replayed where I stand")
            page.click("#event-replay input[type=submit]")
            message = page.locator("ul.messagelist li.success")
            expect(message).to_contain_text(f"Replayed {dead.event_id}")
            expect(page.locator(".field-status .readonly")).to_have_text("Received")
            expect(page.locator("#event-replay")).to_have_count(0)
            replay_row = page.locator("#event-story tr.story-action")
            expect(replay_row).to_contain_text(
                "Replayed by operator: “replayed where I stand”; round 2 begins "
                "(it was Dead-lettered after 8 attempt(s))"
            )
            _shot(page, "event-replayed")
            # The message's link is the event's page.
            message.locator("a", has_text=dead.event_id).click()
            page.wait_for_url(f"**{event_page}")
        finally:
            browser.close()

    dead.refresh_from_db()
    assert dead.processing_status == ProcessingStatus.RECEIVED
    action = OperatorAction.objects.get()
    assert (action.action, action.actor_name, action.reason, action.event_ids) == (
        "replay",
        "operator",
        "replayed where I stand",
        [dead.pk],
    )
