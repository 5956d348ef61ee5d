"""A research document's whole story (``doc42``, tests/research/document_story.py): every
event delivered for it, whatever became of it (applied, ignored, dead-lettered, failed,
held), with its attempts, its rounds and the operators who replayed it, on the document's
page and in its evidence bundle, which the offline verifier still checks."""

from __future__ import annotations

import html
import json
import re
from collections import Counter

import pytest
from django.core.management import call_command
from django.urls import reverse

from audit import verify_bundle
from audit.checkpoints import checkpoint_make, log_verifier_key
from audit.stories import evidence_bundle
from tests.console import make_user
from tests.research.document_story import document_with_every_kind_of_event
from webhooks.models import InboxAttempt, InboxEvent

from .ledger_rows import seal_all

pytestmark = pytest.mark.django_db

EVENT_IDS = {
    "evt_doc42_1": "processed",
    "evt_doc42_2": "processed",
    "evt_doc42_3": "dead_lettered",
    "evt_doc42_1b": "ignored_out_of_order",
    "evt_doc42_2b": "ignored_duplicate_version",
    "evt_doc42_4": "failed",
    "evt_doc42_5": "received",
}


@pytest.fixture
def story(roles, operator):
    return document_with_every_kind_of_event(
        replayer=operator, bulk_replayer=make_user("night-operator", "Operators")
    )


def document_page_of(http, story) -> str:
    response = http.get(
        reverse("admin:research_researchdocument_change", args=[story.document.pk])
    )
    assert response.status_code == 200
    return response.content.decode()


def rows(page: str) -> dict[str, str]:
    """The rows of the page's table of events, by event id, as text with their links."""
    table = page[page.index('id="document-events"') :]
    table = table[: table.index("</table>")]
    found = {}
    for row in re.findall(r'<tr class="document-event".*?</tr>', table, flags=re.S):
        event_id = re.search(r'data-event-id="([^"]+)"', row).group(1)
        found[event_id] = row
    return found


def text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def test_the_document_page_lists_every_event_delivered_for_it(auditor_client, story):
    listed = rows(document_page_of(auditor_client, story))

    assert {
        event_id: re.search(r'data-status="([a-z_]+)"', row).group(1)
        for event_id, row in listed.items()
    } == EVENT_IDS
    assert list(listed) == sorted(listed, key=lambda e: story.events[e].pk)
    for event_id, row in listed.items():
        page = reverse(
            "admin:webhooks_inboxevent_change", args=[story.events[event_id].pk]
        )
        assert f'href="{page}"' in row, event_id
    assert "made doc42 v1 (updated)" in text(listed["evt_doc42_1"])
    assert "is not newer than the document's current version 2" in text(
        listed["evt_doc42_1b"]
    )
    assert "retry at" in text(listed["evt_doc42_4"])
    assert "DependencyDown" in text(listed["evt_doc42_4"])
    assert "(held)" in text(listed["evt_doc42_5"])
    assert "held: its source is paused" in text(listed["evt_doc42_5"])


def test_the_dead_lettered_event_shows_its_rounds_and_the_operators_who_replayed_it(
    auditor_client, story
):
    row = rows(document_page_of(auditor_client, story))["evt_doc42_3"]
    shown = text(row)
    assert "3 attempts in 3 rounds" in shown
    assert "the event's data was rejected" in shown
    replay = reverse("admin:trail_operatoraction_change", args=[story.replay.pk])
    bulk = reverse("admin:trail_operatoraction_change", args=[story.bulk_replay.pk])
    job = reverse("admin:webhooks_bulkreplayjob_change", args=[story.job.pk])
    assert f'<a class="document-event-operator" href="{replay}">operator</a>' in row
    assert f'<a class="document-event-operator" href="{bulk}">night-operator</a>' in row
    assert f'href="{job}"' in row
    assert re.search(r"replayed by operator .*bulk-replayed by night-operator", shown)


def bundle_of(capsys, identifier: str) -> dict:
    call_command("audit_bundle", "research_document", identifier)
    return json.loads(capsys.readouterr().out)


def leaves(bundle: dict) -> list[dict]:
    return [json.loads(entry["leaf"]) for entry in bundle["entries"]]


def test_the_bundle_tells_every_event_its_attempts_and_replays_and_verifies_offline(
    story, capsys, tmp_path
):
    seal_all()
    checkpoint_make()

    bundle = bundle_of(capsys, "doc42")

    told = leaves(bundle)
    kinds = Counter(leaf["kind"] for leaf in told)
    events = {leaf["event_id"] for leaf in told if leaf["kind"] == "inbox_event"}
    assert events == set(EVENT_IDS)
    attempts = [
        leaf["id"]
        for leaf in told
        if leaf["kind"] == "inbox_attempt" and leaf["inbox_event_id"] == story.dead.pk
    ]
    assert sorted(attempts) == sorted(
        InboxAttempt.objects.filter(event=story.dead).values_list("pk", flat=True)
    )
    assert len(attempts) == 3
    assert (
        kinds["inbox_attempt"]
        == InboxAttempt.objects.filter(event__entity_id="doc42").count()
    )
    actions = {leaf["id"]: leaf for leaf in told if leaf["kind"] == "operator_action"}
    assert {story.replay.pk, story.bulk_replay.pk} <= set(actions)
    assert actions[story.replay.pk]["actor_name"] == "operator"
    assert actions[story.bulk_replay.pk]["actor_name"] == "night-operator"
    assert kinds["document_revision"] == 2
    # Checked offline, with the public key alone, as an auditor runs it.
    path = tmp_path / "doc42.json"
    path.write_text(json.dumps(bundle))
    assert verify_bundle.main([str(path), "--key", log_verifier_key()]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out


def test_a_bounded_bundle_names_the_events_it_leaves_out_and_still_verifies(story):
    seal_all()
    checkpoint_make()

    bundle = evidence_bundle(
        subject="research_document", pk=story.document.pk, entries_per_kind=2
    )

    told = {
        leaf["event_id"] for leaf in leaves(bundle) if leaf["kind"] == "inbox_event"
    }
    # The two revisions' events, and of the five others the first and the latest.
    assert told == {
        "evt_doc42_1",
        "evt_doc42_2",
        "evt_doc42_3",
        "evt_doc42_5",
    }
    omitted = {item["kind"]: item for item in bundle["omitted"]["records"]}[
        "inbox_event"
    ]
    pks = sorted(
        InboxEvent.objects.filter(
            event_id__in=["evt_doc42_1b", "evt_doc42_2b", "evt_doc42_4"]
        ).values_list("pk", flat=True)
    )
    assert (omitted["count"], omitted["ids"]) == (3, [pks[0], pks[-1]])
    report = verify_bundle.bundle_verify(bundle, vkey=log_verifier_key())
    assert report.ok, report.failures


def test_past_its_bound_the_page_shows_the_first_and_latest_and_links_the_rest(
    auditor_client, story, monkeypatch
):
    from audit import document_page

    monkeypatch.setattr(document_page, "DOCUMENT_EVENTS_SHOWN", 4)
    page = document_page_of(auditor_client, story)
    assert list(rows(page)) == [
        "evt_doc42_1",
        "evt_doc42_2",
        "evt_doc42_4",
        "evt_doc42_5",
    ]
    link = re.search(
        r'3 more, between the first and the latest shown: <a href="([^"]+)"', page
    )
    inbox = auditor_client.get(html.unescape(link.group(1)))
    assert inbox.status_code == 200
    assert {e.event_id for e in inbox.context["cl"].result_list} == set(EVENT_IDS)
