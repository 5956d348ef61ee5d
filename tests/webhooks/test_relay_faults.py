"""The outbox relay under faults, with REAL processes (docs/subsystems/relay.md):
a relay killed with SIGKILL while it publishes, rows committed while no relay runs, the broker
restarted under load, and many copies of one event at once. In every case each accepted event
is processed, and applied at most once."""

from __future__ import annotations

import functools
import threading

import pytest
import requests
from django.db import connection, transaction
from django.db.models import Count

from chaos.services import PrivateRedis
from core.models import RelayHeartbeat
from research.models import DocumentRevision, ResearchDocument
from tests import processes
from tests.integrations.research.factories import research_event
from tests.threads import run_together
from tests.webhooks.factories import (
    WebhookSourceFactory,
    encode,
    inbox_events_bulk_create,
    signed_headers,
)
from webhooks.models import TERMINAL_STATUSES, InboxEvent, ProcessingStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAST_SWEEP = {
    "RELAY_SWEEP_INTERVAL_SECONDS": "1",
    "INBOX_REDISPATCH_AFTER_SECONDS": "2",
    "INBOX_PROCESSING_LEASE_SECONDS": "6",
}


def relay_process(tmp_path, name: str, env: dict) -> processes.Process:
    """``manage.py relay``: a relay apart from the workers."""
    return processes.Process(
        processes.relay_command(),
        processes.child_env(**env),
        tmp_path / f"relay-{name}.log",
    )


def terminal() -> int:
    return InboxEvent.objects.filter(processing_status__in=TERMINAL_STATUSES).count()


def assert_each_applied_once(count: int) -> None:
    assert InboxEvent.objects.count() == count
    assert terminal() == count
    assert set(InboxEvent.objects.values_list("processing_status", flat=True)) <= {
        "processed",
        "ignored_out_of_order",
    }
    per_event = DocumentRevision.objects.values("inbox_event").annotate(n=Count("id"))
    assert not per_event.filter(n__gt=1).exists()
    assert (
        DocumentRevision.objects.count()
        == InboxEvent.objects.filter(processing_status="processed").count()
    )


def terminal_while_alive(worker: processes.Process) -> int:
    """``terminal()``, failing at once if ``worker`` has ended."""
    assert worker.alive(), f"the worker ended:\n{worker.log()[-4000:]}"
    return terminal()


def bodies(count: int, tag: str) -> list[dict]:
    return [
        research_event(entity_id=f"doc_{tag}_{i % 100}", source_version=1 + i // 100)
        for i in range(count)
    ]


def test_a_relay_killed_while_it_publishes_loses_nothing(tmp_path, running, broker_url):
    """Workers that relay nothing, and one relay apart (``manage.py relay``), killed with
    SIGKILL mid-stream; rows committed while no relay runs wait; a new relay publishes
    them, and the rows the killed one had stamped but not published, from its sweep."""
    env = {**FAST_SWEEP, "CELERY_BROKER_URL": broker_url}
    inbox_events_bulk_create(bodies(600, "a"))
    for name in ("w1", "w2"):
        running(
            processes.celery_worker(
                tmp_path, name=name, env={**env, "RELAY_ENABLED": "false"}
            )
        )
    first = running(relay_process(tmp_path, "first", env))
    processes.wait_until(
        lambda: terminal() >= 50, timeout=90, interval=0.05, what="work under way"
    )
    first.kill()
    assert terminal() < 600, "everything was done before the kill: nothing was tested"

    # No relay runs now: what is committed meanwhile waits, it is not lost.
    inbox_events_bulk_create(bodies(300, "b"))
    waiting = InboxEvent.objects.filter(dispatched_at__isnull=True).count()
    assert waiting >= 300

    running(relay_process(tmp_path, "second", env))
    processes.wait_until(
        lambda: terminal() == 900, timeout=180, interval=0.2, what="all 900 processed"
    )
    assert_each_applied_once(900)


def _relays_seen() -> dict[int, bool]:
    """The relays that reported lately, by the pid of their worker: whether each publishes."""
    return {
        int(relay_id.rsplit(":", 1)[1]): active
        for relay_id, active in RelayHeartbeat.objects.values_list("relay_id", "active")
    }


def test_the_publishing_relays_worker_killed_another_relay_takes_over(
    tmp_path, running, broker_url
):
    """Two workers with a relay each: one relay publishes, the other stands by
    (docs/subsystems/relay.md, "One relay publishes at a time"). kill -9 of the publishing one's
    worker ends its lock with its connection: the other relay takes over within its standby
    poll, and every event is processed once, those committed after the kill included."""
    env = {
        **FAST_SWEEP,
        "CELERY_BROKER_URL": broker_url,
        "RELAY_HEARTBEAT_SECONDS": "0.5",
        "RELAY_STANDBY_POLL_SECONDS": "0.2",
    }
    workers = [
        running(processes.celery_worker(tmp_path, name=name, env=env))
        for name in ("w1", "w2")
    ]
    by_pid = {worker.pid: worker for worker in workers}
    processes.wait_until(
        lambda: (
            set(_relays_seen()) == set(by_pid)
            and sorted(_relays_seen().values()) == [False, True]
        ),
        timeout=60,
        what="one relay publishing and one standing by",
    )
    inbox_events_bulk_create(bodies(300, "a"))
    processes.wait_until(
        lambda: terminal() == 300, timeout=120, interval=0.1, what="300 processed"
    )
    assert sorted(_relays_seen().values()) == [False, True]
    (publishing,) = [pid for pid, active in _relays_seen().items() if active]
    by_pid[publishing].kill()
    (survivor,) = [pid for pid in by_pid if pid != publishing]

    inbox_events_bulk_create(bodies(300, "b"))
    processes.wait_until(
        lambda: terminal() == 600, timeout=120, interval=0.1, what="600 processed"
    )
    processes.wait_until(
        lambda: _relays_seen().get(survivor) is True,
        timeout=30,
        what="the surviving relay to say it publishes",
    )
    assert_each_applied_once(600)


def test_rows_committed_while_the_broker_restarts_are_all_processed(tmp_path, running):
    """The broker goes away under load and comes back, four times: publishes fail meanwhile
    (their stamps roll back), the worker that lost its connection reconnects each time (it
    is never the process that ends: docs/scaling.md, "When the broker goes away"), and the
    relay publishes everything once the broker is back."""
    redis = PrivateRedis(tmp_path)
    redis.start()
    try:
        env = {**FAST_SWEEP, "CELERY_BROKER_URL": redis.url}
        worker = running(processes.celery_worker(tmp_path, concurrency=2, env=env))
        for restart, tag in enumerate("cdef"):
            inbox_events_bulk_create(bodies(300, tag))
            processes.wait_until(
                lambda done=restart * 300 + 30: terminal() >= done,
                timeout=90,
                interval=0.05,
                what="work under way",
            )
            redis.stop()
            inbox_events_bulk_create(bodies(100, tag.upper()))
            redis.start()
            processes.wait_until(
                lambda done=(restart + 1) * 400: terminal_while_alive(worker) == done,
                timeout=120,
                interval=0.2,
                what="all processed",
            )
        assert worker.alive(), worker.log()[-4000:]
        assert_each_applied_once(1600)
    finally:
        redis.destroy()


def test_a_worker_that_loses_the_broker_while_a_task_waits_keeps_running(
    tmp_path, running
):
    """The broker goes away while the worker has a message taken and not acknowledged (its
    task waits on a document's lock) and waits on the broker for the next: the worker
    reconnects, the event is processed once the broker is back, and so is the next one."""
    redis = PrivateRedis(tmp_path)
    redis.start()
    try:
        env = {
            **FAST_SWEEP,
            "CELERY_BROKER_URL": redis.url,
            "INBOX_BATCH_SIZE": "1",
            "INBOX_LOCK_TIMEOUT_MS": "20000",
        }
        worker = running(processes.celery_worker(tmp_path, concurrency=2, env=env))
        inbox_events_bulk_create(
            [research_event(entity_id="doc_held", source_version=1)]
        )
        processes.wait_until(
            lambda: terminal() == 1, timeout=60, what="the first event"
        )

        locked, release = threading.Event(), threading.Event()

        def hold_the_document() -> None:
            try:
                with transaction.atomic():
                    ResearchDocument.objects.select_for_update().get(
                        entity_id="doc_held"
                    )
                    locked.set()
                    release.wait(timeout=60)
            finally:
                connection.close()

        holder = threading.Thread(target=hold_the_document)
        holder.start()
        try:
            assert locked.wait(timeout=30)
            (waiting,) = inbox_events_bulk_create(
                [research_event(entity_id="doc_held", source_version=2)]
            )
            processes.wait_until(
                lambda: InboxEvent.objects.filter(
                    pk=waiting.pk, processing_status=ProcessingStatus.PROCESSING
                ).exists(),
                timeout=60,
                what="the second event claimed",
            )
            redis.stop()
        finally:
            release.set()
            holder.join(timeout=30)
        redis.start()
        processes.wait_until(
            lambda: terminal_while_alive(worker) == 2,
            timeout=120,
            what="both processed",
        )
        # The worker consumes from the broker again: an event committed now is processed.
        inbox_events_bulk_create(
            [research_event(entity_id="doc_held", source_version=3)]
        )
        processes.wait_until(
            lambda: terminal_while_alive(worker) == 3,
            timeout=60,
            what="the third event",
        )
        assert_each_applied_once(3)
        assert (
            ResearchDocument.objects.get(entity_id="doc_held").current_source_version
            == 3
        )
    finally:
        redis.destroy()


def test_fifty_copies_of_one_event_at_once_are_one_row_and_one_application(
    tmp_path, running, broker_url
):
    port = processes.free_port()
    running(processes.gunicorn(tmp_path, port=port, workers=2))
    url = f"http://127.0.0.1:{port}"
    processes.wait_http_ok(f"{url}/healthz")
    env = {**FAST_SWEEP, "CELERY_BROKER_URL": broker_url}
    running(processes.celery_worker(tmp_path, concurrency=2, env=env))
    WebhookSourceFactory(slug="fifty")
    body = research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])

    def send() -> int:
        with requests.Session() as session:
            return session.post(
                f"{url}/webhooks/fifty/", data=raw, headers=headers, timeout=60
            ).status_code

    statuses, errors = run_together([functools.partial(send)] * 50)

    assert not errors, errors
    assert sorted(statuses) == [200] * 49 + [202]
    row = InboxEvent.objects.get()
    assert row.delivery_count == 50
    processes.wait_until(
        lambda: terminal() == 1, timeout=60, what="the event processed"
    )
    row.refresh_from_db()
    assert row.processing_status == "processed"
    assert row.attempts == 1
    assert DocumentRevision.objects.filter(inbox_event=row).count() == 1


def test_every_relay_and_worker_killed_at_once_loses_and_repeats_nothing(
    tmp_path, running, broker_url
):
    """Workers (each with its relay) and a relay apart, all killed with SIGKILL at the same
    moment mid-stream: rows stamped but not published, messages taken but not acknowledged,
    events claimed but not finished. Rows committed while nothing runs wait. One worker
    started afterwards processes every event, each applied once. On each broker the
    product runs on."""
    env = {**FAST_SWEEP, "CELERY_BROKER_URL": broker_url}
    inbox_events_bulk_create(bodies(600, "e"))
    everyone = [
        running(processes.celery_worker(tmp_path, name=name, env=env))
        for name in ("w1", "w2")
    ]
    everyone.append(running(relay_process(tmp_path, "apart", env)))
    processes.wait_until(
        lambda: terminal() >= 50, timeout=90, interval=0.05, what="work under way"
    )
    for process in everyone:
        process.kill()
    assert terminal() < 600, "everything was done before the kill: nothing was tested"

    inbox_events_bulk_create(bodies(200, "f"))
    running(processes.celery_worker(tmp_path, name="after", env=env))
    processes.wait_until(
        lambda: terminal() == 800, timeout=240, interval=0.2, what="all 800 processed"
    )
    assert_each_applied_once(800)
