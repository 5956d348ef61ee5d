"""The inbox event's page as its story: one timeline, oldest first, of its deliveries, its
attempts with their rounds, the operator actions on it and what it made; "Replay" for
operators; the raw body as received, with its hash checked."""

from __future__ import annotations

import hashlib
import re
from html import unescape as html_unescape

import pytest
from django.urls import reverse
from django.utils import timezone

from core.times import time_display
from tests.console import make_user
from tests.webhooks.event_story import event_with_a_story
from tests.webhooks.factories import DeadLetteredEventFactory, InboxEventFactory
from trail.models import OperatorAction
from webhooks.models import InboxEvent, ProcessingStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def story(roles, operator):
    return event_with_a_story(
        replayer=operator, bulk_replayer=make_user("night-operator", "Operators")
    )


def page_of(client, event) -> str:
    response = client.get(reverse("admin:webhooks_inboxevent_change", args=[event.pk]))
    assert response.status_code == 200
    return response.content.decode()


def story_rows(html: str) -> list[tuple[str, str, str]]:
    """(time, kind, text) of each timeline row, tags stripped."""
    section = html[html.index('id="event-story"') : html.index("</section>")]
    rows = re.findall(
        r'<tr class="story-[a-z_]+" data-kind="([a-z_]+)">\s*'
        r'<td class="story-at">(.*?)</td>\s*<td class="story-kind">.*?</td>\s*'
        r'<td class="story-text">(.*?)</td>',
        section,
        re.S,
    )
    return [
        (at, kind, html_unescape(re.sub(r"<[^>]+>", "", text)))
        for kind, at, text in rows
    ]


def test_the_time_helper_writes_seconds_and_the_zone(settings):
    from datetime import UTC, datetime

    instant = datetime(2026, 12, 1, 15, 41, 2, 999_000, tzinfo=UTC)
    assert time_display(instant) == "2026-12-01 15:41:02 UTC"
    assert time_display(None) == "-"
    settings.TIME_ZONE = "Europe/Paris"
    assert time_display(instant) == "2026-12-01 16:41:02 CET"


def test_the_story_tells_every_delivery_attempt_round_action_and_revision_in_order(
    auditor_client, story
):
    html = page_of(auditor_client, story.event)
    rows = story_rows(html)
    kinds = [kind for _, kind, _ in rows]
    assert kinds == [
        "delivery",
        "conflict",
        "attempt",
        "duplicates",
        "attempt",
        "no_product",  # round 1's result, after the attempt that made it
        "action",  # the replay: round 2
        "attempt",
        "no_product",  # round 2's
        "action",  # the bulk replay: round 3
        "attempt",
        "product",
    ], rows
    times = [at for at, _, _ in rows]
    assert times == sorted(times)  # one format, to the second: text order is time order
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", t) for t in times)
    texts = [text for _, _, text in rows]
    assert texts[0].startswith("Delivered (first delivery) from 127.0.0.1")
    assert "2 identical duplicate deliveries" in texts[3]
    assert f"fingerprint mismatch #{story.mismatch.pk}" in texts[1]
    assert "not applied): 1 delivery, the last at" in texts[1]
    assert texts[2].startswith("Attempt 1 of round 1 (the first delivery): Retry")
    assert texts[4].startswith("Attempt 2 of round 1 (the first delivery)")
    assert texts[5] == "Made no change (round 1): Dead-lettered: the index is down"
    assert texts[6] == (
        "Replayed by operator: “index back up”; round 2 begins "
        "(it was Dead-lettered after 2 attempt(s))"
    )
    assert texts[7].startswith(
        f"Attempt 1 of round 2, after replay by operator at "
        f"{time_display(story.replay.created_at)}: Dead-lettered, finished"
    )
    assert texts[8] == (
        "Made no change (round 2): Dead-lettered: the index is down again"
    )
    assert texts[9] == (
        f"Replayed in a bulk replay by night-operator: “second outage over” "
        f"(bulk replay job #{story.job.pk}); round 3 begins "
        "(it was Dead-lettered after 1 attempt(s))"
    )
    assert texts[10].startswith(
        "Attempt 1 of round 3, after bulk replay by night-operator"
    )
    assert "Succeeded → Processed" in texts[10]
    assert texts[11] == f"Made document revision: {story.revision}"
    # Every record named is a link to its page.
    for name, obj in [
        ("webhooks_fingerprintmismatch", story.mismatch),
        ("trail_operatoraction", story.replay),
        ("trail_operatoraction", story.bulk_replay),
        ("webhooks_bulkreplayjob", story.job),
        ("research_documentrevision", story.revision),
    ]:
        assert reverse(f"admin:{name}_change", args=[obj.pk]) in html, name
    # Every attempt of every round, and the current round's apart.
    assert "4 in 3 rounds; 1 in the current round (see the story)" in html


def test_an_event_that_made_nothing_says_why(auditor_client, story):
    rows = story_rows(page_of(auditor_client, story.ignored))
    assert rows[-1][1] == "no_product"
    assert rows[-1][2].startswith(
        "Made no change (round 1): Ignored (out of order): source_version 4 is not "
        "newer than the document's current version 5"
    )


def test_the_story_of_a_dead_letter_ends_with_its_cause(auditor_client):
    dead = DeadLetteredEventFactory()
    rows = story_rows(page_of(auditor_client, dead))
    assert rows[-1][2] == (
        "Made no change: Dead-lettered: processing failed on every attempt; "
        "handler exploded: ValueError"
    )


def test_the_raw_body_is_downloaded_as_stored_with_its_hash_checked(auditor_client):
    raw = b'{"event_id": "evt_raw",  "b": 1, "a": [2,1]}'  # not canonical on purpose
    event = InboxEventFactory(
        body={"event_id": "evt_raw", "event_type": "x"},
        raw_body=raw,
        payload_hash=hashlib.sha256(raw).hexdigest(),
    )
    html = page_of(auditor_client, event)
    assert "the stored bytes: matches" in re.sub(r"<[^>]+>", "", html)
    assert "Pretty (indented, keys sorted)" in html
    download = reverse("admin:webhooks_inboxevent_body", args=[event.pk])
    assert download in html
    response = auditor_client.get(download)
    assert response.status_code == 200
    assert response.content == raw
    assert response["Content-Disposition"] == (
        f'attachment; filename="body-{event.pk}-evt_raw.json"'
    )
    # A body altered after it was stored no longer matches its hash.
    InboxEvent.objects.filter(pk=event.pk).update(raw_body=raw + b" ")
    html = re.sub(r"<[^>]+>", "", page_of(auditor_client, event))
    assert "the stored bytes: does not match" in html


def test_a_purged_body_says_so(auditor_client):
    from django.utils import timezone

    event = InboxEventFactory(processing_status=ProcessingStatus.PROCESSED)
    InboxEvent.objects.filter(pk=event.pk).update(
        raw_body=None, body_purged_at=timezone.now()
    )
    html = page_of(auditor_client, event)
    assert "The raw body was purged by retention at" in html
    assert event.payload_hash in html
    assert story_rows(html)[-1][1] == "purge"
    response = auditor_client.get(
        reverse("admin:webhooks_inboxevent_body", args=[event.pk])
    )
    assert response.status_code == 410
    assert b"purged by retention" in response.content


def test_anonymous_visitors_get_no_body(client):
    event = InboxEventFactory()
    response = client.get(reverse("admin:webhooks_inboxevent_body", args=[event.pk]))
    assert response.status_code == 302


# --- replay from the event page ------------------------------------------------------------


def test_an_operator_replays_from_the_event_page_with_a_reason(operator_client):
    dead = DeadLetteredEventFactory()
    html = page_of(operator_client, dead)
    replay = reverse("admin:webhooks_inboxevent_replay", args=[dead.pk])
    assert f'action="{replay}"' in html and "csrfmiddlewaretoken" in html
    response = operator_client.post(replay, {"reason": "handler fixed"}, follow=True)
    dead.refresh_from_db()
    assert dead.processing_status == ProcessingStatus.RECEIVED
    action = OperatorAction.objects.get()
    assert (action.action, action.actor_name, action.reason, action.event_ids) == (
        "replay",
        "operator",
        "handler fixed",
        [dead.pk],
    )
    page = reverse("admin:webhooks_inboxevent_change", args=[dead.pk])
    assert response.redirect_chain[-1][0] == page
    message = response.content.decode()
    assert f'Replayed <a href="{page}">{dead.event_id}</a>' in message
    assert reverse("admin:trail_operatoraction_change", args=[action.pk]) in message
    # Received now: no replay form any more.
    assert f'action="{replay}"' not in response.content.decode()


def test_a_replay_without_a_reason_replays_nothing(operator_client):
    dead = DeadLetteredEventFactory()
    replay = reverse("admin:webhooks_inboxevent_replay", args=[dead.pk])
    response = operator_client.post(replay, {"reason": "  "}, follow=True)
    assert b"a replay needs a reason" in response.content
    dead.refresh_from_db()
    assert dead.processing_status == ProcessingStatus.DEAD_LETTERED
    assert not OperatorAction.objects.exists()


def test_a_processed_event_offers_no_replay_and_refuses_one(operator_client):
    processed = InboxEventFactory(processing_status=ProcessingStatus.PROCESSED)
    replay = reverse("admin:webhooks_inboxevent_replay", args=[processed.pk])
    assert f'action="{replay}"' not in page_of(operator_client, processed)
    response = operator_client.post(replay, {"reason": "why not"}, follow=True)
    assert b"Nothing was replayed" in response.content
    assert not OperatorAction.objects.exists()


def test_auditors_see_no_replay_and_cannot_post_one(auditor_client):
    dead = DeadLetteredEventFactory()
    replay = reverse("admin:webhooks_inboxevent_replay", args=[dead.pk])
    assert f'action="{replay}"' not in page_of(auditor_client, dead)
    assert auditor_client.post(replay, {"reason": "sneaky"}).status_code == 403
    dead.refresh_from_db()
    assert dead.processing_status == ProcessingStatus.DEAD_LETTERED
    assert not OperatorAction.objects.exists()


def test_replay_is_post_only_and_needs_the_csrf_token(operator, roles):
    from django.test import Client

    dead = DeadLetteredEventFactory()
    replay = reverse("admin:webhooks_inboxevent_replay", args=[dead.pk])
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.get(replay).status_code == 405
    assert client.post(replay, {"reason": "no token"}).status_code == 403
    dead.refresh_from_db()
    assert dead.processing_status == ProcessingStatus.DEAD_LETTERED


def test_the_page_says_the_product_s_latency_apart_from_the_producer_s_delay(
    auditor_client,
):
    from datetime import timedelta

    from django.utils import timezone

    from tests.integrations.research.factories import research_event

    received = timezone.now()
    event = InboxEventFactory(
        body=research_event(occurred_at=received - timedelta(days=334, hours=2)),
        received_at=received,
        processed_at=received + timedelta(milliseconds=312),
        processing_status=ProcessingStatus.PROCESSED,
    )
    html = page_of(auditor_client, event)

    def field(name: str) -> str:
        found = re.search(
            rf'field-{name}".*?<div class="readonly">(.*?)</div>', html, re.S
        )
        assert found, name
        return found.group(1)

    assert field("processing_latency") == "0.312 s"
    assert field("producer_delay") == "334 d 2 h"
    assert "(received → processed)" in html and "(occurred → received)" in html


def test_the_attempts_table_shows_each_attempt_s_round_and_its_replay(
    auditor_client, story
):
    html = page_of(auditor_client, story.event)
    inline = html[html.index('id="attempt_log-group"') :]
    rounds = re.findall(r'<td class="field-round">\s*<p>(.*?)</p>', inline, re.S)
    replay = reverse("admin:trail_operatoraction_change", args=[story.replay.pk])
    bulk = reverse("admin:trail_operatoraction_change", args=[story.bulk_replay.pk])
    assert [html_unescape(r.strip()) for r in rounds] == [
        "1 (first delivery)",
        "1 (first delivery)",
        f'2 (<a href="{replay}">replay by operator</a>)',
        f'3 (<a href="{bulk}">replay by night-operator</a>)',
    ]


def test_the_evidence_marked_investigated_and_the_purges_are_in_the_story(
    auditor_client, operator
):
    from datetime import timedelta

    from django.utils import timezone

    from core.actors import Actor
    from tests.webhooks.factories import FingerprintMismatchFactory
    from webhooks.investigations import fingerprint_mismatches_mark_investigated
    from webhooks.models import FingerprintMismatch
    from webhooks.retention import evidence_bodies_purge, inbox_bodies_purge

    old = timezone.now() - timedelta(days=60)
    event = InboxEventFactory(
        processing_status=ProcessingStatus.PROCESSED,
        received_at=old,
        processed_at=old,
    )
    mismatch = FingerprintMismatchFactory(event=event, received_at=old)
    fingerprint_mismatches_mark_investigated(
        mismatches=FingerprintMismatch.objects.filter(pk=mismatch.pk),
        actor=Actor.of(operator),
        note="producer bug 42",
    )
    inbox_bodies_purge(older_than=timezone.now(), actor=Actor.system())
    FingerprintMismatch.objects.filter(pk=mismatch.pk).update(last_seen_at=old)
    evidence_bodies_purge(older_than=timezone.now(), actor=Actor.system())
    texts = [text for _, _, text in story_rows(page_of(auditor_client, event))]
    assert (
        "Conflicting copy marked investigated by operator: “producer bug 42”" in texts
    )
    assert any(t.startswith("Raw body purged by system: “retention:") for t in texts)
    assert any(
        t.startswith("Conflicting copy's body purged by system: “retention:")
        for t in texts
    )
    assert "Raw body purged by retention (its hash and the metadata stay)" in texts


def test_a_large_body_is_shown_in_part_and_downloaded_whole(
    auditor_client, monkeypatch
):
    import json

    from webhooks.admin import event_page

    monkeypatch.setattr(event_page, "BODY_SHOWN_MAX", 100)
    body = {"event_id": "evt_big", "event_type": "x", "data": "y" * 500}
    raw = json.dumps(body).encode()
    event = InboxEventFactory(body=body, raw_body=raw)
    html = page_of(auditor_client, event)
    assert "the first 100 are shown, the download has all of it" in html
    assert "y" * 500 not in html
    assert "the stored bytes: matches" in re.sub(r"<[^>]+>", "", html)
    download = auditor_client.get(
        reverse("admin:webhooks_inboxevent_body", args=[event.pk])
    )
    assert download.content == raw


def test_the_page_s_queries_do_not_grow_with_the_story(auditor_client, operator):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from core.actors import Actor
    from tests.webhooks.factories import FingerprintMismatchFactory, InboxAttemptFactory
    from webhooks.replay import inbox_events_replay

    def queries_of(event) -> int:
        url = reverse("admin:webhooks_inboxevent_change", args=[event.pk])
        with CaptureQueriesContext(connection) as queries:
            assert auditor_client.get(url).status_code == 200
        return len(queries)

    def grown(rounds: int):
        dead = DeadLetteredEventFactory()
        for n in range(rounds):
            FingerprintMismatchFactory(
                event=dead, body={"event_id": dead.event_id, "n": n}
            )
            for number in (1, 2, 3):
                InboxAttemptFactory(event=dead, number=number)
            inbox_events_replay(
                events_queryset=InboxEvent.objects.filter(pk=dead.pk),
                actor=Actor.of(operator),
                reason=f"round {n}",
            )
            InboxEvent.objects.filter(pk=dead.pk).update(
                processing_status=ProcessingStatus.DEAD_LETTERED
            )
        return dead

    small, large = grown(1), grown(8)
    queries_of(small)  # content types and permissions cached
    assert queries_of(large) == queries_of(small)


def test_each_round_s_result_follows_its_attempt_and_stays_while_a_replay_waits(
    auditor_client, operator
):
    """Delivered, dead-lettered, replayed, dead-lettered again, bulk-replayed and waiting:
    each round's result is told right after the attempt that made it, at that attempt's
    time, and stays told while the next round waits; the list's attempts column and the
    page count every attempt of every round alike."""
    from core.actors import Actor
    from webhooks.bulk_replay import (
        bulk_replay_job_create,
        bulk_replay_job_run,
        bulk_replay_job_start,
    )
    from webhooks.models import InboxAttempt
    from webhooks.processing import inbox_event_process
    from webhooks.replay import inbox_events_replay

    # Data the handler rejects: each attempt dead-letters it, with no processed_at.
    event = InboxEventFactory(raw_body=b"{not json", received_at=timezone.now())
    inbox_event_process(inbox_event_id=event.pk, worker="w1@test")
    inbox_events_replay(
        events_queryset=InboxEvent.objects.filter(pk=event.pk),
        actor=Actor.of(operator),
        reason="try again",
    )
    inbox_event_process(inbox_event_id=event.pk, worker="w1@test")
    job = bulk_replay_job_create(
        source=None,
        status=ProcessingStatus.DEAD_LETTERED,
        since=None,
        event_ids=[event.event_id],
        reason="once more",
        created_by=Actor.of(operator),
    )
    job = bulk_replay_job_start(job=job, started_by=Actor.of(operator), publish=False)
    bulk_replay_job_run(job_id=job.pk, run=job.run)
    event.refresh_from_db()
    assert event.processing_status == ProcessingStatus.RECEIVED  # round 3 waits
    attempts = list(InboxAttempt.objects.filter(event=event).order_by("pk"))
    assert [a.resulting_status for a in attempts] == ["dead_lettered"] * 2

    rows = story_rows(page_of(auditor_client, event))
    assert [kind for _, kind, _ in rows] == [
        "delivery",
        "attempt",
        "no_product",  # round 1's result, after its attempt
        "action",
        "attempt",
        "no_product",  # round 2's
        "action",  # the bulk replay: round 3, waiting
    ], rows
    for (at, _, text), attempt, round_ in zip(
        [rows[2], rows[5]], attempts, (1, 2), strict=True
    ):
        assert at == time_display(attempt.finished_at)
        assert text.startswith(f"Made no change (round {round_}): Dead-lettered"), text
        assert "the raw body is not JSON" in text

    html = page_of(auditor_client, event)
    assert "2 in 2 rounds; 0 in the current round" in html
    listing = auditor_client.get(
        reverse("admin:webhooks_inboxevent_changelist")
    ).content.decode()
    assert "Attempts (all rounds)" in listing
    row = listing[listing.index(event.event_id) :]
    assert (
        '<td class="field-attempts_all">2 in 2 rounds</td>' in row[: row.index("</tr>")]
    )

    inbox_event_process(inbox_event_id=event.pk, worker="w1@test")
    rows = story_rows(page_of(auditor_client, event))
    assert [kind for _, kind, _ in rows][-2:] == ["attempt", "no_product"]
    assert rows[-1][2].startswith(
        "Made no change (round 3): Dead-lettered: the event's data was rejected"
    )
    listing = auditor_client.get(
        reverse("admin:webhooks_inboxevent_changelist")
    ).content.decode()
    assert '<td class="field-attempts_all">3 in 3 rounds</td>' in listing
    assert "3 in 3 rounds; 1 in the current round" in page_of(auditor_client, event)
