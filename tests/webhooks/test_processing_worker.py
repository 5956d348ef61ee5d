"""Faults with REAL processes: Celery workers started as a user starts them, against the test
PostgreSQL and the Redis broker; killed with SIGKILL as a dying machine would be. No beat: the
relay in each worker publishes every row waiting for a message and, from its sweep, the rows
whose message was lost."""

import os
import random
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models import Count
from django.utils import timezone

from research.models import DocumentRevision, ResearchDocument
from tests import processes
from tests.integrations.research.factories import research_event
from tests.threads import document_locked, row_lock_waited_for
from tests.webhooks.factories import InboxEventFactory, inbox_events_bulk_create
from webhooks.models import TERMINAL_STATUSES, InboxAttempt, InboxEvent
from webhooks.processing import WORKER_LOST_ERROR, inbox_event_process

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
]

FAST_SWEEP = {
    "RELAY_SWEEP_INTERVAL_SECONDS": "1",
    "INBOX_REDISPATCH_AFTER_SECONDS": "2",
    "INBOX_PROCESSING_LEASE_SECONDS": "4",
}


def non_terminal_count() -> int:
    return InboxEvent.objects.exclude(processing_status__in=TERMINAL_STATUSES).count()


def wait_all_terminal(workers, timeout: float) -> None:
    workers.wait_until(
        lambda: non_terminal_count() == 0,
        timeout=timeout,
        interval=0.2,
        what="every inbox event to reach a terminal status",
    )


def assert_each_event_applied_at_most_once() -> None:
    per_event = DocumentRevision.objects.values("inbox_event").annotate(n=Count("id"))
    assert not per_event.filter(n__gt=1).exists()
    processed = InboxEvent.objects.filter(processing_status="processed")
    assert DocumentRevision.objects.count() == processed.count()


def second_version_waiting(entity_id: str) -> InboxEvent:
    """The document ``entity_id`` at version 1, processed, and the inbox row of its version
    2, waiting for a worker (whose set locks that document first)."""
    first = InboxEventFactory(
        body=research_event(entity_id=entity_id, source_version=1)
    )
    inbox_event_process(inbox_event_id=first.pk)
    return InboxEventFactory(body=research_event(entity_id=entity_id, source_version=2))


def test_a_backlog_is_recovered_by_a_worker_alone(workers, broker_url):
    """Rows committed while no worker ran: most never published, some whose message was
    lost with the broker's data. Then one worker starts, with no beat: its relay publishes
    the first and its sweep the others; everything reaches a terminal status. On each
    broker the product runs on."""
    old = timezone.now() - timedelta(seconds=30)
    rng = random.Random(4)
    envelopes = []
    for entity in range(12):
        versions = [1, 2, 3, 4, 4]
        rng.shuffle(versions)
        envelopes += [
            research_event(entity_id=f"doc_backlog_{entity}", source_version=v)
            for v in versions
        ]
    rows = inbox_events_bulk_create(envelopes, received_at=old)
    lost_messages = rows[::3]
    InboxEvent.objects.filter(pk__in=[r.pk for r in lost_messages]).update(
        dispatched_at=old
    )
    # A retry whose message was lost, and a row a dead worker left in processing.
    failed = InboxEventFactory(
        body=research_event(source_version=1),
        processing_status="failed",
        attempts=1,
        next_attempt_at=timezone.now() - timedelta(seconds=5),
        dispatched_at=old,
        received_at=old,
    )
    orphan = InboxEventFactory(
        body=research_event(source_version=1),
        processing_status="processing",
        attempts=1,
        lease_expires_at=timezone.now() - timedelta(seconds=5),
        dispatched_at=old,
        received_at=old,
    )
    InboxAttempt.objects.create(
        event=orphan,
        event_received_at=orphan.received_at,
        number=1,
        worker="dead@host",
    )

    env = {**FAST_SWEEP, "CELERY_BROKER_URL": broker_url}
    workers.start(concurrency=2, env=env)
    wait_all_terminal(workers, 90)

    total = len(rows) + 2
    assert InboxEvent.objects.count() == total
    assert_each_event_applied_at_most_once()
    for entity in range(12):
        doc = ResearchDocument.objects.get(entity_id=f"doc_backlog_{entity}")
        assert doc.current_source_version == 4
        versions = list(
            doc.revisions.order_by("id").values_list("source_version", flat=True)
        )
        assert versions == sorted(set(versions))
    statuses = dict(
        InboxEvent.objects.values_list("processing_status").annotate(n=Count("id"))
    )
    # Per entity: 4 distinct versions, one repeated; arrival order decides only what is
    # applied along the way, never the end state.
    assert statuses.get("ignored_duplicate_version", 0) >= 12
    assert statuses.get("dead_lettered", 0) == 0
    failed.refresh_from_db()
    orphan.refresh_from_db()
    assert (failed.processing_status, failed.attempts) == ("processed", 2)
    assert (orphan.processing_status, orphan.attempts) == ("processed", 2)
    lost = InboxAttempt.objects.get(event=orphan, number=1)
    assert (lost.outcome, lost.error) == ("retry", WORKER_LOST_ERROR)
    assert InboxAttempt.objects.filter(finished_at__isnull=True).count() == 0


def test_worker_killed_mid_batch_then_restarted_loses_and_repeats_nothing(
    workers, broker_url
):
    """On each broker the product runs on (Redis, RabbitMQ): the killed worker's unacked
    messages come back, or are lost with it; either way nothing is lost or applied twice."""
    env = {**FAST_SWEEP, "CELERY_BROKER_URL": broker_url}
    count = 900
    envelopes = [
        research_event(entity_id=f"doc_kill_{i % 300}", source_version=1 + i // 300)
        for i in range(count)
    ]
    # Committed, waiting for a message: the first worker's relay publishes them in batches.
    inbox_events_bulk_create(envelopes)

    first = workers.start(concurrency=2, name="w1", env=env)
    processes.wait_until(
        lambda: InboxEvent.objects.filter(processing_status="processed").count() >= 100,
        timeout=90,
        interval=0.05,
        what="the first worker to be under way",
    )
    first.kill()
    done_at_kill = InboxEvent.objects.filter(
        processing_status__in=TERMINAL_STATUSES
    ).count()
    assert done_at_kill < count, (
        "the batch finished before the kill: nothing was tested"
    )

    # No beat: the second worker's relay sweeps what the kill left behind (rows leased by
    # the dead worker, batches claimed but not run, messages lost with it).
    workers.start(concurrency=2, name="w2", env=env)
    wait_all_terminal(workers, 180)

    assert InboxEvent.objects.count() == count
    assert_each_event_applied_at_most_once()
    # A row caught mid-flight by the kill waits for its lease to expire; newer versions of
    # its document may apply meanwhile, and then it is rightly out of order.
    assert set(InboxEvent.objects.values_list("processing_status", flat=True)) <= {
        "processed",
        "ignored_out_of_order",
    }
    assert ResearchDocument.objects.count() == 300
    assert not ResearchDocument.objects.exclude(current_source_version=3).exists()
    for doc in ResearchDocument.objects.all():
        versions = list(
            doc.revisions.order_by("id").values_list("source_version", flat=True)
        )
        assert versions == sorted(set(versions)) and versions[-1] == 3
    assert InboxAttempt.objects.filter(finished_at__isnull=True).count() == 0
    # Rows caught mid-flight by the kill were claimed again after their lease expired.
    reclaimed = InboxAttempt.objects.filter(error=WORKER_LOST_ERROR)
    assert all(
        a.event.attempts == a.number + 1 for a in reclaimed.select_related("event")
    )
    assert "w2@" in " ".join(
        InboxAttempt.objects.values_list("worker", flat=True).distinct()
    )


def test_poison_event_dead_letters_after_exactly_max_attempts(workers, broker_url):
    """On each broker the product runs on: the retries' messages and their delays are the
    relay's, whatever carries them."""
    env = {
        **FAST_SWEEP,
        "CELERY_BROKER_URL": broker_url,
        "INBOX_MAX_ATTEMPTS": "4",
        "INBOX_RETRY_BASE_SECONDS": "0.2",
        "INBOX_RETRY_MAX_SECONDS": "0.8",
        "INBOX_LOCK_TIMEOUT_MS": "200",
    }
    poison = second_version_waiting("doc_poison")
    # Every attempt times out on the lock: a transient failure that never passes. The
    # worker's relay publishes the event, then each retry once it is due.
    with document_locked("doc_poison"):
        workers.start(concurrency=2, env=env)
        workers.wait_until(
            lambda: InboxEvent.objects.filter(
                pk=poison.pk, processing_status="dead_lettered"
            ).exists(),
            what="the poison event to be dead-lettered",
        )
        time.sleep(3)  # the relay, its sweeps and any stray message get their chance

    poison.refresh_from_db()
    assert poison.attempts == 4
    assert "stayed locked by another transaction" in poison.error_message
    outcomes = list(
        InboxAttempt.objects.filter(event=poison)
        .order_by("number")
        .values_list("number", "outcome")
    )
    assert outcomes == [
        (1, "retry"),
        (2, "retry"),
        (3, "retry"),
        (4, "dead_lettered"),
    ]
    doc = ResearchDocument.objects.get(entity_id="doc_poison")
    assert doc.current_source_version == 1


def test_a_row_of_weeks_ago_waiting_again_is_processed_by_a_running_worker(workers):
    """The relay's claims read the days from yesterday on while nothing older waits; a row of
    weeks ago that starts waiting again while a worker runs (an event replayed by an
    operator) is found by its look back within ``RELAY_LOOK_BACK_SECONDS``, not left to the
    sweep (an hour away here). PostgreSQL's partitions; on SQLite the same rows are read."""
    fresh = InboxEventFactory(body=research_event(entity_id="doc_look_back_fresh"))
    workers.start(
        concurrency=1,
        env={"RELAY_SWEEP_INTERVAL_SECONDS": "3600", "RELAY_LOOK_BACK_SECONDS": "1"},
    )
    workers.wait_until(
        lambda: InboxEvent.objects.get(pk=fresh.pk).processing_status == "processed",
        timeout=30,
        interval=0.1,
        what="the fresh event processed",
    )
    old = InboxEventFactory(
        body=research_event(entity_id="doc_look_back_old"),
        received_at=timezone.now() - timedelta(days=20),
    )
    started = time.monotonic()
    workers.wait_until(
        lambda: InboxEvent.objects.get(pk=old.pk).processing_status == "processed",
        timeout=30,
        interval=0.1,
        what="the row of weeks ago processed",
    )
    print(f"\nprocessed {time.monotonic() - started:.2f} s after it started waiting")
    assert ResearchDocument.objects.filter(entity_id="doc_look_back_old").exists()


def _pool_processes(worker: processes.Process) -> list[int]:
    """The pids of the worker's pool processes: the children of its main process."""
    children = Path(f"/proc/{worker.pid}/task/{worker.pid}/children").read_text()
    return [int(pid) for pid in children.split()]


def test_a_set_whose_pool_process_dies_is_claimed_before_it_runs_again(workers):
    """A set holds no claim while it runs (docs/subsystems/processing.md, "A set in one
    transaction"): its pool process killed mid-set leaves its row ``received`` with no
    attempt. The message comes back delivered again (reject on worker lost), and that run
    claims the row first, committed (``processing``, attempt 1 open): had the row killed its
    worker once more, the attempt would count towards INBOX_MAX_ATTEMPTS."""
    # A lock wait longer than the test waits for the claim: a set run again would still be
    # waiting for the document when it gives up.
    env = {"INBOX_LOCK_TIMEOUT_MS": "55000", "INBOX_BATCH_SIZE": "1"}
    event = second_version_waiting("doc_dies")
    with document_locked("doc_dies"):
        worker = workers.start(env=env)
        workers.wait_until(row_lock_waited_for, what="the set to wait for the document")
        event.refresh_from_db()
        assert (event.processing_status, event.attempts) == ("received", 0)
        assert not InboxAttempt.objects.filter(event=event).exists()
        (pool,) = _pool_processes(worker)
        os.kill(pool, signal.SIGKILL)

        workers.wait_until(
            lambda: InboxEvent.objects.filter(
                pk=event.pk, processing_status="processing", attempts=1
            ).exists(),
            timeout=30,
            what="the message delivered again to claim its row first",
        )
        (attempt,) = InboxAttempt.objects.filter(event=event)
        assert (attempt.number, attempt.outcome, attempt.finished_at) == (
            1,
            "started",
            None,
        )
    workers.wait_until(
        lambda: InboxEvent.objects.filter(
            pk=event.pk, processing_status="processed"
        ).exists(),
        what="the event to be processed once the document is free",
    )
    event.refresh_from_db()
    assert event.attempts == 1
    assert list(
        InboxAttempt.objects.filter(event=event).values_list("number", "outcome")
    ) == [(1, "succeeded")]
    assert DocumentRevision.objects.filter(inbox_event=event).count() == 1
