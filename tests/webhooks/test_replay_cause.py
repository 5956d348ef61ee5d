"""A replay knows its cause (docs/console.md, "Replay"): for an event dead-lettered because
its data was rejected, which the same bytes meet again, every replay form of the console says
so and asks for a confirmation (the event's page, "Replay selected", a bulk replay job), the
service refuses without it, and a bulk replay job's state says what became of its events, in
a badge that is green only when some were processed."""

from __future__ import annotations

import html
import re

import pytest
from django.core.management import call_command
from django.urls import reverse

from core.actors import Actor
from tests.console import admin_action
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import DeadLetteredEventFactory, WebhookSourceFactory
from trail.models import OperatorAction
from webhooks.bulk_replay import (
    bulk_replay_job_create,
    bulk_replay_job_run,
    bulk_replay_job_start,
)
from webhooks.errors import ReplayRepeatsUnconfirmed
from webhooks.models import BulkReplayJob, DeadLetterCause, InboxEvent, ProcessingStatus
from webhooks.processing import inbox_events_process
from webhooks.replay import inbox_events_replay

pytestmark = pytest.mark.django_db

REJECTED_ERROR = "data.authors: must be a list of strings"
DLQ = "webhooks_deadletteredevent"


@pytest.fixture
def source():
    return WebhookSourceFactory(slug="papers")


@pytest.fixture
def rejected(source):
    """A dead letter whose data the handler rejected: its bytes will be rejected again."""
    return DeadLetteredEventFactory(
        source=source,
        body=research_event(
            data={"summary": "s", "authors": "not a list", "citations": []}
        ),
        attempts=1,
        error_message=REJECTED_ERROR,
        dead_letter_cause=DeadLetterCause.REJECTED,
    )


@pytest.fixture
def exhausted(source):
    """A dead letter whose attempts ran out (a dependency was down): a replay can fix it."""
    return DeadLetteredEventFactory(
        source=source, dead_letter_cause=DeadLetterCause.EXHAUSTED
    )


def replays_of(event) -> int:
    return sum(
        event.pk in a.event_ids
        for a in OperatorAction.objects.filter(action__in=["replay", "bulk_replay"])
    )


def text_of(response) -> str:
    """The page's text, as a reader sees it."""
    return " ".join(
        html.unescape(re.sub(r"<[^>]+>", " ", response.content.decode())).split()
    )


# --- the service --------------------------------------------------------------------------


def test_the_service_refuses_a_rejected_event_unless_confirmed(rejected, exhausted):
    both = InboxEvent.objects.filter(pk__in=[rejected.pk, exhausted.pk])
    with pytest.raises(ReplayRepeatsUnconfirmed, match="1 of the events"):
        inbox_events_replay(
            events_queryset=both,
            actor=Actor.system(),
            reason="retry",
            repeats_confirmed=False,
        )
    assert set(both.values_list("processing_status", flat=True)) == {"dead_lettered"}
    assert not OperatorAction.objects.filter(action="replay").exists()
    # The exhausted one alone needs no confirmation; with it, both go.
    inbox_events_replay(
        events_queryset=InboxEvent.objects.filter(pk=exhausted.pk),
        actor=Actor.system(),
        reason="the index is back",
        repeats_confirmed=False,
    )
    inbox_events_replay(
        events_queryset=InboxEvent.objects.filter(pk=rejected.pk),
        actor=Actor.system(),
        reason="the handler was fixed",
        repeats_confirmed=True,
    )
    assert set(both.values_list("processing_status", flat=True)) == {"received"}


# --- the event's page ---------------------------------------------------------------------


def event_page(http, event):
    return http.get(reverse("admin:webhooks_inboxevent_change", args=[event.pk]))


def replay_from_page(http, event, **fields):
    return http.post(
        reverse("admin:webhooks_inboxevent_replay", args=[event.pk]),
        {"reason": "let us try again", **fields},
        follow=True,
    )


def test_a_rejected_events_page_says_a_replay_meets_the_cause_again_and_asks(
    operator_client, rejected
):
    page = event_page(operator_client, rejected)
    text = text_of(page)
    assert "A replay will most likely fail the same way" in text
    assert "dead-lettered because the event's data was rejected" in text
    assert REJECTED_ERROR in text
    assert 'name="repeats_confirmed"' in page.content.decode()
    assert 'value="Replay anyway"' in page.content.decode()

    refused = replay_from_page(operator_client, rejected)
    assert "Nothing was replayed: this event's data was rejected" in text_of(refused)
    rejected.refresh_from_db()
    assert rejected.processing_status == "dead_lettered"
    assert replays_of(rejected) == 0

    replay_from_page(operator_client, rejected, repeats_confirmed="on")
    rejected.refresh_from_db()
    assert rejected.processing_status == "received"
    assert replays_of(rejected) == 1


def test_an_exhausted_events_page_offers_a_plain_replay(operator_client, exhausted):
    page = event_page(operator_client, exhausted)
    assert "A replay will most likely fail" not in text_of(page)
    assert 'name="repeats_confirmed"' not in page.content.decode()
    replay_from_page(operator_client, exhausted)
    exhausted.refresh_from_db()
    assert exhausted.processing_status == "received"


# --- "Replay selected" ------------------------------------------------------------------


def test_replay_selected_says_how_many_were_rejected_and_asks(
    operator_client, rejected, exhausted
):
    page = admin_action(operator_client, DLQ, "replay_selected", rejected, exhausted)
    text = text_of(page)
    assert "1 of them dead-lettered because their data was rejected" in text
    assert 'value="Replay anyway"' in page.content.decode()

    again = admin_action(
        operator_client,
        DLQ,
        "replay_selected",
        rejected,
        exhausted,
        post="yes",
        reason="the index is back",
    )
    assert "1 of the selected events were rejected" in text_of(again)
    assert replays_of(rejected) == replays_of(exhausted) == 0

    admin_action(
        operator_client,
        DLQ,
        "replay_selected",
        rejected,
        exhausted,
        post="yes",
        reason="the index is back",
        repeats_confirmed="on",
    )
    assert replays_of(rejected) == replays_of(exhausted) == 1


def test_replay_selected_of_exhausted_events_asks_nothing_more(
    operator_client, exhausted
):
    page = admin_action(operator_client, DLQ, "replay_selected", exhausted)
    assert "rejected" not in text_of(page)
    admin_action(
        operator_client,
        DLQ,
        "replay_selected",
        exhausted,
        post="yes",
        reason="the index is back",
    )
    assert replays_of(exhausted) == 1


# --- bulk replay ----------------------------------------------------------------------------


def add_job(http, source, **fields):
    return http.post(
        reverse("admin:webhooks_bulkreplayjob_add"),
        {
            "source": source.pk,
            "status": "dead_lettered",
            "reason": "the index is back",
            **fields,
        },
        follow=True,
    )


def test_a_bulk_replay_job_over_rejected_events_is_created_only_when_confirmed(
    operator_client, source, rejected, exhausted
):
    refused = add_job(operator_client, source)
    assert "1 of the events this job would replay were dead-lettered because" in (
        text_of(refused)
    )
    assert not BulkReplayJob.objects.exists()
    add_job(operator_client, source, repeats_confirmed="on")
    assert BulkReplayJob.objects.get().dry_run_count == 2


def test_replay_events_says_how_many_were_rejected(source, rejected, exhausted, capsys):
    call_command("replay_events", "--source", "papers", "--dry-run")
    out = capsys.readouterr().out
    assert "2 events match" in out
    assert "1 of them were dead-lettered because their data was rejected" in out


def completed_job(source) -> BulkReplayJob:
    """A job over the source's dead letters, run to its end, its events then processed."""
    job = bulk_replay_job_create(
        source=source,
        status="dead_lettered",
        since=None,
        event_ids=[],
        reason="the index is back",
        created_by=Actor.system(),
    )
    job = bulk_replay_job_start(job=job, started_by=Actor.system(), publish=False)
    job = bulk_replay_job_run(job_id=job.pk, run=job.run)
    assert job is not None and job.state == BulkReplayJob.State.SUCCEEDED
    inbox_events_process(ids=list(InboxEvent.objects.values_list("pk", flat=True)))
    return job


def badge(http, job, *, page: bool) -> tuple[str, str]:
    """The job's state badge, on its page or in the list: its tone and its words."""
    url = (
        reverse("admin:webhooks_bulkreplayjob_change", args=[job.pk])
        if page
        else reverse("admin:webhooks_bulkreplayjob_changelist")
    )
    html = http.get(url).content.decode()
    tone, words = re.search(
        r'<span class="badge badge-(\w+)" data-status="succeeded">([^<]+)</span>', html
    ).groups()
    return tone, words


def test_a_job_whose_events_were_rejected_again_is_completed_in_red(
    operator_client, source, rejected
):
    job = completed_job(source)
    rejected.refresh_from_db()
    assert (rejected.processing_status, rejected.dead_letter_cause) == (
        ProcessingStatus.DEAD_LETTERED,
        DeadLetterCause.REJECTED,
    )
    for page in (True, False):
        assert badge(operator_client, job, page=page) == (
            "error",
            "Completed: 0 processed, 1 dead-lettered again",
        )


def test_a_job_whose_events_were_processed_is_completed_in_green_a_mixed_one_in_amber(
    operator_client, source, exhausted
):
    job = completed_job(source)
    assert badge(operator_client, job, page=True) == ("ok", "Completed: 1 processed")

    other = WebhookSourceFactory(slug="other")
    DeadLetteredEventFactory(source=other, dead_letter_cause=DeadLetterCause.EXHAUSTED)
    DeadLetteredEventFactory(
        source=other,
        body=research_event(data={"summary": 1, "authors": [], "citations": []}),
        dead_letter_cause=DeadLetterCause.EXHAUSTED,  # it will be rejected this time
    )
    mixed = completed_job(other)
    assert badge(operator_client, mixed, page=False) == (
        "warning",
        "Completed: 1 processed, 1 dead-lettered again",
    )
