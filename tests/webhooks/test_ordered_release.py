"""A document's events released from a backlog go one after the other (docs/subsystems/relay.md,
"One document's events in order"): a paused source's drain and a bulk replay job release a
document's next event only once the one before it is finished, each event one token of the
rate; a drain publishes again an earlier event whose message is lost, so that it never
waits for ever. Against PostgreSQL and the real Redis broker; the worker-level proof is
tests/webhooks/test_ordered_release_worker.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from core.actors import Actor
from core.relay.loop import Relay
from tests.broker import broker_reset, inbox_messages, message_inbox_event_ids
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import hold_of, inbox_events_bulk_create, research_source
from trail.models import OperatorAction
from webhooks.bulk_replay import (
    bulk_replay_job_cancel,
    bulk_replay_job_create,
    bulk_replay_job_resume,
    bulk_replay_job_run,
    bulk_replay_job_start,
)
from webhooks.models import BulkReplayJob, InboxEvent, ProcessingStatus, SourceHold
from webhooks.pausing import webhook_source_pause, webhook_source_resume
from webhooks.processing import inbox_events_process

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clean_broker():
    broker_reset()
    yield
    broker_reset()


@pytest.fixture
def paused():
    source = research_source("paused-sync")
    webhook_source_pause(source=source, reason="indexer down", actor=Actor.system())
    return source


def released() -> list[list[int]]:
    """The inbox messages published so far, each as its rows, in order; then forgotten."""
    messages = [message_inbox_event_ids(m) for m in inbox_messages()]
    broker_reset()
    return messages


def one_round() -> int:
    return Relay().run_once(sweep=False)[0]


def a_second_passes(source) -> None:
    """The drain's bucket as it is one second later (its tokens stamped a second earlier)."""
    SourceHold.objects.filter(source=source).update(
        drain_tokens_at=F("drain_tokens_at") - timedelta(seconds=1)
    )


def processed(*rows) -> None:
    outcomes = inbox_events_process(ids=[row.pk for row in rows], worker="w")
    assert {o.status for o in outcomes} == {"processed"}, outcomes


# --- the drain ------------------------------------------------------------------------


def test_at_one_event_a_second_each_event_takes_its_token_and_waits_for_the_one_before(
    paused,
):
    """Three held events of one document at 1 event/s: one a second, never three at once,
    and each only once the one before it is processed."""
    v1, v2, v3, other = inbox_events_bulk_create(
        [
            research_event(entity_id="doc_paced", source_version=1),
            research_event(entity_id="doc_paced", source_version=2),
            research_event(entity_id="doc_paced", source_version=3),
            research_event(),
        ],
        source=paused,
    )
    one_round()  # sets them aside
    webhook_source_resume(source=paused, rate=1, actor=Actor.system())

    assert one_round() == 1
    assert released() == [[v1.pk]]
    assert hold_of(paused).drain_tokens == pytest.approx(0, abs=0.01)
    assert one_round() == 0  # no token: nothing, however many rounds
    a_second_passes(paused)
    # A token, but v2 waits for v1 (still on its way): the token goes to the next event.
    assert one_round() == 1
    assert released() == [[other.pk]]
    a_second_passes(paused)
    assert one_round() == 0  # v2 still waits; the token stays in the bucket
    processed(v1)
    assert one_round() == 1
    assert released() == [[v2.pk]]
    processed(v2)
    assert one_round() == 0  # v3's token is not there yet
    a_second_passes(paused)
    assert one_round() == 1
    assert released() == [[v3.pk]]
    processed(v3)
    a_second_passes(paused)
    assert one_round() == 0
    assert hold_of(paused) is None  # nothing left set aside: the drain is over


def test_without_a_rate_a_documents_held_events_go_in_one_message_of_at_most_a_batch(
    settings, paused
):
    """Without a rate a round releases everything it may: a document's events in one
    message of at most INBOX_BATCH_SIZE (never split over two), the rest of them once
    those are finished."""
    settings.INBOX_BATCH_SIZE = 3
    rows = inbox_events_bulk_create(
        [research_event(entity_id="doc_many", source_version=v) for v in range(1, 6)]
        + [research_event(), research_event()],
        source=paused,
    )
    versions, others = rows[:5], rows[5:]
    one_round()
    webhook_source_resume(source=paused, actor=Actor.system())

    assert one_round() == 5
    messages = released()
    assert sorted(pk for message in messages for pk in message) == sorted(
        [*(r.pk for r in versions[:3]), *(r.pk for r in others)]
    )
    assert [r.pk for r in versions[:3]] in messages  # one message, in id order
    assert one_round() == 0  # v4 and v5 wait for v1 to v3
    processed(*versions[:3])
    assert one_round() == 2
    assert released() == [[versions[3].pk, versions[4].pk]]


@pytest.mark.parametrize("lost", ["published-before-the-drain", "message-lost"])
def test_an_earlier_event_whose_message_is_lost_goes_again_and_the_drain_ends(
    settings, paused, lost
):
    """v1's message was published before the pause (a worker would leave it alone, the
    sweep leaves a held source alone) or went missing after the drain released it: v2
    would wait for ever, and the drain with it. The drain publishes v1 again, then v2."""
    v1, v2 = inbox_events_bulk_create(
        [research_event(entity_id="doc_lost", source_version=v) for v in (1, 2)],
        source=paused,
    )
    long_ago = timezone.now() - timedelta(
        seconds=settings.INBOX_REDISPATCH_AFTER_SECONDS + 5
    )
    if lost == "published-before-the-drain":
        InboxEvent.objects.filter(pk=v1.pk).update(dispatched_at=long_ago)
        one_round()  # sets v2 aside; v1 has its (old) message
        webhook_source_resume(source=paused, actor=Actor.system())
    else:
        one_round()
        webhook_source_resume(source=paused, actor=Actor.system())
        SourceHold.objects.filter(source=paused).update(
            drain_started_at=F("drain_started_at") - timedelta(minutes=5)
        )
        InboxEvent.objects.filter(pk=v1.pk).update(dispatched_at=long_ago, held_at=None)
    assert InboxEvent.objects.get(pk=v2.pk).held_at is not None

    assert one_round() == 1
    assert released() == [[v1.pk]]  # v1 again, v2 still waiting
    processed(v1)
    assert one_round() == 1
    assert released() == [[v2.pk]]
    processed(v2)
    one_round()
    assert hold_of(paused) is None


def test_an_earlier_event_whose_worker_was_lost_goes_again(paused):
    v1, v2 = inbox_events_bulk_create(
        [research_event(entity_id="doc_lease", source_version=v) for v in (1, 2)],
        source=paused,
    )
    one_round()
    webhook_source_resume(source=paused, rate=1, actor=Actor.system())
    assert one_round() == 1  # v1 (its token)
    released()
    # The worker took v1 and died: its lease runs out. v2 would wait for it for ever.
    InboxEvent.objects.filter(pk=v1.pk).update(
        processing_status=ProcessingStatus.PROCESSING,
        attempts=1,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    a_second_passes(paused)
    assert one_round() == 1
    assert released() == [[v1.pk]]
    processed(v1)
    a_second_passes(paused)
    assert one_round() == 1
    assert released() == [[v2.pk]]


# --- the bulk replay job --------------------------------------------------------------


def dead_letters(*bodies) -> list[InboxEvent]:
    return inbox_events_bulk_create(
        list(bodies),
        source=research_source("replayed-sync"),
        processing_status=ProcessingStatus.DEAD_LETTERED,
        attempts=8,
        error_message="search index unavailable",
        dead_letter_cause="exhausted",
    )


def started_job(rate: float | None = None) -> BulkReplayJob:
    job = bulk_replay_job_create(
        source=research_source("replayed-sync"),
        status=ProcessingStatus.DEAD_LETTERED,
        since=None,
        event_ids=[],
        reason="the search index is back",
        rate=rate,
        created_by=Actor.system(),
    )
    return bulk_replay_job_start(job=job, started_by=Actor.system(), publish=False)


def task(job: BulkReplayJob, step: int) -> BulkReplayJob:
    """One task of the job's chain, as a worker runs it: it queues the next one (which the
    test runs itself, with its step)."""
    result = bulk_replay_job_run(
        job_id=job.pk, run=job.run, step=step, seconds=30, publish_next=True
    )
    assert result is not None
    return result


def chunk_events(job: BulkReplayJob) -> list[list[int]]:
    return [
        list(a.event_ids)
        for a in OperatorAction.objects.filter(
            bulk_job=job, action=OperatorAction.Action.BULK_REPLAY
        ).order_by("pk")
    ]


@pytest.mark.parametrize("rate", [None, 100.0], ids=["no-rate", "at-a-rate"])
def test_a_job_replays_a_documents_next_event_once_the_one_before_is_finished(
    rate, operator_client
):
    v7, other, v8, last = dead_letters(
        research_event(entity_id="doc_job", source_version=7),
        research_event(),
        research_event(entity_id="doc_job", source_version=8),
        research_event(),
    )
    job = started_job(rate)

    job = task(job, 0)
    # v7 and the others went back; v8 waits for v7, which is not processed yet.
    assert chunk_events(job) == [[v7.pk, other.pk, last.pk]]
    assert job.waiting_event_pks == [v8.pk]
    assert (job.state, job.processed, job.total) == ("running", 3, 4)
    assert job.next_chunk_at is not None  # looks again a little later
    assert job.next_chunk_at > timezone.now() - timedelta(seconds=1)
    job = task(job, job.task_seq)
    assert len(chunk_events(job)) == 1  # still waiting: nothing replayed
    assert job.waiting_event_pks == [v8.pk]
    page = operator_client.get(
        reverse("admin:webhooks_bulkreplayjob_change", args=[job.pk])
    )
    assert "3/4 (1 waiting for an earlier event of their document)" in (
        page.content.decode()
    )

    processed(v7)
    job = task(job, job.task_seq)
    assert chunk_events(job)[-1] == [v8.pk]
    assert (job.state, job.processed, job.total) == ("succeeded", 4, 4)
    assert job.waiting_event_pks == []


def test_an_earlier_event_still_waiting_for_its_retry_holds_its_documents_replay():
    """v1 failed and waits for its retry (not dead-lettered, not in the job): v2's replay
    waits for it, else v2 would apply first and v1's retry be ignored."""
    v1, v2 = dead_letters(
        research_event(entity_id="doc_retry", source_version=1),
        research_event(entity_id="doc_retry", source_version=2),
    )
    InboxEvent.objects.filter(pk=v1.pk).update(
        processing_status=ProcessingStatus.FAILED,
        next_attempt_at=timezone.now() + timedelta(minutes=5),
    )
    job = task(started_job(), 0)
    assert chunk_events(job) == []
    assert job.waiting_event_pks == [v2.pk]
    assert job.state == "running"


def test_a_cancelled_job_resumed_replays_the_rows_that_waited():
    v1, v2 = dead_letters(
        research_event(entity_id="doc_resume", source_version=1),
        research_event(entity_id="doc_resume", source_version=2),
    )
    job = task(started_job(), 0)
    assert job.waiting_event_pks == [v2.pk]
    bulk_replay_job_cancel(job_id=job.pk, reason="later", cancelled_by=Actor.system())
    processed(v1)
    job = bulk_replay_job_resume(
        job_id=job.pk, resumed_by=Actor.system(), publish=False
    )

    job = task(job, 0)
    assert chunk_events(job) == [[v1.pk], [v2.pk]]
    assert (job.state, job.processed) == ("succeeded", 2)


# --- what the rate says, wherever it is offered -------------------------------------------

PROMISE = "every event counted: a document's next event waits for its own turn"


def command_help(name: str, *subcommand: str) -> str:
    from django.core.management import load_command_class

    parser = load_command_class("webhooks", name).create_parser("manage.py", name)
    if subcommand:
        subparsers = next(
            action
            for action in parser._actions
            if action.__class__.__name__ == "_SubParsersAction"
        )
        parser = subparsers.choices[subcommand[0]]
    return " ".join(parser.format_help().split())


def test_every_place_that_offers_a_rate_says_what_it_does(operator_client):
    from django.urls import reverse
    from django.utils.html import escape

    from tests.console import admin_action
    from tests.webhooks.factories import WebhookSourceFactory

    promise = escape(PROMISE)
    paused_source = WebhookSourceFactory(slug="papers")
    webhook_source_pause(source=paused_source, reason="down", actor=Actor.system())
    resume_page = admin_action(
        operator_client, "webhooks_webhooksource", "resume_selected", paused_source
    )
    add_job = operator_client.get(reverse("admin:webhooks_bulkreplayjob_add"))
    job = started_job(5)
    bulk_replay_job_cancel(job_id=job.pk, reason="later", cancelled_by=Actor.system())
    resume_job = admin_action(
        operator_client, "webhooks_bulkreplayjob", "resume_selected", job
    )
    for page in (resume_page, add_job, resume_job):
        assert page.status_code == 200
        text = page.content.decode()  # help texts are shown as written (Django: safe)
        assert PROMISE in text or promise in text, page.request["PATH_INFO"]
    assert PROMISE in command_help("webhook_source", "resume")
    assert PROMISE in command_help("replay_events")
