"""The processing service on the real PostgreSQL: claims, leases, retries, dead letters."""

import time
from datetime import timedelta

import pytest
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from research.models import DocumentRevision, ResearchDocument
from tests.integrations.research.factories import research_event
from tests.threads import document_locked, row_locked
from tests.webhooks.factories import InboxEventFactory
from webhooks import metrics
from webhooks.models import InboxAttempt, InboxEvent, WebhookSource
from webhooks.outbox import INBOX_OUTBOX
from webhooks.processing import (
    WORKER_LOST_ERROR,
    _batch_claim_fast,
    _claimed_event_run,
    _inbox_event_claim,
    inbox_event_process,
    inbox_events_process,
    inbox_retry_delay,
)
from webhooks.tasks import process_inbox_events_task


def sample(metric, suffix: str = "_total") -> float:
    name = metric._name
    for family in metric.collect():
        for s in family.samples:
            if s.name == name + suffix:
                return s.value
    raise AssertionError(f"no sample {name}{suffix}")


@pytest.mark.django_db
@pytest.mark.parametrize("attempt", [1, 2, 5, 30])
def test_retry_delay_is_full_jitter_below_the_capped_exponential(settings, attempt):
    settings.INBOX_RETRY_BASE_SECONDS = 2
    settings.INBOX_RETRY_MAX_SECONDS = 60
    cap = min(60, 2 * 2 ** (attempt - 1))
    delays = [inbox_retry_delay(attempt=attempt) for _ in range(300)]
    assert all(0 <= d <= cap for d in delays)
    # Full jitter spreads over the whole interval, not around the cap.
    assert min(delays) < cap * 0.2
    assert max(delays) > cap * 0.8


@pytest.mark.django_db
def test_a_terminal_row_is_never_processed_again():
    event = InboxEventFactory(body=research_event(source_version=1))
    first = inbox_event_process(inbox_event_id=event.pk, worker="a")
    again = inbox_event_process(inbox_event_id=event.pk, worker="b")
    assert (first.status, first.skipped) == ("processed", "")
    assert (again.status, again.skipped) == ("processed", "terminal")
    event.refresh_from_db()
    assert event.attempts == 1
    assert DocumentRevision.objects.filter(inbox_event=event).count() == 1


@pytest.mark.django_db
def test_a_row_leased_by_a_live_attempt_is_skipped():
    event = InboxEventFactory(
        processing_status="processing",
        attempts=1,
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )
    outcome = inbox_event_process(inbox_event_id=event.pk, worker="b")
    assert outcome.skipped == "leased"
    event.refresh_from_db()
    assert (event.processing_status, event.attempts) == ("processing", 1)
    assert not InboxAttempt.objects.filter(event=event).exists()


@pytest.mark.django_db
def test_a_failed_row_is_not_retried_before_its_time():
    event = InboxEventFactory(
        processing_status="failed",
        attempts=1,
        next_attempt_at=timezone.now() + timedelta(minutes=5),
    )
    outcome = inbox_event_process(inbox_event_id=event.pk, worker="b")
    assert outcome.skipped == "not_due"
    event.refresh_from_db()
    assert (event.processing_status, event.attempts) == ("failed", 1)


@pytest.mark.django_db
def test_an_expired_lease_closes_the_lost_attempt_and_processes_the_row():
    event = InboxEventFactory(
        body=research_event(source_version=1),
        processing_status="processing",
        attempts=1,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    InboxAttempt.objects.create(
        event=event,
        event_received_at=event.received_at,
        number=1,
        worker="dead-worker",
    )
    outcome = inbox_event_process(inbox_event_id=event.pk, worker="w2")
    assert outcome.status == "processed"
    event.refresh_from_db()
    assert event.attempts == 2
    lost, second = InboxAttempt.objects.filter(event=event).order_by("number")
    assert (lost.outcome, lost.error, lost.worker) == (
        "retry",
        WORKER_LOST_ERROR,
        "dead-worker",
    )
    assert lost.finished_at is not None
    assert (second.number, second.outcome, second.worker) == (2, "succeeded", "w2")


@pytest.mark.django_db
def test_a_worker_lost_on_the_last_attempt_dead_letters(settings):
    settings.INBOX_MAX_ATTEMPTS = 2
    before = sample(metrics.DEAD_LETTERS)
    event = InboxEventFactory(
        processing_status="processing",
        attempts=2,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    outcome = inbox_event_process(inbox_event_id=event.pk, worker="w2")
    event.refresh_from_db()
    assert outcome.status == event.processing_status == "dead_lettered"
    assert event.error_message == WORKER_LOST_ERROR
    assert event.attempts == 2
    assert sample(metrics.DEAD_LETTERS) == before + 1


@pytest.mark.django_db
@pytest.mark.parametrize("claimed_by", ["batch", "one_by_one"])
def test_a_run_whose_claim_was_taken_over_applies_nothing(claimed_by):
    event = InboxEventFactory(body=research_event(source_version=1))
    if claimed_by == "batch":
        (claim,) = _batch_claim_fast(ids=[event.pk], worker="slow")
    else:
        claim = _inbox_event_claim(inbox_event_id=event.pk, worker="slow")
    # The lease expired and another run claimed the row meanwhile.
    type(event).objects.filter(pk=event.pk).update(attempts=claim.event.attempts + 1)
    outcome = _claimed_event_run(claim)
    assert outcome.skipped == "lease_lost"
    assert not DocumentRevision.objects.exists()
    assert not ResearchDocument.objects.exists()
    event.refresh_from_db()
    assert (event.processing_status, event.attempts) == ("processing", 2)
    # The taken-over attempt is not closed by the run that lost it.
    assert InboxAttempt.objects.get(event=event).finished_at is None


@pytest.mark.django_db
def test_stale_and_latency_metrics_are_recorded():
    stale_before = sample(metrics.WEBHOOK_STALE_EVENTS)
    latency_before = sample(metrics.WEBHOOK_PROCESSING_LATENCY, "_count")
    for version in (2, 1, 2):
        event = InboxEventFactory(
            body=research_event(entity_id="doc_m", source_version=version)
        )
        inbox_event_process(inbox_event_id=event.pk)
    assert sample(metrics.WEBHOOK_STALE_EVENTS) == stale_before + 2
    assert sample(metrics.WEBHOOK_PROCESSING_LATENCY, "_count") == latency_before + 3


@pytest.mark.django_db
def test_task_body_takes_a_list_of_ids_and_returns_their_outcomes():
    first, second = (
        InboxEventFactory(body=research_event(source_version=1)) for _ in range(2)
    )
    assert process_inbox_events_task.apply(([first.pk, second.pk],)).get() == [
        "processed",
        "processed",
    ]
    assert process_inbox_events_task.apply(([second.pk, 10**12, first.pk],)).get() == [
        "terminal",
        "missing",
        "terminal",
    ]
    assert process_inbox_events_task.apply(([],)).get() == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("message", "claimed_first"),
    [
        ({}, False),
        ({"again": True}, True),  # the relay's sweep
        ({"retries": 1}, True),  # the task's own retry (autoretry)
    ],
    ids=["first_delivery", "swept", "retried"],
)
def test_a_message_that_may_have_run_before_claims_its_rows_first(
    message, claimed_first
):
    """docs/subsystems/processing.md, "A set in one transaction": only a message's first
    delivery runs its rows as sets without a claim committed first. (One the broker
    delivered again: ``test_processing_worker.py``, with a real worker and broker.)"""
    event = InboxEventFactory(body=research_event(source_version=1))
    args = ([event.pk], True) if message.get("again") else ([event.pk],)
    options = {k: v for k, v in message.items() if k != "again"}
    with CaptureQueriesContext(connection) as queries:
        assert process_inbox_events_task.apply(args, **options).get() == ["processed"]
    sql = " ".join(q["sql"] for q in queries.captured_queries)
    assert ("WITH claimed AS" in sql) == claimed_first
    assert ("closed AS" in sql) == (not claimed_first)


@pytest.mark.django_db
def test_a_batch_sorts_out_every_row_and_answers_in_the_order_given():
    now = timezone.now()
    fresh = [InboxEventFactory(body=research_event(source_version=1)) for _ in range(3)]
    done = InboxEventFactory(processing_status="processed")
    leased = InboxEventFactory(
        processing_status="processing",
        attempts=1,
        lease_expires_at=now + timedelta(minutes=5),
    )
    not_due = InboxEventFactory(
        processing_status="failed",
        attempts=1,
        next_attempt_at=now + timedelta(minutes=5),
    )
    due = InboxEventFactory(
        body=research_event(source_version=1),
        processing_status="failed",
        attempts=1,
        next_attempt_at=now - timedelta(seconds=1),
    )
    lost = InboxEventFactory(
        body=research_event(source_version=1),
        processing_status="processing",
        attempts=1,
        lease_expires_at=now - timedelta(seconds=1),
    )
    ids = [
        fresh[2].pk,
        done.pk,
        10**12,
        leased.pk,
        fresh[0].pk,
        not_due.pk,
        lost.pk,
        due.pk,
        fresh[1].pk,
    ]

    outcomes = inbox_events_process(ids=ids, worker="w")

    assert [(o.status, o.skipped) for o in outcomes] == [
        ("processed", ""),
        ("processed", "terminal"),
        ("", "missing"),
        ("processing", "leased"),
        ("processed", ""),
        ("failed", "not_due"),
        ("processed", ""),
        ("processed", ""),
        ("processed", ""),
    ]
    for event in [*fresh, due, lost]:
        event.refresh_from_db()
        assert event.processing_status == "processed"
        assert event.lease_expires_at is None
        assert DocumentRevision.objects.filter(inbox_event=event).count() == 1
    assert [e.attempts for e in fresh] == [1, 1, 1]
    assert (due.attempts, lost.attempts) == (2, 2)
    for event, state in ((leased, "processing"), (not_due, "failed")):
        event.refresh_from_db()
        assert (event.processing_status, event.attempts) == (state, 1)


@pytest.mark.django_db
def test_an_id_twice_in_a_batch_is_processed_once():
    event = InboxEventFactory(body=research_event(source_version=1))
    outcomes = inbox_events_process(ids=[event.pk, event.pk], worker="w")
    assert outcomes[0].status == "processed"
    event.refresh_from_db()
    assert event.attempts == 1
    assert InboxAttempt.objects.filter(event=event).count() == 1
    assert DocumentRevision.objects.filter(inbox_event=event).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_failing_event_rolls_back_nothing_of_the_others_in_its_batch(settings):
    """Each event runs in its own transaction: a handler whose query the database refuses
    (the transaction is aborted) fails its own event only; the events before and after it in
    the batch are applied and committed."""
    settings.WEBHOOK_INTEGRATIONS = {
        **settings.WEBHOOK_INTEGRATIONS,
        "failing-sql": "tests.webhooks.failing_integration.integration",
    }
    failing = WebhookSource.objects.create(slug="failing", handler="failing-sql")
    before = InboxEventFactory(body=research_event(entity_id="doc_b1"))
    broken = InboxEventFactory(source=failing)
    after = InboxEventFactory(body=research_event(entity_id="doc_b2"))

    outcomes = inbox_events_process(ids=[before.pk, broken.pk, after.pk], worker="w")

    assert [o.status for o in outcomes] == ["processed", "failed", "processed"]
    assert outcomes[1].retry_at is not None
    statuses = dict(
        InboxEvent.objects.filter(pk__in=[before.pk, broken.pk, after.pk]).values_list(
            "pk", "processing_status"
        )
    )
    assert statuses == {
        before.pk: "processed",
        broken.pk: "failed",
        after.pk: "processed",
    }
    assert set(ResearchDocument.objects.values_list("entity_id", flat=True)) == {
        "doc_b1",
        "doc_b2",
    }
    assert "no_such_column" in InboxEvent.objects.get(pk=broken.pk).error_message


@pytest.mark.django_db(transaction=True)
def test_transient_failures_back_off_then_dead_letter_after_max_attempts(settings):
    settings.INBOX_MAX_ATTEMPTS = 3
    settings.INBOX_RETRY_BASE_SECONDS = 10
    settings.INBOX_RETRY_MAX_SECONDS = 15
    settings.INBOX_LOCK_TIMEOUT_MS = 50
    inbox_event_process(
        inbox_event_id=InboxEventFactory(
            body=research_event(entity_id="doc_p", source_version=1)
        ).pk
    )
    event = InboxEventFactory(body=research_event(entity_id="doc_p", source_version=2))
    dead_before = sample(metrics.DEAD_LETTERS)

    with document_locked("doc_p", at_most=60):
        for number in (1, 2):
            started = timezone.now()
            outcome = inbox_event_process(inbox_event_id=event.pk, worker="w")
            event.refresh_from_db()
            assert outcome.status == event.processing_status == "failed"
            assert event.attempts == number
            assert "stayed locked by another transaction" in event.error_message
            cap = min(15, 10 * 2 ** (number - 1))
            assert started <= event.next_attempt_at
            assert event.next_attempt_at <= timezone.now() + timedelta(seconds=cap)
            assert outcome.retry_at == event.next_attempt_at
            # No message for the retry yet: the relay publishes it once it is due. Full
            # jitter may draw a time already past: the retry is set to a later one, so
            # that "not due" is what is checked.
            assert event.dispatched_at is None
            type(event).objects.filter(pk=event.pk).update(
                next_attempt_at=timezone.now() + timedelta(seconds=cap)
            )
            assert inbox_event_process(inbox_event_id=event.pk).skipped == "not_due"
            with transaction.atomic():
                assert INBOX_OUTBOX.claim(10) == (0, [])
            type(event).objects.filter(pk=event.pk).update(
                next_attempt_at=timezone.now() - timedelta(seconds=1)
            )
            with transaction.atomic():
                taken, publications = INBOX_OUTBOX.claim(10)
            assert (taken, [p.args for p in publications]) == (1, [[[event.pk]]])
        outcome = inbox_event_process(inbox_event_id=event.pk, worker="w")

    event.refresh_from_db()
    assert outcome.status == event.processing_status == "dead_lettered"
    assert event.attempts == 3
    assert "stayed locked by another transaction" in event.error_message
    assert event.next_attempt_at is None
    outcomes = list(
        InboxAttempt.objects.filter(event=event)
        .order_by("number")
        .values_list("number", "outcome")
    )
    assert outcomes == [(1, "retry"), (2, "retry"), (3, "dead_lettered")]
    assert sample(metrics.DEAD_LETTERS) == dead_before + 1
    assert ResearchDocument.objects.get(entity_id="doc_p").current_source_version == 1


def session_lock_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_set_whose_document_stays_locked_gives_up_after_the_lock_timeout(settings):
    """The documents' lock sets its own transaction's lock_timeout: a set whose document
    another transaction holds gives up after INBOX_LOCK_TIMEOUT_MS and runs per event, whose
    events give up as long after (the session's timeout, set for them); the session is left
    with the lock_timeout it had."""
    settings.INBOX_LOCK_TIMEOUT_MS = 50
    inbox_event_process(
        inbox_event_id=InboxEventFactory(
            body=research_event(entity_id="doc_set_locked", source_version=1)
        ).pk
    )
    events = [
        InboxEventFactory(
            body=research_event(entity_id="doc_set_locked", source_version=version)
        )
        for version in (2, 3)
    ]
    before = session_lock_timeout()
    with document_locked("doc_set_locked", at_most=60):
        started = time.monotonic()
        outcomes = inbox_events_process(ids=[e.pk for e in events], worker="w")
        elapsed = time.monotonic() - started
    assert [o.status for o in outcomes] == ["failed", "failed"]
    assert elapsed < 10  # not the 60 s the other transaction holds the lock
    for event in events:
        event.refresh_from_db()
        assert "stayed locked by another transaction" in event.error_message
    assert session_lock_timeout() == before
    assert (
        ResearchDocument.objects.get(entity_id="doc_set_locked").current_source_version
        == 1
    )


@pytest.mark.django_db(transaction=True)
def test_the_batch_claim_gives_up_on_a_row_locked_for_longer_than_the_lock_timeout(
    settings,
):
    """The claim's statement sets its own lock_timeout: a row another transaction holds
    fails the claim after INBOX_LOCK_TIMEOUT_MS (the task retries), not after the other
    transaction; nothing is claimed, and the session keeps its lock_timeout."""
    settings.INBOX_LOCK_TIMEOUT_MS = 50
    event = InboxEventFactory(body=research_event(entity_id="doc_claim_locked"))
    before = session_lock_timeout()
    with row_locked(
        lambda: InboxEvent.objects.select_for_update().get(pk=event.pk), at_most=60
    ):
        started = time.monotonic()
        with pytest.raises(OperationalError, match="lock timeout"):
            _batch_claim_fast(ids=[event.pk], worker="w")
        assert time.monotonic() - started < 10  # not the 60 s the lock is held
    assert session_lock_timeout() == before
    event.refresh_from_db()
    assert (event.processing_status, event.attempts) == ("received", 0)
    assert not InboxAttempt.objects.filter(event=event).exists()
