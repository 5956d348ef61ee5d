"""The console's lists in a real browser (Debian's chromium, driven by Playwright) at 1280 and
1400 px, on a realistic mix of rows: every table fits its box, no cell breaks a word (ids
and dotted types wrap at their separators, measured on the rendered text), statuses read as
badges, a paused source reads as paused in its row and on the dashboard, the dashboard's jobs
panel counts the night's failures and links them, and no page logs a console error.

With ``CONSOLE_SCREENSHOTS=<directory>`` set, the test also saves each page it measured there
as a PNG: ``make console-screenshots`` regenerates docs/console/ so."""

from __future__ import annotations

import base64
import os
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect, sync_playwright

from audit.roles import OPERATORS
from core.actors import Actor
from deployments.models import JobStatus, TriggerAttempt
from tests.audit.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.console import PASSWORD, make_user
from tests.deployments.factories import BuildFactory, DeploymentFactory
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    DeadLetteredEventFactory,
    InboxEventFactory,
    WebhookSourceFactory,
    research_source,
)
from webhooks.bulk_replay import bulk_replay_job_create
from webhooks.models import BulkReplayJob, InboxEvent, ProcessingStatus
from webhooks.pausing import webhook_source_pause
from webhooks.replay import inbox_events_replay
from webhooks.sources import webhook_source_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WIDTH = 1400

# The pages measured, with the name of their screenshot.
LISTS = {
    "inbox": "admin:webhooks_inboxevent_changelist",
    "dead-letters": "admin:webhooks_deadletteredevent_changelist",
    "sources": "admin:webhooks_webhooksource_changelist",
    "bulk-jobs": "admin:webhooks_bulkreplayjob_changelist",
    "deployments": "admin:deployments_deployment_changelist",
    "builds": "admin:deployments_build_changelist",
    "operator-actions": "admin:trail_operatoraction_changelist",
}

# How wide the table is against its box, and the page against the window.
MEASURE = """() => {
  const table = document.querySelector('#result_list');
  const box = table.closest('.results') || table.parentElement;
  return {table: table.scrollWidth, box: box.clientWidth,
          page: document.documentElement.scrollWidth,
          window: document.documentElement.clientWidth};
}"""


# Every line break inside the cells of the page's tables: each must fall at a space or
# just after a separator of a token (". _ / - : @ ,"), never inside a word; and a cell whose
# content is wider than the cell (cut by the ellipsis) must say it whole in a tooltip.
MID_TOKEN = """(selector) => {
  const separators = /[._\\/\\-:@,;=&?)]/;
  const found = [];
  for (const cell of document.querySelectorAll(selector)) {
    if (!cell.offsetParent) continue;
    const walker = document.createTreeWalker(
      cell, NodeFilter.SHOW_TEXT | NodeFilter.SHOW_ELEMENT);
    let previous = null, space = false;
    while (walker.nextNode()) {
      const node = walker.currentNode;
      if (node.nodeType === Node.ELEMENT_NODE) {
        // A line break or a block of its own is a break between words.
        const display = getComputedStyle(node).display;
        if (node.tagName === 'BR' || display === 'block' || display === 'list-item') {
          space = true;
        }
        continue;
      }
      for (let i = 0; i < node.length; i++) {
        const ch = node.data[i];
        if (/\\s/.test(ch)) { space = true; continue; }
        const range = document.createRange();
        range.setStart(node, i); range.setEnd(node, i + 1);
        const rects = range.getClientRects();
        if (!rects.length) continue;
        const top = rects[0].top;
        if (previous && top > previous.top + 2 && !space && !separators.test(previous.ch)) {
          found.push({cell: cell.className || cell.tagName, text: cell.innerText.slice(0, 80),
                      at: previous.ch + '|' + ch});
        }
        previous = {ch, top}; space = false;
      }
    }
    if (cell.innerText.trim() && cell.scrollWidth > cell.clientWidth + 1
        && !cell.querySelector('[title]') && !cell.title) {
      found.push({cell: cell.className || cell.tagName, text: cell.innerText.slice(0, 80),
                  at: 'cut without a tooltip'});
    }
  }
  return found;
}"""


def realistic_console(operator) -> None:
    """Rows as an incident leaves them: long producer ids, every status, a long error, a
    paused source with a long reason, a bulk replay, deployments with full commit ids."""
    now = timezone.now()
    papers = research_source()
    other = WebhookSourceFactory(slug="billing-events-eu-west-1")
    WebhookSourceFactory(slug="github", is_enabled=False)
    # A producer that signs with Ed25519: the source holds its public key, no secret.
    producer_key = Ed25519PrivateKey.generate().public_key()
    raw_key = producer_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    webhook_source_create(
        slug="notifications-v1a",
        scheme="standard-webhooks",
        handler="research",
        public_key="whpk_" + base64.b64encode(raw_key).decode(),
        actor=Actor.of(operator),
    )
    for i, status in enumerate(ProcessingStatus):
        body = research_event(
            event_id=f"evt_doc42_2026-12-01T15:41:0{i}Z_{'a' * 24}_{i}",
            entity_id=f"doc_{'f' * 30}_{i}",
        )
        InboxEventFactory(
            body=body,
            source=papers if i % 2 else other,
            processing_status=status,
            received_at=now - timedelta(minutes=i),
            processed_at=now - timedelta(minutes=i) + timedelta(milliseconds=320)
            if status == ProcessingStatus.PROCESSED
            else None,
            attempts=i,
        )
    DeadLetteredEventFactory.create_batch(
        3,
        source=papers,
        error_message="Traceback: handler raised IntegrityError(" + "x" * 300 + ")",
    )
    webhook_source_pause(
        source=other,
        reason="the billing indexer is being migrated to the new cluster; "
        "resume once the migration's checks are green",
        actor=Actor.of(operator),
    )
    done = bulk_replay_job_create(
        source=papers,
        status=ProcessingStatus.DEAD_LETTERED,
        since=now - timedelta(days=1),
        event_ids=[],
        reason="replay after the handler fix",
        rate=5,
        created_by=Actor.of(operator),
    )
    replayed = DeadLetteredEventFactory.create_batch(3, source=papers)
    inbox_events_replay(
        events_queryset=InboxEvent.objects.filter(pk__in=[e.pk for e in replayed]),
        actor=Actor.of(operator),
        reason=done.reason,
        action="bulk_replay",
        bulk_job=done,
    )
    for event, status in zip(
        replayed, ["processed", "processed", "dead_lettered"], strict=True
    ):
        InboxEvent.objects.filter(pk=event.pk).update(processing_status=status)
    BulkReplayJob.objects.filter(pk=done.pk).update(
        state=BulkReplayJob.State.SUCCEEDED, processed=3, total=3, finished_at=now
    )
    bulk_replay_job_create(
        source=None,
        status=ProcessingStatus.FAILED,
        since=None,
        event_ids=[],
        reason="retry the failed ones now",
        created_by=Actor.of(operator),
    )
    for n in range(3):
        DeploymentFactory(
            repository="acme-corporation/checkout-service-frontend",
            environment="production-eu-west-1",
            commit_sha=f"{n}" * 40,
            idempotency_key=f"deploy-{n}",
        )
        BuildFactory(
            repository="acme-corporation/checkout-service-frontend",
            ref="refs/heads/release/2026-12-hotfix",
            commit_sha=f"{n}" * 40,
            idempotency_key=f"build-{n}",
        )
    # The night's failures: a deployment whose report never came, a build the receiver
    # refused, one running, and their trigger attempts.
    lost = DeploymentFactory(
        repository="acme-corporation/checkout-service-frontend",
        environment="production-eu-west-1",
        commit_sha="a" * 40,
        idempotency_key="deploy-lost",
        status=JobStatus.FAILED,
        detail="report_lost: reported running, but no further report came within "
        "the lease",
    )
    refused = BuildFactory(
        repository="acme-corporation/checkout-service-frontend",
        ref="refs/heads/main",
        commit_sha="b" * 40,
        idempotency_key="build-refused",
        status=JobStatus.FAILED,
        detail="trigger_rejected: the receiver answered HTTP 422",
    )
    BuildFactory(
        repository="acme-corporation/checkout-service-frontend",
        ref="refs/heads/main",
        commit_sha="c" * 40,
        idempotency_key="build-running",
        status=JobStatus.RUNNING,
    )
    for job, outcomes in ((lost, ["transient", "delivered"]), (refused, ["rejected"])):
        for number, outcome in enumerate(outcomes, start=1):
            TriggerAttempt.objects.create(
                job=job,
                number=number,
                executor="http",
                outcome=outcome,
                duration_seconds=0.04496838000000025,
            )


@pytest.mark.parametrize("width", [1280, WIDTH])
def test_every_list_fits_the_window(live_server, roles, monkeypatch, width):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    operator = make_user("operator", OPERATORS)
    realistic_console(operator)
    # The screenshots are the 1400 px pages.
    shots = os.environ.get("CONSOLE_SCREENSHOTS") if width == WIDTH else None
    measured = {}

    broken: dict[str, list] = {}
    errors: list[str] = []

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.set_default_timeout(15_000)
            # No console error and no failed request on any page (the favicon's 404 was
            # one on every page).
            page.on(
                "console",
                lambda message: (
                    errors.append(message.text) if message.type == "error" else None
                ),
            )
            page.on(
                "response",
                lambda response: (
                    errors.append(f"{response.status} {response.url}")
                    if response.status >= 400
                    else None
                ),
            )
            page.goto(f"{live_server.url}/admin/login/?next=/admin/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/")
            paused = page.locator(
                "#dash-paused tr[data-source='billing-events-eu-west-1']"
            )
            expect(paused.locator(".badge")).to_have_text("Paused")
            # The jobs panel: the night's failures, counted, linked and said why.
            jobs = page.locator("#dash-jobs")
            failed = jobs.locator("tr[data-status='failed']")
            expect(failed.locator(".badge")).to_have_text("Failed")
            expect(failed.locator("td.dash-count a")).to_have_text(["1", "1"])
            expect(
                jobs.locator("tr[data-status='running'] td.dash-count a")
            ).to_have_text(["0", "1"])
            expect(jobs.locator(".dash-failures")).to_contain_text(
                "report_lost: reported running"
            )
            expect(jobs.locator("#dash-triggers")).to_contain_text(
                "3 started, 2 failed"
            )
            broken["dashboard"] = page.evaluate(
                MID_TOKEN, "#audit-dashboard td, #audit-dashboard th"
            )
            if shots:
                page.locator("#audit-dashboard").screenshot(
                    path=str(Path(shots) / "dashboard.png")
                )
            failed.locator("td.dash-count a").first.click()
            page.wait_for_url("**/deployments/deployment/?status__exact=failed*")
            rows = page.locator("#result_list tbody tr")
            expect(rows).to_have_count(1)
            expect(rows.first.locator(".badge")).to_have_text("Failed")
            for name, url in LISTS.items():
                page.goto(live_server.url + reverse(url))
                expect(page.locator("#result_list")).to_be_visible()
                measured[name] = page.evaluate(MEASURE)
                broken[name] = page.evaluate(
                    MID_TOKEN, "#result_list td, #result_list th"
                )
                if shots:
                    page.screenshot(path=str(Path(shots) / f"{name}.png"))

            page.goto(live_server.url + reverse(LISTS["sources"]))
            row = page.locator("#result_list tr", has_text="billing-events-eu-west-1")
            badge = row.locator("td.field-state .badge")
            expect(badge).to_contain_text("Paused since")
            expect(badge).to_contain_text("UTC by operator")
            expect(row).to_contain_text("the billing indexer is being migrated")
            disabled = page.locator("#result_list tr", has_text="github")
            expect(disabled.locator(".badge")).to_have_text("Disabled")

            page.goto(live_server.url + reverse(LISTS["inbox"]))
            badges = page.locator("#result_list td.field-status .badge")
            expect(badges.first).to_be_visible()
            words = set(badges.all_inner_texts())
            assert {"Dead-lettered", "Ignored (out of order)", "Processed"} <= words
            expect(page.locator("#result_list")).to_contain_text("0.320 s")

            page.goto(live_server.url + reverse(LISTS["bulk-jobs"]))
            expect(page.locator("#result_list")).to_contain_text(
                "3 replayed: 2 processed, 1 dead-lettered again"
            )
        finally:
            browser.close()

    for name, sizes in measured.items():
        assert sizes["table"] <= sizes["box"], (name, sizes)
        assert sizes["page"] <= sizes["window"], (name, sizes)
    broken = {name: found for name, found in broken.items() if found}
    assert broken == {}, "\n".join(
        f"{name}: {f}" for name in broken for f in broken[name]
    )
    assert errors == []
